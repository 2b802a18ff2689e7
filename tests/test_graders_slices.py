"""A completion's reward never depends on its neighbours: one time slice per completion.

Before (one budget per reward call): eight answers that each ran sympy to the 5 s limit, placed
first in a 64-completion GSM8K call, used the call's budget up and the 56 correct answers after
them scored 0 (1.0 each alone); on MATH-500, 4 slow answers zeroed 12 correct ones. Now each
completion has its own slice (tasks/judge/budget.py): slow answers score 0 alone, wherever they
stand in a call of any size.

    python -m pytest tests/test_graders_slices.py -q            # the quick cases
    python -m pytest tests/test_graders_slices.py -q -m slow    # calls of 8 to 64
"""
import time

import pytest

import tasks.judge.budget
from tasks.gsm8k import GSM8K
from tasks.judge import bounded
from tasks.math500 import MATH500

# Each passes the cost guards and keeps sympy busy to the end of its slice (to the 5 s limit before
# slices): MATH-500 verifies them, GSM8K's rule 3 evaluates them to a number.
FLOOR = (r"\lfloor \cos(\lfloor \sin(9999!) \rfloor) \rfloor + "
         r"\lfloor \cos(\lfloor \sin(9998!) \rfloor) \rfloor")  # each half ~1 s of CPU
SLOW = {"math500": [r"So the answer is $\boxed{\sin(x)^{9999}}$.", f"$\\boxed{{{FLOOR}}}$",
                    r"\boxed{\sin(x)^{9999}+\cos(x)^{9999}}"],
        "gsm8k": [f"So the answer is $\\boxed{{{FLOOR}}}$.", f"#### $\\boxed{{{FLOOR}}}$",
                  f"\\boxed{{{FLOOR}}}"]}
RIGHT = {"gsm8k": (r"... so she has $\boxed{\frac{36}{2}}$ eggs.", "18"),
         "math500": (r"The answer is $\boxed{\frac{36}{2}}$.", "18")}


@pytest.fixture(scope="module")
def graders():
    return {"gsm8k": GSM8K(), "math500": MATH500()}


def mixed(name: str, size: int, slow_at: list[int]) -> list[str]:
    """A call of `size` completions: slow answers at `slow_at`, the correct answer elsewhere."""
    return [SLOW[name][i % 3] if i in slow_at else None for i in range(size)]


def check_call(task, right: str, gold: str, layout: list) -> None:
    completions = [right if c is None else c for c in layout]
    before = bounded.stats()
    rewards = task.reward(completions, answer=[gold] * len(completions))
    alone = {right: task.reward([right], answer=[gold])[0]}
    assert alone[right] == 1.0
    expected = [1.0 if c is None else 0.0 for c in layout]
    assert rewards == expected, [i for i, (r, e) in enumerate(zip(rewards, expected)) if r != e]
    spent = bounded.stats(since=before)
    assert spent["over_budget"] + spent["timeouts"] >= 1  # slices were spent (most or all of them)


@pytest.mark.parametrize("name", ["gsm8k", "math500"])
def test_slow_answers_before_between_and_after_cost_no_correct_answer_its_score(graders, name):
    task, (right, gold) = graders[name], RIGHT[name]
    task.reward([right] * 4, answer=[gold] * 4)  # workers up: their start is never charged anyway
    check_call(task, right, gold, mixed(name, 8, [0, 4, 7]))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gsm8k", "math500"])
@pytest.mark.parametrize("size, slow_at", [
    (8, [0, 1, 2, 3]), (16, [5, 6, 10, 15]), (64, list(range(8))),  # the 8 first of 64
    (64, [0, 21, 42, 63]), (32, [28, 29, 30, 31])])
def test_calls_of_8_to_64(graders, name, size, slow_at):
    task, (right, gold) = graders[name], RIGHT[name]
    check_call(task, right, gold, mixed(name, size, slow_at))


def test_a_slow_answer_alone_scores_zero_within_its_slice(graders):
    task = graders["math500"]
    task.is_correct(r"\boxed{1}", answer="1")
    cpu = bounded.worker_cpu()
    assert task.is_correct(SLOW["math500"][0], answer="18") is False
    assert task.extract_answer(SLOW["math500"][0]) == r"\sin(x)^{9999}"  # a string key: no sympy
    used = bounded.worker_cpu() - cpu
    assert used < tasks.judge.budget.SLICE_S + bounded.CPU_GRACE_S + 0.5


def test_gsm8k_does_not_fall_back_to_another_rule_when_its_slice_runs_out(graders):
    """Rule 3's slice ran out: no answer (0), not rule 4's "last number" (9999 here)."""
    task = graders["gsm8k"]
    text = SLOW["gsm8k"][0]
    before = bounded.stats()
    assert task.extract_answer(text) is None
    assert task.is_correct(text, answer="9999") is False
    assert bounded.stats(since=before)["over_budget"] >= 1


def test_the_wall_clock_backstop_kills_and_replaces_a_worker(graders, monkeypatch):
    """Work the CPU timer does not stop is killed at budget.WALL_S; the next answer scores."""
    task = graders["math500"]
    task.is_correct(r"\boxed{1}", answer="1")
    monkeypatch.setattr(tasks.judge.budget, "WALL_S", 0.3)
    monkeypatch.setattr(tasks.judge.budget, "SLICE_S", 60.0)
    before = bounded.stats()
    start = time.monotonic()
    assert task.is_correct(SLOW["math500"][0], answer="18") is False
    assert time.monotonic() - start < 5
    assert bounded.stats(since=before)["timeouts"] == 1
    monkeypatch.undo()
    assert task.is_correct(RIGHT["math500"][0], answer="18") is True


def test_the_worker_stops_itself_at_its_cpu_slice_without_a_restart(graders):
    task = graders["math500"]
    task.is_correct(r"\boxed{1}", answer="1")
    before = bounded.stats()
    assert task.is_correct(SLOW["math500"][0], answer="18") is False
    after = bounded.stats(since=before)
    assert after["over_budget"] == 1 and after["timeouts"] == 0 and after["worker_starts"] == 0
