"""Code tasks' per-call budget with a per-program slice (issue 46): in the reward and in evaluation's grading,
each program runs in its own slice (task.timeout_s in the sandbox, task.judge_s judging its values here),
`workers` at a time, so a call of n programs is bounded by ceil(n / workers) slices, and a correct program
scores exactly as it does alone wherever slow ones sit in its call.

    python -m pytest tests/test_code_call_budget.py -q
"""
import time

import pytest

from harness.evaluation.grading import judge_all
from tasks.mbpp import MBPP

SLEEPER = "```python\nimport time\ntime.sleep(60)\n```"


@pytest.fixture(scope="module")
def task():
    return MBPP(n_eval=None, timeout_s=8, judge_s=1)  # wall clock: room for a loaded host


@pytest.fixture(scope="module")
def row(task):
    return next(r for r in task.load("test") if r["task_id"] == 11)


def test_the_bound_is_slices_workers_at_a_time(task):
    assert task.slice_s() == 9
    assert task.call_bound_s(1) == 9
    assert task.call_bound_s(task.workers) == 9
    assert task.call_bound_s(task.workers + 1) == 18


@pytest.mark.parametrize("where", [pytest.param("before", marks=pytest.mark.slow), "between",
                                   pytest.param("after", marks=pytest.mark.slow)])
def test_slow_programs_do_not_change_a_correct_ones_score(task, row, where):
    gold = task.gold_completion(code=row["code"])
    alone = task.reward([gold], test_list=[row["test_list"]])
    assert alone == [1.0]
    layout = {"before": [SLEEPER] * 2 + [gold] * 2, "between": [gold, SLEEPER, SLEEPER, gold],
              "after": [gold] * 2 + [SLEEPER] * 2}[where]
    start = time.perf_counter()
    got = task.reward(layout, test_list=[row["test_list"]] * len(layout))
    took = time.perf_counter() - start
    assert got == [1.0 if c == gold else 0.0 for c in layout]
    # the slices bound the call; the sandbox's own start per program is not covered, hence the slack
    assert took < 2 * task.call_bound_s(len(layout)) + 10, f"{took:.1f} s for {len(layout)} programs"


def test_evaluation_grades_code_in_parallel_as_the_reward_does(task, row):
    """harness/evaluation/grading.py takes the task's judge_all: one reading per completion, each program in its
    own slice, in parallel (evaluation ran them one after another before)."""
    gold = task.gold_completion(code=row["code"])
    completions = [SLEEPER, gold, "```python\ndef nothing():\n    pass\n```", gold]
    rows = [{"test_list": row["test_list"], "test_setup_code": row["test_setup_code"]}] * len(completions)
    correct, answers = judge_all(task, completions, rows)
    assert correct == [False, True, False, True]
    assert answers == [task.extract_answer(c) for c in completions]
    assert correct == [bool(x) for x in task.reward(completions, test_list=[row["test_list"]] * 4)]
