"""MBPP: Mostly Basic Python Problems (Austin et al. 2021), scored by running the tests.

Data: the full 974-task `mbpp.jsonl` (Google, CC-BY-4.0), shipped unmodified in tasks/data/mbpp
(see PROVENANCE.md and LICENSE), or `path:` for a file with the same columns. Splits by task_id as
in google-research mbpp/README.md: test 11-510 (500 tasks); train 601-974; validation 511-600 (the
README's training range is 511-1000; we carve its first 90 tasks out for validation, so "train" is
smaller than the README's). Tasks 1-10 are the few-shot prompts and belong to no split.

Prompt: the problem text plus the first test assertion, so the model knows the function's name
and signature (the MBPP paper shows all three tests; showing one keeps two unseen).

Scoring (the MBPP paper's rule): a completion is correct when every assertion in `test_list` holds
after the extracted program and `test_setup_code` ran. The program is the first ```python fenced
block (else the first ``` block, else the whole completion; an unterminated fence runs to the end).
It runs in the sandbox (tasks/sandbox.py), never in this process, but the sandbox is not the
judge: tasks/mbpp_judge.py splits each `assert f(x) == y`-shaped test so that only the call runs
there and its value is compared here, against an expected value the program cannot read. Printing
a fake success line, skipping asserts, reading the data file (hidden in the sandbox) or returning
an object whose `__eq__` always says True therefore score 0. Tests of other shapes run as
statements in the sandbox; `judge_stats()` counts both kinds. `run_info()` reports the sandbox's
layers and the counts; `check_trainable()` refuses to train on a weaker sandbox unless
`allow_weak_sandbox`. `extract_answer` returns the extracted program, whitespace-normalised, for
majority voting.

    python -m pytest tests/test_task_mbpp.py -q
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
    """

    name = "mbpp"

    def __init__(self, version: int = 2, n_eval: int | None = 500, max_new_tokens: int = 512,
                 source: str = "local", path: str | None = None, timeout_s: float = 5,
                 memory_mb: int = 512, workers: int | None = None,
                 allow_weak_sandbox: bool = False):
        if source != "local":
            raise TaskDataError(f"task.source={source!r} is unknown; MBPP is shipped, use local "
                                "(or task.path=/path/to/mbpp.jsonl for another copy)")
        if timeout_s <= 0 or memory_mb < 64:
            raise TaskDataError("task.timeout_s must be > 0 and task.memory_mb >= 64 (Python "
                                "itself needs ~30 MiB of address space)")
        self.version, self.n_eval, self.max_new_tokens = version, n_eval, max_new_tokens
        self.source, self.path = source, path
        self.timeout_s, self.memory_mb = timeout_s, memory_mb
        self.workers = workers or min(8, os.cpu_count() or 1)
        self.allow_weak_sandbox = allow_weak_sandbox
        self._stats = {"programs": 0, "tests_outside": 0, "tests_inside": 0}
        self._lock = threading.Lock()

    # ---- data ----
    def load(self, split: str) -> datasets.Dataset:
        """Rows: `prompt`, `task_id`, `text`, `code` (reference), `test_list`, `test_setup_code`."""
        if split not in SPLITS:
            raise TaskDataError(f"split {split!r} is unknown; use train, validation or test")
        lo, hi = SPLITS[split]
        path = Path(self.path).expanduser() if self.path else DATA_DIR / "mbpp" / "mbpp.jsonl"
        rows = [r for r in (_row(raw, path, i) for i, raw in read_jsonl(path, "MBPP data")) if lo <= r["task_id"] <= hi]
        if split != "train" and self.n_eval:
            rows = rows[:self.n_eval]
        return datasets.Dataset.from_list(rows)

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
        checks = _plan(tuple(test_list))
        args = {"code": extract_code(completion), "setup": test_setup_code or "",
                "items": [c.item() for c in checks]}
        result = sandbox.run_runner(_runner_source(), args, timeout_s=self.timeout_s,
                                    memory_mb=self.memory_mb)
        outside = sum(c.outside for c in checks)
        with self._lock:
            self._stats["programs"] += 1
            self._stats["tests_outside"] += outside
            self._stats["tests_inside"] += len(checks) - outside
        return all(mbpp_judge.verdict(checks, result.records, result.ok))

    # ---- run info ----
    def judge_stats(self) -> dict:
        """Tests scored so far, by where they were judged: outside (value compared here) or
        inside (the assert ran in the sandbox, as in the original harness)."""
        with self._lock:
            return dict(self._stats)

    def run_info(self) -> dict:
        """What a run record should keep: the sandbox layers active on this host and the judge
        counts."""
        return {"sandbox_layers": sandbox.layers(), "judge": self.judge_stats()}

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


@functools.lru_cache(maxsize=4096)
def _plan(test_list: tuple[str, ...]) -> list[mbpp_judge.Check]:
    return [mbpp_judge.plan(t) for t in test_list]


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
