"""What the sandboxed code tasks (MBPP, HumanEval) share on the task side.

- `SandboxedCodeTask`: the base both task classes derive from. It holds the judge state they
  build alike (sandbox settings, judge limits and counts, the data survey read once, one clean
  run per row however many threads ask) and the scoring around it: `extract_code` and
  `extract_answer`, running and judging one program, the batch reward, `judge_stats` and the
  sandbox part of `run_info`. Each task keeps its data, prompts and how it plans a row's tests.
- `check_sandbox_settings`: task.timeout_s, task.memory_mb and task.judge_s checked at construction.
- `clean_run`: a run without candidate code (expected values, HumanEval's sampled inputs). It is
  tried twice before the row is blamed (the host may just be busy), then raises TaskDataError:
  a row whose expected values are unknown is never judged inside the sandbox instead.
- `expected_in_clean_run`: a row's non-literal expected values from one clean run. A value the
  judge cannot take (unserialisable, or the row's setup needs the candidate's names) leaves that
  test judged inside the sandbox, counted in the task's notes; an expected side that raises is a
  TaskDataError naming the test.

Running and judging one completion is the judge's (tasks/judge/code_runs.py); the functions here
raise TaskDataError, the tasks' own error (tasks/judge/ imports no task module), so they stay with
the tasks.

    python -m pytest tests/test_task_mbpp.py tests/test_task_humaneval.py -q
"""
from __future__ import annotations

import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor

from tasks.base import TaskDataError
from tasks.judge import code_runs, mbpp_judge, sandbox
from tasks.judge.code_runs import JudgeStats, runner_source

TRIES = 2  # clean runs before a row is blamed
_PY_FENCE = re.compile(r"```[ \t]*(?:python3?|py)[ \t]*\n(.*?)(?:```|\Z)", re.S | re.I)
_ANY_FENCE = re.compile(r"```[^\n`]*\n(.*?)(?:```|\Z)", re.S)


def extract_code(completion: str) -> str:
    """The program in a completion: first ```python block, else first ``` block, else all of it.

    >>> extract_code("Here:\\n```python\\ndef f():\\n    return 1\\n```\\nDone.")
    'def f():\\n    return 1\\n'
    """
    m = _PY_FENCE.search(completion) or _ANY_FENCE.search(completion)
    return m.group(1) if m else completion


def check_sandbox_settings(timeout_s: float, memory_mb: int, judge_s: float) -> None:
    """task.timeout_s, task.memory_mb and task.judge_s of a sandboxed code task."""
    if not timeout_s > 0 or memory_mb < 64:
        raise TaskDataError("task.timeout_s must be > 0 and task.memory_mb >= 64 (Python "
                            "itself needs ~30 MiB of address space)")
    if not judge_s > 0:
        raise TaskDataError(f"task.judge_s={judge_s} must be > 0 (seconds of judging per "
                            "completion, e.g. 2)")


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


class SandboxedCodeTask:
    """The judge state and scoring MBPP and HumanEval share. A subclass calls `_sandboxed` from
    its __init__ and defines `_read_survey` (its data read once) and `is_correct`."""

    def _sandboxed(self, timeout_s: float, memory_mb: int, workers: int | None,
                   judge_s: float) -> None:
        """Check and keep the sandbox settings; start the judge's limits, counts and caches."""
        check_sandbox_settings(timeout_s, memory_mb, judge_s)
        self.timeout_s, self.memory_mb = timeout_s, memory_mb
        self.workers = workers or min(8, os.cpu_count() or 1)
        self.limits, self.judge_s = mbpp_judge.Limits(seconds=judge_s), judge_s
        self._stats = JudgeStats()
        self._lock = threading.Lock()
        self._gates: dict[tuple, threading.Lock] = {}  # one clean run per row, however many ask
        self._survey_gate = threading.Lock()
        self._survey: dict | None = None

    def _read_survey(self) -> dict:
        raise NotImplementedError

    def survey(self) -> dict:
        """The data read once (the subclass's `_read_survey`), every row's tests planned and
        resolved (clean sandbox runs for non-literal expected values), so a broken row fails
        here, before any training or scoring."""
        with self._survey_gate:
            if self._survey is None:
                self._survey = self._read_survey()
            return self._survey

    def _once(self, cache: dict, key: tuple, compute):
        """cache[key], computed by `compute()` once however many threads ask at the same time."""
        with self._lock:
            if key in cache:
                return cache[key]
            gate = self._gates.setdefault(key, threading.Lock())
        with gate:
            with self._lock:
                if key in cache:
                    return cache[key]
            found = compute()
            with self._lock:
                cache[key] = found
            return found

    def _expected(self, pending: list, setup: str, what: str) -> list:
        """The checks `pending` with their expected values from one clean run (see above)."""
        return expected_in_clean_run(pending, setup, what, self.timeout_s, self.memory_mb,
                                     self.limits, self._stats)

    def _clean_run(self, args: dict, what: str, fix: str) -> sandbox.SandboxResult:
        return clean_run(args, what, fix, self.timeout_s, self.memory_mb, self._stats)

    def _judge(self, code: str, setup: str, checks) -> mbpp_judge.Verdict:
        """Run `code` then `setup` in the sandbox and judge the checks' values here."""
        return code_runs.judge(code, setup, checks, self.timeout_s, self.memory_mb, self.limits,
                               self._stats)

    def extract_answer(self, text: str) -> str | None:
        """The extracted code with blank lines and trailing spaces removed, or None if empty."""
        lines = [line.rstrip() for line in extract_code(text).splitlines() if line.strip()]
        return "\n".join(lines) or None

    def _in_slices(self, judge, items) -> list:
        """judge(item) for every item, programs run `workers` at a time, each in its own slice."""
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            return list(pool.map(judge, items))

    def _scores(self, jobs: list[tuple]) -> list[float]:
        """1.0 or 0.0 per job (the arguments of `is_correct`), programs run `workers` at a time."""
        return [float(ok) for ok in self._in_slices(lambda j: self.is_correct(*j), jobs)]

    def slice_s(self) -> float:
        """One program's slice: its run in the sandbox (timeout_s, wall clock) and the judging of its values here
        (judge_s). A program that spends it scores 0 alone; its neighbours in the call are judged as if alone."""
        return self.timeout_s + self.judge_s

    def call_bound_s(self, n: int) -> float:
        """A call's budget: n programs in slices `workers` at a time, so ceil(n / workers) slices (plus the
        sandbox's start per program, which no limit covers; tests/test_code_call_budget.py)."""
        return -(-n // self.workers) * self.slice_s()

    def judge_all(self, completions: list[str], rows: list[dict]) -> list[tuple[bool, str | None]]:
        """(is_correct, extract_answer) per completion for evaluation (harness/evaluation/grading.py): the programs
        run in parallel, each in its own slice, as the reward runs them; evaluation once ran them one by one."""
        oks = self._in_slices(lambda cr: bool(self.is_correct(cr[0], **cr[1])), zip(completions, rows, strict=True))
        return [(ok, self.extract_answer(c)) for ok, c in zip(oks, completions)]

    def judge_stats(self) -> dict:
        """Tests scored so far, by where they were judged: outside (value compared here) or
        inside (statements run in the sandbox); clean sandbox runs made for expected values;
        completions scored 0 by a judge limit, by limit."""
        return self._stats.snapshot()

    def _run_info(self, **more) -> dict:
        """The sandbox layers active on this host and the judge counts, then `more`."""
        return {"sandbox_layers": sandbox.layers(), "judge": self.judge_stats(), **more}
