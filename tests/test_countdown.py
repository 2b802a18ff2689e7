"""Countdown grading, templates, splits and the generator.

    python -m pytest tests/test_countdown.py -q
"""
import json
import time

import pytest

from tasks.arith import UnsafeExpression, evaluate
from tasks.base import TaskDataError
from tasks.countdown import Countdown, _split_of, generate_problems

NUMS, TARGET = [3, 7, 12], 22
HOSTILE = ["__import__('os').system('echo hi')", "9**9**9", "1/0", "(" * 10_000 + "1" + ")" * 10_000,
           "9" * 1_000_000, "open('/etc/passwd').read()", "lambda: 1", "3;7;12", "-3+7+12+6", "(12+7)+3.0"]


def test_correct_and_wrong_compact():
    t = Countdown()
    assert t.reward(["(12+7)+3", "12 + 7 + 3\nextra", "12+7+2", "12+7", "12+7+3+3"],
                    nums=[NUMS] * 5, target=[TARGET] * 5) == [1.0, 1.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_output_scores_zero_quickly(text):
    t = Countdown(template="think")
    start = time.time()
    for completion in (text, f"<think>x</think><answer>{text}</answer>"):
        r = t.reward([completion], nums=[NUMS], target=[TARGET])[0]
        assert r <= 0.1  # at most the format bonus, never correctness
    assert time.time() - start < 0.5


def test_think_template_format_scores():
    t = Countdown(template="think")
    full = "<think>12+7=19, +3=22</think>\n<answer>(12+7)+3</answer>"
    assert t.reward([full], nums=[NUMS], target=[TARGET]) == [1.1]
    assert t.format_score("<think>a</think>") == pytest.approx(0.1)
    assert t.format_score("<answer>(12+7)+3</answer>") == pytest.approx(0.5)
    assert t.format_score("no tags") == 0.0
    # answer first, then think: both pairs but not the think-then-answer layout
    assert t.reward(["<answer>(12+7)+3</answer><think>x</think>"], nums=[NUMS], target=[TARGET]) == [1.06]
    # the last <answer> is the one graded
    assert t.is_correct("<answer>1+1</answer> <answer>(12+7)+3</answer>", NUMS, TARGET)


def test_division_exact_and_tolerance():
    assert evaluate("12/(7-3)")[0] == 3
    t = Countdown()
    assert t.is_correct("12/(3/7)", [3, 7, 12], 28)
    assert not t.is_correct("12/(3/7)", [3, 7, 12], 28.001)


def test_evaluate_rejects_unsafe():
    for e in HOSTILE[:7]:
        with pytest.raises(UnsafeExpression):
            evaluate(e)


def test_extract_answer():
    assert Countdown().extract_answer(" (12 + 7) + 3\nmore") == "(12+7)+3"
    assert Countdown().extract_answer("   ") is None
    assert Countdown(template="think").extract_answer("<think>x</think>") is None


def test_zoo_splits_disjoint_and_solvable():
    seen = {}
    for split in ("train", "validation", "test"):
        rows = generate_problems(split, 300)
        for r in rows:
            assert _split_of(r["nums"], r["target"]) == split
            value, used = evaluate(r["solution"])
            assert value == r["target"] and sorted(used) == sorted(r["nums"]) and 1 <= r["target"] <= 100
        seen[split] = {(tuple(sorted(r["nums"])), r["target"]) for r in rows}
    assert not seen["train"] & seen["test"] and not seen["train"] & seen["validation"]
    assert generate_problems("test", 50) == generate_problems("test", 50)  # deterministic


def test_gold_solutions_score_one():
    t = Countdown()
    rows = t.load("test")
    assert t.reward(rows["solution"], nums=rows["nums"], target=rows["target"]) == [1.0] * len(rows)


def test_tinyzero_and_paper_sources(tmp_path):
    t = Countdown(source="tinyzero", template="think", n_eval=5)
    test = t.load("test")
    assert len(test) == 5 and "<answer>" in test[0]["prompt"] and test[0]["nums"] == [96, 7, 37, 74]
    assert len(Countdown(source="tinyzero", n_eval=200).load("validation")) == 200  # n_eval caps 500 rows
    assert len(Countdown(source="tinyzero", n_eval=None).load("validation")) == 500
    rows = [{"target": 10 + i % 50, "numbers": [1, 2, 3]} for i in range(2200)]
    path = tmp_path / "countdown.json"
    path.write_text(json.dumps(rows))
    p = Countdown(source="paper", path=str(path), n_eval=None)
    assert len(p.load("train")) == 200 and len(p.load("test")) == 2000


def test_bad_data_names_the_problem(tmp_path):
    with pytest.raises(TaskDataError, match="needs task.path"):
        Countdown(source="paper")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"target": 3, "nums": [1, 2]}\n{"target": "x"}\n')
    with pytest.raises(TaskDataError, match="row 1 is malformed"):
        Countdown(source="paper", path=str(bad)).load("test")
    with pytest.raises(TaskDataError, match="not found"):
        Countdown(source="paper", path=str(tmp_path / "missing.json")).load("test")
    with pytest.raises(TaskDataError, match="unknown"):
        Countdown(source="hub")
