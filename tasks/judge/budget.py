"""A time budget per reward call for the math-verify workers of tasks/judge/bounded.py.

Why: each answer's math-verify call is cut off at bounded.LIMIT_S (5 s), but sixteen answers that
each run to that limit cost 16 x 5 s, one after another (one MATH-500 reward call holding sixteen
copies of one such answer took 105-117 s). `grade_all(score, items, threads)` scores the items of
one reward call on up to `threads` threads, so the worker pool grades them in parallel, and gives them
one Budget of BASE_S + PER_COMPLETION_S per item (6 s for 16; an ordinary answer takes 10-50 ms).
The budget is thread-local, so bounded.py's pool sees it on every thread of the call: a worker call
starts only while time is left and runs for at most min(LIMIT_S, time left). Past the deadline the
remaining answers score 0 and are counted (`over_budget` in bounded.stats()). Which answers those
are depends on the order the threads reach them; an ordinary batch never gets near its budget.
Starting a worker (importing sympy: 1-2 s idle, far longer on a loaded machine) is not charged to
the budget, unless it replaces a worker killed during the same call: otherwise a cold or busy
machine would score correct answers 0.

    python -m pytest tests/test_task_math500.py -q -k budget
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

BASE_S = 2.0  # per reward call
PER_COMPLETION_S = 0.25  # per completion in it


class Budget:
    """The deadline shared by the threads grading one reward call."""

    def __init__(self, items: int):
        self.deadline = time.monotonic() + BASE_S + PER_COMPLETION_S * items
        self.kills = 0
        self.lock = threading.Lock()

    def left(self) -> float:
        """Seconds left before the deadline (negative once it has passed)."""
        with self.lock:
            return self.deadline - time.monotonic()

    def started_worker(self, seconds: float) -> None:
        """A worker took `seconds` to start: not charged, unless it replaces one killed in this call."""
        with self.lock:
            if self.kills == 0:
                self.deadline += seconds

    def killed_worker(self) -> None:
        with self.lock:
            self.kills += 1


_LOCAL = threading.local()


def current() -> Budget | None:
    """The budget of the reward call this thread is grading for, or None outside grade_all."""
    return getattr(_LOCAL, "budget", None)


def grade_all(score, items: list, threads: int) -> list:
    """[score(item) for item in items], on up to `threads` threads, under one Budget for them all."""
    budget = Budget(len(items))

    def run(item):
        previous, _LOCAL.budget = current(), budget
        try:
            return score(item)
        finally:
            _LOCAL.budget = previous

    if threads <= 1 or len(items) <= 1:
        return [run(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(threads, len(items))) as pool:
        return list(pool.map(run, items))
