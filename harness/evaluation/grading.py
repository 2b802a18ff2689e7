"""Grading an evaluation's completions: one reading per completion, bounded, in parallel.

Why: evaluation used to call a task's `is_correct` and `extract_answer` one completion after
another, outside the reward's time budget (4 slow MATH answers took 24 s; a 500 x 33 evaluation
could take hours), and read each completion twice, so maj@k could vote over an answer the judge
never scored. A task with `judge_all(completions, rows)` (GSM8K, MATH-500: each completion read
once under its own time slice, in parallel, tasks/judge/budget.py; MBPP and HumanEval: each program in
its own slice of timeout_s + judge_s, `workers` at a time, tasks/code_task.py) returns (correct, answer)
pairs from that one reading; any other task (cheap, bounded readers) is graded one completion at a time.

    python -m pytest tests/test_graders_total.py tests/test_code_call_budget.py -q
"""
from __future__ import annotations


def judge_all(task, completions: list[str], rows: list[dict]) -> tuple[list[bool], list[str | None]]:
    """(is_correct, extract_answer) of each completion; rows[i] holds completion i's columns."""
    batch = getattr(task, "judge_all", None)
    if batch is None:
        return ([bool(task.is_correct(c, **r)) for c, r in zip(completions, rows, strict=True)],
                [task.extract_answer(c) for c in completions])
    pairs = batch(completions, rows)
    return [bool(ok) for ok, _ in pairs], [answer for _, answer in pairs]
