"""The arithmetic task: problems, grading, the difficulty knob and its bad settings.

    python -m pytest tests/test_task_arithmetic.py -q
"""
import doctest
import time

import pytest

import tasks.arithmetic
from tasks.arithmetic import Arithmetic, split_of
from tasks.base import TaskDataError


def test_problems_are_right_deterministic_and_of_the_asked_size():
    t = Arithmetic(digits=3, ops="+-*", n_eval=50)
    rows = t.load("test")
    assert len(rows) == 50 and rows["prompt"] == Arithmetic(digits=3, ops="+-*", n_eval=50).load("test")["prompt"]
    for r in rows:
        assert 100 <= r["a"] <= 999 and 100 <= r["b"] <= 999 and split_of(r["a"], r["op"], r["b"]) == "test"
        assert r["answer"] == {"+": r["a"] + r["b"], "-": r["a"] - r["b"], "*": r["a"] * r["b"]}[r["op"]]
        assert r["prompt"] == f"What is {r['a']} {r['op']} {r['b']}? Reply with just the number."
    assert {r["op"] for r in rows} == {"+", "-", "*"}
    assert Arithmetic(digits=1, ops="+-", n_eval=5, n_train=50).load("test")["a"] != []   # one digit: 0-9


def test_grading_reads_the_last_integer():
    t = Arithmetic()
    assert t.reward(["47 + 38 = 85", "The answer is 85.", "85 or 86", "eighty-five", "1,085"], [85] * 5) == [1, 1, 0, 0, 0]
    assert t.is_correct("-12", answer=-12) and t.is_correct("So 61 - 73 = -12", answer=-12)
    assert t.extract_answer("It is 1,024.") == "1024" and t.extract_answer("none") is None
    assert t.gold_completion(answer=-7) == "-7" and t.is_correct(t.gold_completion(answer=-7), answer=-7)


@pytest.mark.parametrize("kw, match", [
    ({"digits": 0}, "task.digits=0 is unsupported"),
    ({"digits": 7}, "task.digits=7 is unsupported"),
    ({"ops": "+/"}, "task.ops='\\+/' is not a set of operators"),
    ({"ops": ""}, "is not a set of operators"),
    ({"digits": 1, "ops": "+"}, "too few distinct problems"),
    ({"n_eval": -1}, "task.n_eval=-1 is not a row count"),
])
def test_bad_settings_fail_in_one_line(kw, match):
    with pytest.raises(TaskDataError, match=match):
        Arithmetic(**kw)


def test_a_split_too_small_for_the_count_is_named():
    """Every split is generated when the task is built: a setting too small fails before any model loads."""
    with pytest.raises(TaskDataError, match="too few for 500 test problems"):
        Arithmetic(digits=1, ops="+-")
    with pytest.raises(TaskDataError, match="too few for 5000 train problems"):
        Arithmetic(digits=1, ops="+-", n_eval=5)


def test_doctests():
    assert doctest.testmod(tasks.arithmetic).failed == 0


@pytest.mark.parametrize("completion, expected", [
    ("8,5", None),  # not thousands separators: it read 85
    ("1,2,3,4", None),  # it read 1234
    ("12,34,567", None),
    ("1,085", "1085"), ("It is 1,234,567.", "1234567"), ("85,", "85"), ("85, done", "85"),
    ("The answer is 84 or 85", None),  # a hedge: it scored for 85
    ("84, or 85", None), ("84 or -85", None),
    ("\u221285", "-85"), ("\u201385", "-85"),  # a Unicode minus or dash: it read 85
    ("61 - 73 = -12", "-12"), ("either way, 85", "85"),
])
def test_separators_signs_and_hedges(completion, expected):
    assert Arithmetic().extract_answer(completion) == expected


def test_each_attack_scores_zero():
    t = Arithmetic()
    attacks = ["8,5", "The answer is 84 or 85", "\u221285"]
    assert t.reward(attacks + ["85"], [85, 85, 85, 85]) == [0.0, 0.0, 0.0, 1.0]
    assert t.reward(["1,2,3,4", "1,234"], [1234, 1234]) == [0.0, 1.0]


@pytest.mark.parametrize("text", ["1," * 32_000, "1" * 64_000 + ",", "-" * 64_000 + "1",
                                  "1 or " * 12_800 + "2", "1,000" * 12_800, "\u2212" * 64_000])
def test_adversarial_answers_parse_in_linear_time(text):
    """Under 0.1 s of this thread's CPU for 64k characters (a busy machine does not count)."""
    t = Arithmetic()
    start = time.thread_time()
    t.extract_answer(text)
    assert time.thread_time() - start < 0.1
