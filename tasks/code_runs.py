"""Sandbox runs of the MBPP runner, shared by the code tasks (MBPP, HumanEval).

- `judge`: run one completion's program and judge its values here (tasks/mbpp_judge.py);
  `JudgeStats` counts what was judged where.
- `clean_run`: a run without candidate code (expected values, HumanEval's sampled inputs). It is
  tried twice before the row is blamed (the host may just be busy), then raises TaskDataError:
  a row whose expected values are unknown is never judged inside the sandbox instead.
- `expected_in_clean_run`: a row's non-literal expected values from one clean run. A value the
  judge cannot take (unserialisable, or the row's setup needs the candidate's names) leaves that
  test judged inside the sandbox, counted in the task's notes; an expected side that raises is a
  TaskDataError naming the test.

    python -m pytest tests/test_task_mbpp.py tests/test_task_humaneval.py -q
"""
from __future__ import annotations

import functools
import threading
from pathlib import Path

from tasks import mbpp_judge, mbpp_runner, sandbox
from tasks.base import TaskDataError

TRIES = 2  # clean runs before a row is blamed


@functools.lru_cache(maxsize=1)
def runner_source() -> str:
    return Path(mbpp_runner.__file__).read_text(encoding="utf-8")


def check_sandbox_settings(timeout_s: float, memory_mb: int, judge_s: float) -> None:
    """task.timeout_s, task.memory_mb and task.judge_s of a sandboxed code task."""
    if not timeout_s > 0 or memory_mb < 64:
        raise TaskDataError("task.timeout_s must be > 0 and task.memory_mb >= 64 (Python "
                            "itself needs ~30 MiB of address space)")
    if not judge_s > 0:
        raise TaskDataError(f"task.judge_s={judge_s} must be > 0 (seconds of judging per "
                            "completion, e.g. 2)")


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
    limits (tasks/sandbox_results.py), the tests before it are judged as usual and the test that
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


def clean_run(args: dict, what: str, fix: str, timeout_s: float, memory_mb: int,
              stats: JudgeStats) -> sandbox.SandboxResult:
    """A run that must succeed (no candidate code in it): TRIES tries, then TaskDataError."""
    for _ in range(TRIES):
        result = sandbox.run_runner(runner_source(), args, timeout_s=timeout_s,
                                    memory_mb=memory_mb)
        stats.clean_run_done()
        if result.ok:
            return result
    why = "timed out" if result.timed_out else f"exit status {result.returncode}"
    raise TaskDataError(f"{what}: a clean sandbox run failed {TRIES} times ({why}); {fix}")


def expected_in_clean_run(pending: list, setup: str, what: str, timeout_s: float,
                          memory_mb: int, limits: mbpp_judge.Limits, stats: JudgeStats) -> list:
    """The checks `pending` with their non-literal expected values computed in one clean sandbox
    run (the row's setup, no candidate code) and judged as any value."""
    imports = "".join(f"try:\n    import {m}\nexcept ImportError:\n    pass\n"
                      for m in mbpp_judge.modules_named(pending))
    args = {"code": imports, "setup": setup, "setup_may_fail": True,
            "items": [{"kind": "value", "src": c.expected_src} for c in pending]}
    result = clean_run(args, f"{what}: its expected values could not be computed",
                       "fix the row's expected expressions or raise task.timeout_s",
                       timeout_s, memory_mb, stats)
    records = {r["i"]: r for r in result.records if isinstance(r.get("i"), int)}
    setup_failed = any("setup_error" in r for r in result.records)
    resolved = []
    for i, check in enumerate(pending):
        record = records.get(i) or {"error": "no record"}
        done = mbpp_judge.resolve(check, record, limits)
        error = str(record.get("error", ""))
        if not done.outside and "value" not in record and not setup_failed \
                and not error.startswith("Unserialisable"):
            raise TaskDataError(f"{what}: the expected side {check.expected_src[:80]!r} cannot be "
                                f"computed ({error[:120]}); fix the row's test")
        resolved.append(done)
    return resolved
