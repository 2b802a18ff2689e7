"""MBPP: Mostly Basic Python Problems (Austin et al. 2021), scored by running the tests.

Data: the full 974-task `mbpp.jsonl` (Google, CC-BY-4.0), shipped unmodified in tasks/data/mbpp
(see PROVENANCE.md and LICENSE), or `path:` for a file with the same columns. Splits by task_id as
in google-research mbpp/README.md: test 11-510 (500 tasks); train 601-974; validation 511-600 (the
README's training range is 511-1000; we carve its first 90 tasks out for validation, so "train" is
smaller than the README's). Tasks 1-10 are the few-shot prompts and belong to no split.

Degenerate rows: where a trivial answer passes every test, `def f(*a, **k)` returning one
constant (test 203: all three tests expect the value the prompt shows), an argument (test 404,
`minimum(1, 2) == 1`), a fixed index or slice of one (test 45 `a[0][0]`, 487 `a[0][::-1]`) or its
negation (train 904 `not a[0]`), scores 1 (tasks/judge/mbpp_trivial.py, evaluated in the harness
against the planned checks at load). So are rows with a test `assert f(x) == a, b` (test 313, 362,
436): Python reads `b` as the assert's message, so only `a` is checked, and the reference
solutions return `a` alone, so the test cannot be fixed to `== (a, b)` either. In the shipped
data: test 37, 45, 203, 225, 313, 339, 351, 362, 404, 418, 436, 443, 457, 487 (14 of 500),
validation 582 (1 of 90), train 658, 667, 674, 698, 713, 744, 816, 847, 890, 899, 904, 951 (12 of
374). `load` leaves them out of every split, so they are never trained on nor scored; `run_info()`
reports them apart (`degenerate_rows` per split, `degenerate_answers` the answer or reason per
row, and one line per split in `notes`). A test that does not parse is a TaskDataError naming the
row, as is one whose expected side raises in its clean run; a split with no rows left is one too.

Prompt: the problem text plus the first test assertion, so the model knows the function's name
and signature (the MBPP paper shows all three tests; showing one keeps two unseen).

Scoring (the MBPP paper's rule): a completion is correct when every assertion in `test_list` holds
after the extracted program and `test_setup_code` ran. The program is the first ```python fenced
block (else the first ``` block, else the whole completion; an unterminated fence runs to the end).
It runs in the sandbox (tasks/judge/sandbox.py, via tasks/judge/code_runs.py), never in this
process, but the sandbox is not the judge: tasks/judge/mbpp_judge.py splits each
`assert f(x) == y`-shaped test so that only the call runs there and its value is compared here,
against an expected value the program cannot read. Printing
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

import ast
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import datasets

from tasks.base import DATA_DIR, TaskDataError, read_jsonl
from tasks.code_task import SandboxedCodeTask, extract_code
from tasks.judge import mbpp_judge, mbpp_trivial, sandbox

SPLITS = {"test": (11, 510), "validation": (511, 600), "train": (601, 974)}
PROMPT = ("{text}\nYour code should pass this test:\n{test}\n"
          "Write the Python function in a ```python code block.")


class MBPP(SandboxedCodeTask):
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

    def __init__(self, version: int = 4, n_eval: int | None = 500, max_new_tokens: int = 512,
                 source: str = "local", path: str | None = None, timeout_s: float = 5,
                 memory_mb: int = 512, workers: int | None = None,
                 allow_weak_sandbox: bool = False, judge_s: float = 2.0):
        if source != "local":
            raise TaskDataError(f"task.source={source!r} is unknown; MBPP is shipped, use local "
                                "(or task.path=/path/to/mbpp.jsonl for another copy)")
        self._sandboxed(timeout_s, memory_mb, workers, judge_s)
        self.version, self.n_eval, self.max_new_tokens = version, n_eval, max_new_tokens
        self.source, self.path = source, path
        self.allow_weak_sandbox = allow_weak_sandbox
        self._checks_of: dict[tuple, list[mbpp_judge.Check]] = {}  # (tests, setup) -> resolved

    # ---- data ----
    def load(self, split: str) -> datasets.Dataset:
        """Rows: `prompt`, `task_id`, `text`, `code` (reference), `test_list`, `test_setup_code`.
        Degenerate rows (see the module docstring) are left out."""
        if split not in SPLITS:
            raise TaskDataError(f"split {split!r} is unknown; use train, validation or test")
        survey = self.survey()
        left_out = set(survey["degenerate"][split])
        rows = [r for r in survey["rows"][split] if r["task_id"] not in left_out]
        if not rows:  # an empty Dataset has no columns: its first reader would fail far from here
            lo, hi = SPLITS[split]
            raise TaskDataError(
                f"MBPP data {survey['path']} has no {split} rows (task_id {lo}-{hi}"
                f"{f', {len(left_out)} degenerate ones left out' if left_out else ''}); add rows "
                f"in that range, or run without the {split} split (for validation: "
                "analysis.entropy_every_flops_fraction=null)")
        if split != "train" and self.n_eval:
            rows = rows[:self.n_eval]
        return datasets.Dataset.from_list(rows)

    def _read_survey(self) -> dict:
        """The data file read once (`survey()`): `rows`, `degenerate` ids and `tests_inside`
        (tests the judge cannot split) per split, `answers` (task_id -> the trivial answer or the
        malformed test that makes the row degenerate) and the file's `path`. Resolves every row's
        expected values and finds the degenerate rows, so a broken row fails before training."""
        path = Path(self.path).expanduser() if self.path else DATA_DIR / "mbpp" / "mbpp.jsonl"
        lines = read_jsonl(path, "MBPP data")
        every = [_row(raw, path, i) for i, raw in lines]

        def row_checks(line_row):
            (line, _), row = line_row
            try:
                return self.checks(row["test_list"], row["test_setup_code"])
            except TaskDataError as e:
                raise TaskDataError(f"{path}: line {line} (task_id {row['task_id']}): {e}") from None

        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            checks = list(pool.map(row_checks, zip(lines, every)))
        answers = {}
        for r, c in zip(every, checks):
            why = _message_test(r["test_list"]) or mbpp_trivial.trivial_answer(c)
            if why:
                answers[r["task_id"]] = why
        survey = {"rows": {}, "degenerate": {}, "tests_inside": {}, "answers": answers,
                  "path": path}
        for split, (lo, hi) in SPLITS.items():
            mine = [(r, c) for r, c in zip(every, checks) if lo <= r["task_id"] <= hi]
            survey["rows"][split] = [r for r, _ in mine]
            survey["degenerate"][split] = [r["task_id"] for r, _ in mine if r["task_id"] in answers]
            survey["tests_inside"][split] = sum(not x.outside for _, c in mine for x in c)
        return survey

    # ---- scoring ----
    def gold_completion(self, code: str, **_) -> str:
        """The dataset's reference solution, fenced as a model would write it."""
        return f"```python\n{code}\n```"

    def is_correct(self, completion: str, test_list: list[str], test_setup_code: str = "",
                   **_) -> bool:
        """True when every test passes: values judged here (mbpp_judge), the rest in the sandbox."""
        return self.judge_completion(completion, test_list, test_setup_code).ok

    def judge_completion(self, completion: str, test_list: list[str],
                         test_setup_code: str = "") -> mbpp_judge.Verdict:
        """Run one completion and judge it: the Verdict says per test whether it passed and, if
        not, why (a wrong value, an error, the sandbox's timeout, a judge limit)."""
        checks = self.checks(test_list, test_setup_code)
        return self._judge(extract_code(completion), test_setup_code, checks)

    def checks(self, test_list: list[str], test_setup_code: str = "") -> list[mbpp_judge.Check]:
        """A row's tests as resolved Checks, computed once per row: non-literal expected values
        come from one clean sandbox run (no candidate code) that every later call reuses."""
        key = (tuple(test_list), test_setup_code or "")
        return self._once(self._checks_of, key, lambda: self._resolve(*key))

    def _resolve(self, tests: tuple[str, ...], setup: str) -> list[mbpp_judge.Check]:
        checks = [mbpp_judge.plan(t, mbpp_judge.setup_names(setup)) for t in tests]
        pending = [c for c in checks if c.expected_src is not None]
        if not pending:
            return checks
        computed = iter(self._expected(pending, setup, f"MBPP row with test {tests[0][:80]!r}"))
        return [next(computed) if c.expected_src is not None else c for c in checks]

    # ---- run info ----
    def run_info(self) -> dict:
        """What a run record should keep: the sandbox layers active on this host, the judge
        counts, the degenerate rows per split and why each is (`degenerate_answers`), and
        `notes`, one line each for under a table."""
        survey = self.survey()
        return self._run_info(degenerate_rows=survey["degenerate"],
                              degenerate_answers={str(k): v for k, v in survey["answers"].items()},
                              notes=_notes(survey))

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
        return self._scores(list(zip(completions, test_list, setup, strict=True)))


def _notes(survey: dict) -> list[str]:
    """What a reader of MBPP numbers should know about the data, one line each."""
    use = {"train": "excluded from training", "validation": "excluded from the score",
           "test": "excluded from the score"}
    notes = []
    for split in ("test", "validation", "train"):
        ids, total = survey["degenerate"][split], len(survey["rows"][split])
        if ids:
            shown = ", ".join(f"{i} ({_short(survey['answers'][i])})" for i in ids)
            notes.append(f"{len(ids)} of {total} {split} rows are degenerate (a trivial answer "
                         f"passes every test, or a test checks less than it shows): {shown}; "
                         f"{use[split]}")
    inside = sum(survey["tests_inside"].values())
    if inside:
        notes.append(f"{inside} tests of this data have a shape the judge cannot split; they run "
                     "as asserts inside the sandbox, where a forged result could pass them")
    return notes


def _short(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def _message_test(tests: list[str]) -> str | None:
    """The first test written `assert f(x) == a, b`, which checks only `a` (Python reads `b` as
    the assert's message), described; None if there is none."""
    for i, test in enumerate(tests):
        tree = mbpp_judge._parse(test)  # _row made sure each test parses
        if any(isinstance(n, ast.Assert) and n.msg is not None for n in tree.body):
            return f"test {i} is `assert f(x) == a, b`: only a is checked"
    return None


def _row(raw: dict, path: Path, line: int) -> dict:
    ok = (isinstance(raw, dict) and isinstance(raw.get("task_id"), int)
          and isinstance(raw.get("text"), str) and isinstance(raw.get("test_list"), list)
          and raw["test_list"] and all(isinstance(t, str) for t in raw["test_list"])
          and isinstance(raw.get("test_setup_code", ""), str))
    if not ok:
        raise TaskDataError(f"{path}: line {line} is malformed ({str(raw)[:80]}); each row needs "
                            "an int `task_id`, a string `text`, a non-empty list of assertion "
                            "strings `test_list` and optionally a string `test_setup_code`")
    for k, test in enumerate(raw["test_list"]):
        where = f"{path}: line {line} (task_id {raw['task_id']}): test {k} {test[:60]!r}"
        try:
            tree = mbpp_judge._parse(test)
        except (SyntaxError, ValueError, MemoryError, RecursionError) as e:
            raise TaskDataError(f"{where} is not valid Python ({type(e).__name__}: "
                                f"{getattr(e, 'msg', e)}); fix the row's test_list") from None
        if not tree.body:  # would run as an empty statement in the sandbox and always pass
            raise TaskDataError(f"{where} is empty; give an assertion or drop it from test_list")
    return {"prompt": PROMPT.format(text=raw["text"], test=raw["test_list"][0]),
            "task_id": raw["task_id"], "text": raw["text"], "code": raw.get("code", ""),
            "test_list": raw["test_list"], "test_setup_code": raw.get("test_setup_code", "")}
