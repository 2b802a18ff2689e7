"""GSM8K task: data, answer extraction, reward, and data/hub errors.

    python -m pytest tests/test_task_gsm8k.py -q
"""
import doctest
import json
import threading
import time
from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

import tasks.gsm8k
import tasks.judge.bounded
import tasks.numerals
from tasks.base import TaskDataError
from tasks.gsm8k import GSM8K

CONF = Path(__file__).parents[1] / "conf" / "task" / "gsm8k.yaml"
CORPUS = Path(__file__).parent / "data" / "gsm8k_grading.jsonl"


@pytest.fixture(scope="module")
def task():
    return GSM8K(n_eval=None)


def test_doctests():
    assert doctest.testmod(tasks.gsm8k).failed == 0
    assert doctest.testmod(tasks.numerals).failed == 0


def test_config_builds_the_task():
    t = instantiate(OmegaConf.load(CONF))
    assert isinstance(t, GSM8K) and t.max_new_tokens > 0 and t.n_eval == 500
    assert len(t.load("test")) == 500


def test_splits(task):
    train, val, test = (task.load(s) for s in ("train", "validation", "test"))
    assert (len(train), len(val), len(test)) == (6973, 500, 1319)
    assert not set(train["question"]) & set(val["question"])
    assert {"prompt", "answer"} <= set(test.column_names)
    assert "####" in test[0]["prompt"] and test[0]["answer"] == "18"


def test_gold_solutions_score_one(task):
    test = task.load("test")
    assert task.reward(test["solution"], answer=test["answer"]) == [1.0] * len(test)


@pytest.mark.parametrize("completion, expected", [
    ("#### 18", "18"),
    ("She makes 9 * 2 = $18 every day.", "18"),  # no marker: last number
    ("#### 1,000", "1000"),
    ("The total is $5.00", "5"),
    ("first #### 3 then corrected\n#### 4", "4"),  # the last marker wins
    ("12-4=8", "8"),  # subtraction, not -8 or -4
    ("The temperature fell to -5 degrees", "-5"),
    ("#### 2.50", "2.5"),
    ("I do not know the answer.", None),  # no number at all
    ("#### \n", None),  # a marker with nothing after it
    ("", None),
    # the red team's misses: a marker without a number falls back; fractions; grouped thousands
    ("Janet has 3 apples.\n#### three", "3"),
    ("9 * 2 = 18 dollars.\nFinal answer: 18\n####", "18"),
    ("#### 36/2", "18"),
    ("#### 36 / 8", "4.5"),
    ("#### 5/0", None),
    ("#### 70 000", "70000"),
    ("#### 70,000", "70000"),
    ("#### 1\u202f000\u202f000", "1000000"),
    ("The answer is 64 dollars for 16 glasses.", "64"),
    ("**Answer:** 42 (after 3 days)", "42"),
    ("The answer is: we add 3 + 4 = 7", "7"),  # an expression after the phrase: last number
    ("#### twenty-five", "25"),
    ("#### one hundred and five dollars", "105"),
    ("#### minus four", "-4"),
    ("so $\\boxed{\\frac{36}{2}}$", "18"),
    ("\\boxed{x}", None),  # math-verify finds no number, and there is none in the text
    ("3,4", "4"),  # not a thousands separator: two numbers
    ("It costs .50 a piece", "0.5"),
    ("#### " + "9" * 400, None),  # too large for a float: no answer rather than inf
    # one number in words, never a sum of words (each of these read as 18 once)
    ("#### nine nine", None),
    ("#### ten eight", None),
    ("#### six six six", None),
    ("#### nine and nine", None),
    ("#### twenty thirty", None),
    ("The answer is nine nine.", None),
    ("#### eighteen", "18"),
    ("#### twenty five", "25"),
    ("#### two thousand three hundred and four", "2304"),
    ("#### twelve hundred", "1200"),
    ("#### three. Three apples in all", "3"),
    ("#### 9 9", "9"),  # digits: the first number, as before
])
def test_extract_answer(task, completion, expected):
    assert task.extract_answer(completion) == expected


def test_reward_gold_garbage_and_tolerance(task):
    completions = ["#### 18", "#### 18.0000001", "#### 17", "banana", "#### seventeen", "",
                   "#### eighteen", "#### 18.000", "#### 17.9999999"]
    assert task.reward(completions, answer=["18"] * 9) == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0,
                                                           1.0, 0.0]  # an integer gold is exact
    assert task.is_correct("so $1,234,567 in all", answer="1234567")
    # a non-integer gold (none in the official data) matches within the task's tolerance
    assert task.is_correct("#### 2.5000001", answer="2.5") and task.tolerance == 1e-6
    assert not task.is_correct("#### 2.500002", answer="2.5")
    assert not GSM8K(tolerance=0).is_correct("#### 2.5000001", answer="2.5")
    for bad in (-1, float("nan"), "1e-6", True):
        with pytest.raises(TaskDataError, match="task.tolerance=.* is not a tolerance"):
            GSM8K(tolerance=bad)


def test_hub_unreachable_gives_clear_error(monkeypatch):
    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub")
    monkeypatch.setattr(tasks.gsm8k.datasets, "load_dataset", offline)
    with pytest.raises(TaskDataError, match="source=local"):
        GSM8K(source="hub").load("test")


def test_bad_source_and_split():
    with pytest.raises(TaskDataError, match="local or hub"):
        GSM8K(source="ftp")
    with pytest.raises(TaskDataError, match="split"):
        GSM8K().load("dev")


ROW = '{"question": "1+1?", "answer": "2\\n#### 2"}\n'


def test_malformed_user_file_names_file_and_row(tmp_path):
    """Every row of both files is checked when the task is built, before any model loads: a test
    row without #### used to fail the run at evaluation, after training."""
    (tmp_path / "test.jsonl").write_text(ROW + '{"question": "x", "answer": "no marker"}\n')
    (tmp_path / "train.jsonl").write_text(ROW * 501)
    with pytest.raises(TaskDataError, match=r"test\.jsonl:2: field `answer` has no usable"):
        GSM8K(path=str(tmp_path))
    (tmp_path / "test.jsonl").write_text(ROW)
    (tmp_path / "train.jsonl").write_text(ROW * 600 + '{"question": "x", "answer": "#### ."}\n')
    with pytest.raises(TaskDataError, match=r"train\.jsonl:601: field `answer` has no usable"):
        GSM8K(path=str(tmp_path))
    (tmp_path / "train.jsonl").write_text(ROW * 500)
    with pytest.raises(TaskDataError, match="train file has 500 rows; the validation split is"):
        GSM8K(path=str(tmp_path))
    (tmp_path / "train.jsonl").unlink()
    with pytest.raises(TaskDataError, match=r"train\.jsonl not found"):
        GSM8K(path=str(tmp_path))
    (tmp_path / "train.jsonl").write_text(ROW * 501)
    t = GSM8K(path=str(tmp_path))
    assert [len(t.load(s)) for s in ("train", "validation", "test")] == [1, 500, 1]


def test_hand_judged_corpus(task):
    """Every hand-judged completion in tests/data/gsm8k_grading.jsonl is graded as judged.

    The grader before this corpus existed (marker's first number, else the last number) got 38
    of its 50 right; its misses are the red team's cases plus LaTeX fractions and word numbers.
    """
    rows = [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]
    assert len(rows) >= 40
    # line 16, `#### 18.0000001` for gold 18, was judged correct before integer golds were compared exactly
    wrong = [(r["completion"][:60], r["gold"], r["correct"]) for r in rows
             if task.is_correct(r["completion"], answer=r["gold"]) != r["correct"]]
    assert wrong == []


# Each passed the old guard of rule 3 (math-verify); off the main thread math-verify's timeouts are
# off, and the nesting took 12 s there. Rule 3 now refuses them (tasks/judge/bounded.py), so rule 4 reads
# the last number, the same on any thread.
EXPLODING = [  # a refused box is no answer: rule 4 never reads a number out of it
    (r"so \boxed{(10^{9999})^{9999}}", None),
    (r"so \boxed{((10^{999})^{999})^{999}}", None),
    (r"so \boxed{10^{9999\cdot 9999}}", None),
    (r"so \boxed{(10^{9})!}", None),
    (r"so \boxed{" + "(" * 450 + "1" + ")" * 450 + "}", None),
]


def test_worker_threads_read_like_the_main_thread(task):
    texts = [t for t, _ in EXPLODING] + [r"so $\boxed{\frac{36}{2}}$", "#### 18"]
    out, start = [], time.monotonic()
    worker = threading.Thread(target=lambda: out.extend(task.extract_answer(t) for t in texts),
                              daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive() and time.monotonic() - start < 30
    main = [task.extract_answer(t) for t in texts]
    assert out == main == [e for _, e in EXPLODING] + ["18", "18"]
    assert time.monotonic() - start < 30
    info = GSM8K().run_info()["math_verify"]  # counted from the task's creation: nothing yet
    assert info == {"calls": 0, "refused": 0, "timeouts": 0, "worker_starts": 0, "over_budget": 0}
    assert task.run_info()["math_verify"]["refused"] >= 2 * len(EXPLODING)


REPEATS = 100_000  # each of these ran in well under a second (2-core machine)


@pytest.mark.parametrize("completion, expected", [
    ("####" * REPEATS, None),
    ("#### " * REPEATS + "18", "18"),
    ("answer is " * REPEATS, None),
    ("The answer is " * REPEATS + "18", "18"),
    ("1 " * REPEATS, "1"),
    ("1" + " " * REPEATS + "/ 2", "0.5"),
    ("=" * REPEATS + "7", "7"),
    ("1" + ",000" * REPEATS, None),  # one 400,001-character "number": no answer
    ("\\boxed{" * REPEATS + "5", "5"),  # math-verify reads only the end; the last number remains
    ("<answer>" * REPEATS, None),
])
def test_hostile_completions_behave(task, completion, expected):
    assert task.extract_answer(completion) == expected


@pytest.mark.parametrize("text, message", [
    ('{"question": "q", "answer": "#### 2"}\n{"question": "q", "answer": "#### 2"',
     r"test\.jsonl:2: not valid JSON .*cut off"),
    ('{"question": "q", "answer": "#### 2"}\n["q", "#### 2"]\n', r"test\.jsonl:2: the row is an array"),
    ('{"question": 7, "answer": "#### 2"}\n', r"test\.jsonl:1: field `question` is a number"),
    ('{"answer": "#### 2"}\n', r"test\.jsonl:1: field `question` is missing"),
    ('{"question": "q", "answer": "#### ."}\n', r"test\.jsonl:1: field `answer` has no usable"),
    ('{"question": "q", "answer": 2}\n', r"test\.jsonl:1: field `answer` is a number"),
    ("", r"test\.jsonl is empty"),
])
def test_malformed_rows_name_file_line_and_field(tmp_path, text, message):
    (tmp_path / "test.jsonl").write_text(text)
    with pytest.raises(TaskDataError, match=message):
        GSM8K(path=str(tmp_path)).load("test")


def test_bad_task_path_and_counts(tmp_path):
    (tmp_path / "test.jsonl").write_text('{"question": "q", "answer": "#### 2"}\n')
    with pytest.raises(TaskDataError, match="is a file"):
        GSM8K(path=str(tmp_path / "test.jsonl"))
    with pytest.raises(TaskDataError, match="not a file path"):
        GSM8K(path=5)
    with pytest.raises(TaskDataError, match="task.n_eval"):
        GSM8K(n_eval=-1)


# ---- robustness: signs, exact values, hedges, costly LaTeX, regexes on 64k inputs ----
@pytest.mark.parametrize("completion, expected", [
    ("#### \u221218", "-18"),  # U+2212 MINUS SIGN: read as a minus (it scored for 18)
    ("#### \u201318", "-18"),  # en dash
    ("The answer is \u221218.", "-18"),
    ("It fell from 5\u20137 degrees", "7"),  # a dash after a digit is a range, not a sign
    ("#### 17.9999999", "17.9999999"),  # exact: not 18
    ("#### 18e5", "1800000"),  # it scored for 18
    ("#### 1.5E-3", "0.0015"),
    ("#### 2e999", None),  # past 10^300: no answer
    ("#### 18 or 19", None),  # a hedge: it took the first number
    ("answer: 18, 19 or 20", None),
    ("#### 18, 19, or 20", None),
    ("It is 17 or 18.", None),  # rule 4: the last number ends a hedge
    ("#### eighteen or nineteen", None),
    ("so $\\boxed{\\pm 18}$", None),
    ("so $\\boxed{18 \\text{ or } 19}$", None),
    ("#### 18 (or so)", "18"),  # no second number: no hedge
    ("Either 3 or 4 apples each, 7 in all.\n#### 7", "7"),  # a hedge in the working is fine
])
def test_signs_exact_values_and_hedges(task, completion, expected):
    assert task.extract_answer(completion) == expected


@pytest.mark.parametrize("completion", ["#### \u221218", "#### \u201318", "#### 17.9999999",
                                        "#### 18e5", "#### 18 or 19", "answer: 18, 19 or 20",
                                        "so $\\boxed{\\pm 18}$", "It is 18 or 19."])
def test_each_attack_scores_zero_for_gold_18(task, completion):
    assert task.reward([completion, "#### 18"], answer=["18", "18"]) == [0.0, 1.0]


def test_costly_latex_in_a_batch_scores_within_seconds(task):
    """Eight copies took 48.1 s (sympy to its 5 s limit, one after another); now refused at once."""
    task.reward(["so $\\boxed{1}$"] * 4, answer=["1"] * 4)  # workers up: their start is not the point
    start = time.monotonic()
    rewards = task.reward([r"Let me compute \(\sum_{k=1}^{9999} k^{999}\)."] * 8 + ["#### 18"],
                          answer=["18"] * 9)
    assert time.monotonic() - start < 10
    assert rewards == [0.0] * 8 + [1.0]


N = 64_000
ADVERSARIAL = [  # each grader regex and scan against 64k-character inputs built to backtrack
    "#### " + "1," * (N // 2), "#### " + "1 " * (N // 2), "#### 1" + " " * N + "/",
    "#### " + "1, " * (N // 3) + "x", "answer: 18" + ", 1" * (N // 3), "answer" + "*" * N,
    "answer:" + " " * N + "x", "1" + " or" * (N // 3) + " 2", "1" + "," * N + "2",
    "#### " + "\u2212" * N + "1", "1e" * (N // 2), "1" * N + "e" + "1" * N,
    "#### " + "9" * N, "1" + "\u202f000" * (N // 4) + "1", "\\boxed{" + "\\pm " * (N // 4),
    "#### " + "nine " * (N // 5), "or 1 " * (N // 5), "$" * N + "1",
]


@pytest.mark.parametrize("text", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_adversarial_answers_parse_in_linear_time(task, text):
    """Under 0.1 s of this thread's CPU (a busy machine does not count against it)."""
    for grade in (task.extract_answer, lambda t: task.is_correct(t, answer="18")):
        start = time.thread_time()
        grade(text)
        assert time.thread_time() - start < 0.1
