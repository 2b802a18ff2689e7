"""One time slice per completion for the math-verify workers of tasks/judge/bounded.py.

Why: a reward call used to share one deadline among its completions (2 s + 0.25 s each), so its
neighbours decided a completion's score: eight answers that each ran sympy to the 5 s limit,
placed first in a 64-completion call, used the deadline up, and the 56 correct answers after them
were read by GSM8K's fallback rule instead and scored 0 (1.0 each alone). Now every completion
has its own slice, whatever else is in the call:

- SLICE_S seconds of the worker's CPU time, counted inside the worker (bounded.py's `_serve`), so
  neither a busy machine nor a neighbour's slow answer costs it anything; an ordinary answer
  takes 10-50 ms, the slowest shipped MATH-500 solution about 0.25 s;
- the parent watches the worker's CPU time too (/proc) and kills a worker that runs past its
  slice inside C code, where the timer cannot interrupt it (the worker is then replaced);
- WALL_S of wall clock, the last backstop, generous so that a loaded machine (load 13 on two
  cores: 1 s of CPU took 6 s) does not change a score.

Waiting for a free worker and starting one are never charged. A completion that spends its
slice scores 0 alone (None from extract_answer): no later rule reads it instead, and no other
completion is touched. `grade_all` grades a call's completions in parallel on the pool, so a
call of n completions takes at most ceil(n / workers) x WALL_S plus worker starts, and about n x
SLICE_S / workers on an idle machine when every answer is CPU-bound (`call_bound`).

    python -m pytest tests/test_graders_slices.py -q
"""
from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor

SLICE_S = 1.0  # worker CPU seconds per completion: 4x the slowest shipped solution
WALL_S = 30.0  # wall-clock backstop per completion


class OutOfTime(Exception):
    """This completion spent its slice: it scores 0 (and has no answer), alone."""


class Slice:
    """What one completion has left: worker CPU seconds and worker wall-clock seconds."""

    def __init__(self, cpu_s: float, wall_s: float):
        self.cpu_left, self.wall_left = cpu_s, wall_s

    def spend(self, cpu_s: float, wall_s: float) -> None:
        self.cpu_left -= cpu_s
        self.wall_left -= wall_s

    def spent(self) -> bool:
        return self.cpu_left <= 0 or self.wall_left <= 0


_LOCAL = threading.local()


def current() -> Slice | None:
    """The slice of the completion this thread is grading, or None outside `judged`."""
    return getattr(_LOCAL, "slice", None)


def judged(fn, default, wall_s: float):
    """fn() as one completion: under its own fresh Slice, unless this thread is already grading a
    completion (then it shares that one). `default` when the slice runs out, or when the answer
    has no value (an arithmetic or parse error on a hostile string): a grader never raises."""
    if current() is not None:
        return fn()  # the outer call catches
    _LOCAL.slice = Slice(SLICE_S, wall_s)
    try:
        return fn()
    except (OutOfTime, ArithmeticError, ValueError, RecursionError):
        return default
    finally:
        _LOCAL.slice = None


def grade_all(score, items: list, threads: int) -> list:
    """[score(item) for item in items] on up to `threads` threads; each item is one completion and
    opens its own slice (through `judged`), so nothing is shared between them."""
    if threads <= 1 or len(items) <= 1:
        return [score(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(threads, len(items))) as pool:
        return list(pool.map(score, items))


def call_bound(n: int, workers: int, wall_s: float) -> float:
    """The longest a call of `n` completions can take on `workers` workers, worker starts aside."""
    return math.ceil(n / max(workers, 1)) * wall_s
