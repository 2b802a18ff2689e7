"""MATH-500 task: data, boxed extraction, math-verify scoring, hostile answers, threads.

    python -m pytest tests/test_task_math500.py -q
"""
import doctest
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

import tasks.math500
from tasks.base import TaskDataError
from tasks.math500 import MATH500, last_boxed

CONF = Path(__file__).parents[1] / "conf" / "task" / "math500.yaml"

HOSTILE = [
    r"\boxed{2^{2^{2^{2^{100}}}}}",  # power tower: sympy would never finish
    r"\boxed{9^9^9^9}",
    r"\boxed{9^{123456789}}",
    r"\boxed{100!!!!!}",
    r"\boxed{" + "1+" * 5000 + "1}",  # huge expression
    r"\boxed{" + "(" * 3000 + "}",
    r"\boxed{\frac{\frac{\frac{}{}}{}}",  # malformed LaTeX
    r"\boxed{5",  # cut off mid-answer
    r"}}}}{{{\boxed",
    r"$\sqrt{" * 300 + "$",
    r"\boxed{\begin{pmatrix} 1 \\ 2 \end{pmatrix",
    "\\boxed{\x00\udcff}",
]


@pytest.fixture(scope="module")
def task():
    return MATH500()


def test_doctests():
    assert doctest.testmod(tasks.math500).failed == 0


def test_config_and_splits():
    t = instantiate(OmegaConf.load(CONF))
    assert isinstance(t, MATH500) and t.max_new_tokens > 0
    test = t.load("test")
    assert len(test) == 500 and {"prompt", "answer"} <= set(test.column_names)
    assert r"\boxed{}" in test[0]["prompt"]
    for split in ("train", "validation"):
        with pytest.raises(TaskDataError, match="evaluation-only"):
            t.load(split)


def test_reference_solutions_score_one(task):
    rows = task.load("test").select(range(40))
    assert task.reward(rows["solution"], answer=rows["answer"]) == [1.0] * 40


@pytest.mark.parametrize("gold, completion", [
    (r"\frac{1}{2}", r"so the answer is $\boxed{0.5}$"),
    (r"\left( 3, \frac{\pi}{2} \right)", r"\boxed{(3, \pi/2)}"),
    ("10", r"first \boxed{7}, no wait: \boxed{10}"),  # the last box counts
    ("5", "The final answer is 5."),  # math-verify's other anchors when there is no box
])
def test_equivalent_answers_score_one(task, gold, completion):
    assert task.is_correct(completion, answer=gold)


def test_garbage_scores_zero(task):
    completions = ["I don't know", r"\boxed{7}", "", r"\boxed{}"]
    assert task.reward(completions, answer=["10"] * 4) == [0.0] * 4


@pytest.mark.parametrize("completion", HOSTILE)
def test_hostile_answers_do_not_crash_or_hang(task, completion):
    assert task.is_correct(completion, answer="5") is False
    task.extract_answer(completion)


def test_worker_threads_score_like_the_main_thread(task):
    completions = [r"\boxed{\frac{1}{2}}", r"\boxed{0.5}", r"\boxed{3}"] + HOSTILE[:6]
    main = [task.is_correct(c, answer="0.5") for c in completions]
    with ThreadPoolExecutor(max_workers=2) as pool:
        threaded = list(pool.map(lambda c: task.is_correct(c, answer="0.5"), completions))
    assert threaded == main == [True, True, False] + [False] * 6


@pytest.mark.parametrize("text, boxed, canonical", [
    (r"\boxed{\frac{a}{\sqrt{b^{2}}}}", r"\frac{a}{\sqrt{b^{2}}}", r"\frac{a}{\sqrt{b^{2}}}"),
    (r"\boxed{1} then \fbox{ \dfrac{1}{2} }", r" \dfrac{1}{2} ", r"\frac{1}{2}"),
    (r"\boxed{90^\circ}", r"90^\circ", "90"),
    (r"\boxed{x = .5}", "x = .5", "0.5"),
    (r"\boxed{10,\!080}", r"10,\!080", "10,080"),
    ("no box here", None, None),
    (r"\boxed{unclosed", None, None),
])
def test_last_boxed_and_normalisation(task, text, boxed, canonical):
    assert last_boxed(text) == boxed
    assert task.extract_answer(text) == canonical


def test_malformed_user_file(tmp_path):
    bad = tmp_path / "test.jsonl"
    bad.write_text('{"problem": "1+1?", "answer": "2"}\n{"problem": "x"}\n')
    with pytest.raises(TaskDataError, match=r"test\.jsonl:2: field `answer` is missing"):
        MATH500(path=str(bad)).load("test")


GOOD = '{"problem": "1+1?", "answer": "2", "level": 1}'


@pytest.mark.parametrize("text, message", [
    (GOOD + '\n{"problem": "x", "answer": "3"', r"test\.jsonl:2: not valid JSON .*cut off"),
    (GOOD + '\n{"problem": "x", "answer": 3}\n', r"test\.jsonl:2: field `answer` is a number"),
    (GOOD + '\n{"problem": "x", "answer": "3", "level": "Level 5"}\n',
     r"test\.jsonl:2: field `level` is a string"),
    (GOOD + '\n{"problem": "x", "answer": "3", "level": true}\n',
     r"test\.jsonl:2: field `level` is a boolean"),
    (GOOD + '\n{"problem": "x", "answer": "3", "subject": ["a"]}\n',
     r"test\.jsonl:2: field `subject` is an array"),
    (GOOD + '\n"just a string"\n', r"test\.jsonl:2: the row is a string"),
    (GOOD + '\n{"problem": "x", "answer": NaN}\n', r"test\.jsonl:2: field `answer` is a number"),
    ("", r"test\.jsonl is empty"),
])
def test_malformed_rows_name_file_line_and_field(tmp_path, text, message):
    bad = tmp_path / "test.jsonl"
    bad.write_text(text)
    with pytest.raises(TaskDataError, match=message):
        MATH500(path=str(bad)).load("test")


def test_bad_task_path_and_counts(tmp_path):
    with pytest.raises(TaskDataError, match="is a directory"):
        MATH500(path=str(tmp_path)).load("test")
    with pytest.raises(TaskDataError, match="not a file path"):
        MATH500(path=3).load("test")
    with pytest.raises(TaskDataError, match="task.n_eval"):
        MATH500(n_eval=-3)


def test_many_boxes_are_read_in_linear_time(task):
    """100,000 repeats of an unclosed \\boxed{: last_boxed uses rfind and one brace scan."""
    assert last_boxed("\\boxed{" * 100_000) is None
    assert last_boxed("\\boxed{" * 100_000 + "5}") == "5"
    assert task.is_correct("\\boxed{" * 100_000 + "5}", answer="5")
