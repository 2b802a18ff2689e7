"""MBPP: Mostly Basic Python Problems (Austin et al. 2021), scored by running the tests.

Data: the full 974-task `mbpp.jsonl` (Google, CC-BY-4.0), shipped unmodified in tasks/data/mbpp
(see PROVENANCE.md and LICENSE), or `path:` for a file with the same columns. Splits by task_id as
in google-research mbpp/README.md: test 11-510 (500 tasks); train 601-974; validation 511-600 (the
README's training range is 511-1000; we carve its first 90 tasks out for validation, so "train" is
smaller than the README's). Tasks 1-10 are the few-shot prompts and belong to no split.

Degenerate rows: where one value passes every test (test 37, 203, 339; train 667, 674, 816, 899:
all three tests expect the value the prompt shows), `def f(*a, **k): return <value>` scores 1. A
survey of the data at load finds them (mbpp_judge.degenerate); `load` leaves them out of every
split, so they are never trained on nor scored, and `run_info()["notes"]` reports them.

Prompt: the problem text plus the first test assertion, so the model knows the function's name
and signature (the MBPP paper shows all three tests; showing one keeps two unseen).

Scoring (the MBPP paper's rule): a completion is correct when every assertion in `test_list` holds
after the extracted program and `test_setup_code` ran. The program is the first ```python fenced
block (else the first ``` block, else the whole completion; an unterminated fence runs to the end).
It runs in the sandbox (tasks/sandbox.py), never in this process, but the sandbox is not the
judge: tasks/mbpp_judge.py splits each `assert f(x) == y`-shaped test so that only the call runs
there and its value is compared here, against an expected value the program cannot read. Printing
a fake success line, skipping asserts, reading the data file (hidden in the sandbox) or returning
an object whose `__eq__` always says True therefore score 0. An expected side that is not a
literal (task 596's `sys.getsizeof(...)`) is computed once per row in a clean sandbox run with no
candidate code, cached, and judged here the same way. Tests of other shapes run as statements in
the sandbox (none in the shipped data); `judge_stats()` counts both kinds, clean runs and
completions stopped by a judge limit (mbpp_judge.Limits: a value too large, too deep or built to
collide in hashing, or more than `judge_s` seconds of judging). `judge_completion` returns a
completion's Verdict with the reason it failed. `run_info()` reports the sandbox's layers, the
counts and notes; `check_trainable()` refuses to train on a weaker sandbox unless
`allow_weak_sandbox`. `extract_answer` returns the extracted program, whitespace-normalised, for
majority voting.

    python -m pytest tests/test_task_mbpp.py tests/test_mbpp_judge_limits.py -q
"""
from __future__ import annotations

import functools
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import datasets

from tasks import mbpp_judge, sandbox
from tasks.base import DATA_DIR, TaskDataError, read_jsonl

RUNNER = Path(__file__).with_name("mbpp_runner.py")

SPLITS = {"test": (11, 510), "validation": (511, 600), "train": (601, 974)}
PROMPT = ("{text}\nYour code should pass this test:\n{test}\n"
          "Write the Python function in a ```python code block.")
_PY_FENCE = re.compile(r"```[ \t]*(?:python3?|py)[ \t]*\n(.*?)(?:```|\Z)", re.S | re.I)
_ANY_FENCE = re.compile(r"```[^\n`]*\n(.*?)(?:```|\Z)", re.S)


def extract_code(completion: str) -> str:
    """The program in a completion: first ```python block, else first ``` block, else all of it.

    >>> extract_code("Here:\\n```python\\ndef f():\\n    return 1\\n```\\nDone.")
    'def f():\\n    return 1\\n'
    """
    m = _PY_FENCE.search(completion) or _ANY_FENCE.search(completion)
    return m.group(1) if m else completion


class MBPP:
    """MBPP (see the module docstring for data, splits and scoring).

    Args:
        version: bump when scores change.
        n_eval: use at most this many test/validation rows (None = all).
        max_new_tokens: completion length for evaluation and training.
        source: "local" only (the shipped copy, or `path`).
        path: a jsonl file in the official mbpp.jsonl format; overrides the shipped copy.
        timeout_s: wall-clock limit per program, in seconds.
        memory_mb: address-space limit per program, in MiB.
        workers: programs run in parallel when scoring a batch.
        allow_weak_sandbox: train even when this host lacks a sandbox layer (see
            `check_trainable`); evaluation always proceeds, with a warning.
        judge_s: wall-clock limit for judging one completion's values in the harness, in seconds
            (the structural limits in mbpp_judge.Limits keep honest judging to milliseconds).
    """

    name = "mbpp"

    def __init__(self, version: int = 3, n_eval: int | None = 500, max_new_tokens: int = 512,
                 source: str = "local", path: str | None = None, timeout_s: float = 5,
                 memory_mb: int = 512, workers: int | None = None,
                 allow_weak_sandbox: bool = False, judge_s: float = 2.0):
        if source != "local":
            raise TaskDataError(f"task.source={source!r} is unknown; MBPP is shipped, use local "
                                "(or task.path=/path/to/mbpp.jsonl for another copy)")
        check_sandbox_settings(timeout_s, memory_mb, judge_s)
        self.version, self.n_eval, self.max_new_tokens = version, n_eval, max_new_tokens
        self.source, self.path = source, path
        self.timeout_s, self.memory_mb = timeout_s, memory_mb
        self.workers = workers or min(8, os.cpu_count() or 1)
        self.allow_weak_sandbox = allow_weak_sandbox
        self.limits = mbpp_judge.Limits(seconds=judge_s)
        self._stats = {"programs": 0, "tests_outside": 0, "tests_inside": 0, "clean_runs": 0,
                       "over_limit": {}}
        self._lock = threading.Lock()
        self._checks_of: dict[tuple, list[mbpp_judge.Check]] = {}  # (tests, setup) -> resolved
        self._gates: dict[tuple, threading.Lock] = {}  # one clean run per row, however many ask
        self._survey_gate = threading.Lock()
        self._survey: dict | None = None

    # ---- data ----
    def load(self, split: str) -> datasets.Dataset:
        """Rows: `prompt`, `task_id`, `text`, `code` (reference), `test_list`, `test_setup_code`.
        Degenerate rows (see the module docstring) are left out."""
        if split not in SPLITS:
            raise TaskDataError(f"split {split!r} is unknown; use train, validation or test")
        survey = self.survey()
        rows = [r for r in survey["rows"][split] if r["task_id"] not in survey["degenerate"][split]]
        if split != "train" and self.n_eval:
            rows = rows[:self.n_eval]
        return datasets.Dataset.from_list(rows)

    def survey(self) -> dict:
        """The data file read once: `rows`, `degenerate` ids and `tests_inside` (tests the judge
        cannot split), per split. Resolves every row's expected values (clean sandbox runs for
        the non-literal ones), so a broken row fails here, before any training."""
        with self._survey_gate:
            if self._survey is None:
                self._survey = self._read_survey()
            return self._survey

    def _read_survey(self) -> dict:
        path = Path(self.path).expanduser() if self.path else DATA_DIR / "mbpp" / "mbpp.jsonl"
        every = [_row(raw, path, i) for i, raw in read_jsonl(path, "MBPP data")]
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            checks = list(pool.map(lambda r: self.checks(r["test_list"], r["test_setup_code"]),
                                   every))
        survey = {"rows": {}, "degenerate": {}, "tests_inside": {}}
        for split, (lo, hi) in SPLITS.items():
            mine = [(r, c) for r, c in zip(every, checks) if lo <= r["task_id"] <= hi]
            survey["rows"][split] = [r for r, _ in mine]
            survey["degenerate"][split] = [r["task_id"] for r, c in mine
                                           if mbpp_judge.degenerate(c)]
            survey["tests_inside"][split] = sum(not x.outside for _, c in mine for x in c)
        return survey

    # ---- scoring ----
    def gold_completion(self, code: str, **_) -> str:
        """The dataset's reference solution, fenced as a model would write it."""
        return f"```python\n{code}\n```"

    def extract_answer(self, text: str) -> str | None:
        """The extracted program with blank lines and trailing spaces removed, or None if empty."""
        lines = [line.rstrip() for line in extract_code(text).splitlines() if line.strip()]
        return "\n".join(lines) or None

    def is_correct(self, completion: str, test_list: list[str], test_setup_code: str = "",
                   **_) -> bool:
        """True when every test passes: values judged here (mbpp_judge), the rest in the sandbox."""
        return self.judge_completion(completion, test_list, test_setup_code).ok

    def judge_completion(self, completion: str, test_list: list[str],
                         test_setup_code: str = "") -> mbpp_judge.Verdict:
        """Run one completion and judge it: the Verdict says per test whether it passed and, if
        not, why (a wrong value, an error, the sandbox's timeout, a judge limit)."""
        checks = self.checks(test_list, test_setup_code)
        args = {"code": extract_code(completion), "setup": test_setup_code or "",
                "items": [c.item() for c in checks]}
        result = sandbox.run_runner(_runner_source(), args, timeout_s=self.timeout_s,
                                    memory_mb=self.memory_mb)
        why = f"sandbox: timed out after {self.timeout_s} s" if result.timed_out else \
            f"sandbox: the program did not run to its end (exit status {result.returncode})"
        verdict = mbpp_judge.verdict(checks, result.records, result.ok, self.limits, why)
        outside = sum(c.outside for c in checks)
        with self._lock:
            self._stats["programs"] += 1
            self._stats["tests_outside"] += outside
            self._stats["tests_inside"] += len(checks) - outside
            if verdict.limit:
                over = self._stats["over_limit"]
                over[verdict.limit] = over.get(verdict.limit, 0) + 1
        return verdict

    def checks(self, test_list: list[str], test_setup_code: str = "") -> list[mbpp_judge.Check]:
        """A row's tests as resolved Checks, computed once per row: non-literal expected values
        come from one clean sandbox run (no candidate code) that every later call reuses."""
        key = (tuple(test_list), test_setup_code or "")
        with self._lock:
            if key in self._checks_of:
                return self._checks_of[key]
            gate = self._gates.setdefault(key, threading.Lock())
        with gate:
            with self._lock:
                if key in self._checks_of:
                    return self._checks_of[key]
            found = self._resolve(*key)
            with self._lock:
                self._checks_of[key] = found
            return found

    def _resolve(self, tests: tuple[str, ...], setup: str) -> list[mbpp_judge.Check]:
        checks = [mbpp_judge.plan(t, mbpp_judge.setup_names(setup)) for t in tests]
        pending = [c for c in checks if c.expected_src is not None]
        if not pending:
            return checks
        computed = iter(expected_in_clean_run(pending, setup, f"MBPP row with test {tests[0][:80]!r}",
                                              "fix the row's expected expressions or raise task.timeout_s",
                                              self.timeout_s, self.memory_mb, self.limits, self._clean_run_done))
        return [next(computed) if c.expected_src is not None else c for c in checks]

    def _clean_run_done(self) -> None:
        with self._lock:
            self._stats["clean_runs"] += 1

    # ---- run info ----
    def judge_stats(self) -> dict:
        """Tests scored so far, by where they were judged: outside (value compared here) or
        inside (the assert ran in the sandbox, as in the original harness); clean sandbox runs
        made for expected values; completions scored 0 by a judge limit, by limit."""
        with self._lock:
            return {**self._stats, "over_limit": dict(self._stats["over_limit"])}

    def run_info(self) -> dict:
        """What a run record should keep: the sandbox layers active on this host, the judge
        counts, the degenerate rows per split and `notes`, one line each for under a table."""
        survey = self.survey()
        return {"sandbox_layers": sandbox.layers(), "judge": self.judge_stats(),
                "degenerate_rows": survey["degenerate"], "notes": _notes(survey)}

    def check_trainable(self) -> None:
        """Raise TaskDataError when training would reward code in a sandbox weaker than designed
        (a missing layer) and `allow_weak_sandbox` is false."""
        missing = sandbox.missing_layers()
        if missing and not self.allow_weak_sandbox:
            raise TaskDataError(f"MBPP sandbox lacks {', '.join(missing)} on this host; training "
                                "could reward escapes. Run where they exist or set "
                                "task.allow_weak_sandbox=true")

    def reward(self, completions: list[str], test_list: list[list[str]],
               test_setup_code: list[str] | None = None, **kwargs) -> list[float]:
        """TRL-style reward: 1.0 when every test passes in the sandbox, else 0.

        >>> MBPP().reward(["```python\\ndef add(a, b):\\n    return a + b\\n```",
        ...                "def add(a, b) return a + b"],
        ...               test_list=[["assert add(1, 2) == 3"]] * 2)
        [1.0, 0.0]
        """
        setup = test_setup_code if test_setup_code is not None else [""] * len(completions)
        jobs = list(zip(completions, test_list, setup, strict=True))
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            return [float(ok) for ok in pool.map(lambda j: self.is_correct(*j), jobs)]


def _notes(survey: dict) -> list[str]:
    """What a reader of MBPP numbers should know about the data, one line each."""
    use = {"train": "excluded from training", "validation": "excluded from the score",
           "test": "excluded from the score"}
    notes = []
    for split in ("test", "validation", "train"):
        ids, total = survey["degenerate"][split], len(survey["rows"][split])
        if ids:
            notes.append(f"{len(ids)} of {total} {split} rows are degenerate (one value passes "
                         f"every test; ids {', '.join(map(str, ids))}) and are {use[split]}")
    inside = sum(survey["tests_inside"].values())
    if inside:
        notes.append(f"{inside} tests of this data have a shape the judge cannot split; they run "
                     "as asserts inside the sandbox, where a forged result could pass them")
    return notes


def check_sandbox_settings(timeout_s: float, memory_mb: int, judge_s: float) -> None:
    """task.timeout_s, task.memory_mb and task.judge_s of a sandboxed code task (MBPP, HumanEval)."""
    if not timeout_s > 0 or memory_mb < 64:
        raise TaskDataError("task.timeout_s must be > 0 and task.memory_mb >= 64 (Python "
                            "itself needs ~30 MiB of address space)")
    if not judge_s > 0:
        raise TaskDataError(f"task.judge_s={judge_s} must be > 0 (seconds of judging per "
                            "completion, e.g. 2)")


def expected_in_clean_run(pending: list, setup: str, what: str, fix: str, timeout_s: float, memory_mb: int,
                          limits: mbpp_judge.Limits, on_run) -> list:
    """The checks `pending` with their non-literal expected values computed in one clean sandbox run
    (the row's setup, no candidate code) and judged as any value (MBPP and HumanEval); `on_run()` is
    called after each sandbox run (the tasks count them)."""
    imports = "".join(f"try:\n    import {m}\nexcept ImportError:\n    pass\n"
                      for m in mbpp_judge.modules_named(pending))
    args = {"code": imports, "setup": setup, "setup_may_fail": True,
            "items": [{"kind": "value", "src": c.expected_src} for c in pending]}
    for _ in range(2):  # a second try before blaming the row: the host may just be busy
        result = sandbox.run_runner(_runner_source(), args, timeout_s=timeout_s, memory_mb=memory_mb)
        on_run()
        if result.ok:
            break
    else:
        why = "timed out" if result.timed_out else f"exit status {result.returncode}"
        raise TaskDataError(f"{what}: its expected values could not be computed in a clean sandbox run ({why}); {fix}")
    records = {r["i"]: r for r in result.records if isinstance(r.get("i"), int)}
    return [mbpp_judge.resolve(c, records.get(i), limits) for i, c in enumerate(pending)]


@functools.lru_cache(maxsize=1)
def _runner_source() -> str:
    return RUNNER.read_text(encoding="utf-8")


def _row(raw: dict, path: Path, line: int) -> dict:
    ok = (isinstance(raw, dict) and isinstance(raw.get("task_id"), int)
          and isinstance(raw.get("text"), str) and isinstance(raw.get("test_list"), list)
          and raw["test_list"] and all(isinstance(t, str) for t in raw["test_list"])
          and isinstance(raw.get("test_setup_code", ""), str))
    if not ok:
        raise TaskDataError(f"{path}: line {line} is malformed ({str(raw)[:80]}); each row needs "
                            "an int `task_id`, a string `text`, a non-empty list of assertion "
                            "strings `test_list` and optionally a string `test_setup_code`")
    return {"prompt": PROMPT.format(text=raw["text"], test=raw["test_list"][0]),
            "task_id": raw["task_id"], "text": raw["text"], "code": raw.get("code", ""),
            "test_list": raw["test_list"], "test_setup_code": raw.get("test_setup_code", "")}
