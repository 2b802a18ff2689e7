"""One completion's program run in the sandbox and judged here, shared by the code tasks (MBPP,
HumanEval).

- `judge`: run one completion's program (tasks/judge/mbpp_runner.py in tasks/judge/sandbox.py) and
  judge its values here (tasks/judge/mbpp_judge.py); `JudgeStats` counts what was judged where.
- `runner_source`: the trusted runner script's source, as the sandbox takes it.

The clean runs a task needs before it can judge (expected values, HumanEval's sampled inputs) and
the task settings' checks raise TaskDataError, so they live with the tasks (tasks/code_task.py).

    python -m pytest tests/test_task_mbpp.py tests/test_task_humaneval.py -q
"""
from __future__ import annotations

import functools
import threading
from pathlib import Path

from tasks.judge import mbpp_judge, mbpp_runner, sandbox


@functools.lru_cache(maxsize=1)
def runner_source() -> str:
    return Path(mbpp_runner.__file__).read_text(encoding="utf-8")


class JudgeStats:
    """Thread-safe counts: programs judged, tests judged outside (values compared here) and
    inside (statements run in the sandbox), clean runs, completions stopped per judge limit."""

    def __init__(self):
        self._lock = threading.Lock()
        self._counts = {"programs": 0, "tests_outside": 0, "tests_inside": 0, "clean_runs": 0,
                        "over_limit": {}}

    def clean_run_done(self) -> None:
        with self._lock:
            self._counts["clean_runs"] += 1

    def judged(self, checks, verdict: mbpp_judge.Verdict) -> None:
        outside = sum(c.outside for c in checks)
        with self._lock:
            self._counts["programs"] += 1
            self._counts["tests_outside"] += outside
            self._counts["tests_inside"] += len(checks) - outside
            if verdict.limit:
                over = self._counts["over_limit"]
                over[verdict.limit] = over.get(verdict.limit, 0) + 1

    def snapshot(self) -> dict:
        with self._lock:
            return {**self._counts, "over_limit": dict(self._counts["over_limit"])}


def judge(code: str, setup: str, checks, timeout_s: float, memory_mb: int,
          limits: mbpp_judge.Limits, stats: JudgeStats) -> mbpp_judge.Verdict:
    """Run `code` then `setup` in the sandbox, evaluate each check's src there, judge here."""
    args = {"code": code, "setup": setup or "", "items": [c.item() for c in checks]}
    result = sandbox.run_runner(runner_source(), args, timeout_s=timeout_s, memory_mb=memory_mb)
    why = f"sandbox: timed out after {timeout_s} s" if result.timed_out else \
        f"sandbox: the program did not run to its end (exit status {result.returncode})"
    verdict = _judged(list(checks), result, limits, why)
    stats.judged(checks, verdict)
    return verdict


def _judged(checks: list, result: sandbox.SandboxResult, limits: mbpp_judge.Limits,
            why: str) -> mbpp_judge.Verdict:
    """The verdict on a run's records. When the sandbox refused a record line over its result
    limits (tasks/judge/sandbox_results.py), the tests before it are judged as usual and the test that
    line would have answered fails on that limit (as a judge limit: scored 0, counted)."""
    if result.over_limit is None:
        return mbpp_judge.verdict(checks, result.records, result.ok, limits, why)
    k, n = len(result.records), len(checks)
    if k <= n:
        before = mbpp_judge.verdict(checks[:k], result.records, True, limits, why)
        if not before.ok and before.passed:
            return mbpp_judge.Verdict(before.passed + (False,) * (n - k), before.reason,
                                      before.limit)
    passed = (True,) * k + (False,) * (n - k) if k < n else (False,) * n  # never all passed
    where = f"test {k}: " if k < n else ""
    return mbpp_judge.Verdict(passed, f"{where}judge limit ({result.over_limit}): "
                              f"{result.over_limit_reason}", result.over_limit)
