"""The arithmetic task: problems, grading, the difficulty knob and its bad settings.

    python -m pytest tests/test_task_arithmetic.py -q
"""
import pytest

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
    assert Arithmetic(digits=1, ops="+-", n_eval=5).load("test")["a"] != []   # one digit: 0-9


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
    with pytest.raises(TaskDataError, match="too few for 500 test problems"):
        Arithmetic(digits=1, ops="+-").load("test")
