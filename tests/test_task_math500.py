"""MATH-500 task: data, boxed extraction, math-verify scoring, hostile answers, threads.

    python -m pytest tests/test_task_math500.py -q
"""
import doctest
import threading
import time
from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

import tasks.bounded
import tasks.math500
from tasks import bounded
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
# Round two: each passed the old guard; on a worker thread, where math-verify's SIGALRM timeouts
# are off, the first four never returned, and the nesting took 12 s (tasks/bounded.py).
EXPLODING = [
    r"\boxed{(10^{9999})^{9999}}",
    r"\boxed{((10^{999})^{999})^{999}}",
    r"\boxed{10^{9999\cdot 9999}}",
    r"\boxed{(10^{9})!}",
    r"\boxed{" + "(" * 450 + "1" + ")" * 450 + "}",
]
DEADLINE_S = 30


def scored_within(score, completions, deadline_s=DEADLINE_S, thread=True):
    """score(c) for each completion, on a fresh worker thread (or this one), within deadline_s."""
    out = []
    start = time.monotonic()
    if not thread:
        out = [score(c) for c in completions]
    else:  # a daemon thread: a hang fails this test instead of hanging the session
        worker = threading.Thread(target=lambda: out.extend(score(c) for c in completions),
                                  daemon=True)
        worker.start()
        worker.join(deadline_s)
        assert not worker.is_alive(), f"scoring on a worker thread ran past {deadline_s} s"
    assert time.monotonic() - start < deadline_s
    return out


@pytest.fixture(scope="module")
def task():
    return MATH500()


def test_doctests():
    assert doctest.testmod(tasks.math500).failed == 0
    assert doctest.testmod(tasks.bounded).failed == 0


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
    completions = [r"\boxed{\frac{1}{2}}", r"\boxed{0.5}", r"\boxed{3}"] + HOSTILE[:6] + EXPLODING
    threaded = scored_within(lambda c: task.is_correct(c, answer="0.5"), completions)
    main = scored_within(lambda c: task.is_correct(c, answer="0.5"), completions, thread=False)
    assert threaded == main == [True, True, False] + [False] * 11


@pytest.mark.parametrize("answer", [a[len("\\boxed{"):-1] for a in EXPLODING] + [
    r"2^{2^{100}}", "9^9^9", r"9^{9}^{9}", r"9^{99999}", "99999!", "100!!", r"(5!)!", r"10^{9}!",
    r"{10^{9}}^{9}", r"\left(10^{99}\right)^{99}", "(" * 9 + "1" + ")" * 9, "x" * 1001])
def test_the_guard_refuses_exploding_shapes(answer):
    assert bounded.risky(answer)


@pytest.mark.parametrize("answer", [
    r"\frac{\sqrt{21}}{5}", r"2^{2005}", r"(x^2+1)^2", "9999!", r"\frac{10!}{5!}", r"90^\circ",
    r"11,\! 111,\! 111,\! 100", r"\left( 3, \frac{\pi}{2} \right)", r"e^{i\pi}", r"\{1,2\}",
    "(" * 8 + "1" + ")" * 8, r"3\sqrt{2}", r"\$32,\!348", "Wow!! So $x^2$ is 4!"])
def test_the_guard_passes_ordinary_answers(answer):
    assert not bounded.risky(answer)


def test_the_guard_passes_every_shipped_answer(task):
    rows = task.load("test")
    boxes = [last_boxed(s) for s in rows["solution"]]
    assert [a for a in list(rows["answer"]) + boxes if a is not None and bounded.risky(a)] == []


def test_an_answer_past_the_guard_is_killed_at_the_limit(task, monkeypatch):
    """The backstop: a variable dodges the guard, yet sympy still builds 10^(9999*9999)."""
    slow = r"\boxed{(10^{9999}x)^{9999}}"
    assert not bounded.risky(slow[len("\\boxed{"):-1])
    task.is_correct(r"\boxed{1}", answer="1")  # a worker is up: the limit below is all it gets
    monkeypatch.setattr(tasks.bounded, "LIMIT_S", 1.0)
    before = task.run_info()["math_verify"]
    start = time.monotonic()
    assert scored_within(lambda c: task.is_correct(c, answer="5"), [slow]) == [False]
    assert time.monotonic() - start < 10
    after = task.run_info()["math_verify"]
    assert after["timeouts"] == before["timeouts"] + 1
    assert task.is_correct(r"\boxed{5}", answer="5")  # a fresh worker serves the next call
    assert task.run_info()["math_verify"]["worker_starts"] == after["worker_starts"] + 1


def test_concurrent_callers_each_get_their_own_answer(task):
    """Four threads at once (up to MAX_WORKERS workers): no reply goes to the wrong caller."""
    rows = task.load("test").select(range(30))
    pairs = [(s, a) for s, a in zip(rows["solution"], rows["answer"])]
    pairs += [(s, a) for s, a in zip(rows["solution"], rows["answer"][1:])]  # mostly wrong
    expected = [task.is_correct(c, answer=a) for c, a in pairs]
    assert 30 <= sum(expected) < len(pairs)
    timeouts, results = task.run_info()["math_verify"]["timeouts"], {}

    def score(k):
        results[k] = [task.is_correct(c, answer=a) for c, a in pairs[k::4]]

    threads = [threading.Thread(target=score, args=(k,), daemon=True) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE_S)
    assert sorted(results) == [0, 1, 2, 3]
    assert all(results[k] == expected[k::4] for k in range(4))
    assert task.run_info()["math_verify"]["timeouts"] == timeouts


def test_a_dead_worker_is_replaced(task):
    task.is_correct(r"\boxed{1}", answer="1")
    for worker in list(tasks.bounded._POOL.idle):
        worker.proc.kill()
        worker.proc.wait()
    before = task.run_info()["math_verify"]["timeouts"]
    assert task.is_correct(r"\boxed{\frac{1}{2}}", answer="0.5")
    assert task.run_info()["math_verify"]["timeouts"] == before  # no score lost to it


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
