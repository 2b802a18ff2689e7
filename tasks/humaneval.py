"""HumanEval (Chen et al. 2021): 164 hand-written Python problems, scored by running their tests.

Data: OpenAI's `HumanEval.jsonl.gz`, shipped unmodified in tasks/data/humaneval (MIT; see
PROVENANCE.md and LICENSE), or `source: hub` for `openai/openai_humaneval` (split test), or `path:`
for a file in the official format (`.jsonl`, or `.jsonl.gz`), one row per problem with string
`task_id`, `prompt`, `canonical_solution`, `test` and `entry_point`. A malformed row is one
TaskDataError naming file, line and field.

Splits: HumanEval has only a test set, and this task follows MATH-500's convention for an
evaluation-only benchmark: test = all 164 problems; load("train") and load("validation") raise
rather than carve rows out of the test set, which would make scores incomparable with published
pass@1. Train on another task (e.g. mbpp) and evaluate here.

Prompt: the benchmark's own `prompt` field (imports, the function signature and its docstring),
unchanged; it is also kept as the column `code_prompt`, which scoring needs (the harness does not
pass `prompt` to the reward). Accepted completions:
- the function body continuing the prompt, as in the official harness (program = prompt +
  completion);
- a whole program that repeats the `def` (with or without the imports and the docstring): it is
  appended to the prompt too, so its `def` replaces the prompt's and the prompt's imports and
  helper functions stay defined;
- either of those inside a markdown fence: the first ```python block, else the first ``` block
  (an unterminated fence runs to the end), as MBPP extracts code; text outside it is ignored.

Scoring (pass@1 on the official tests, as the official harness and MBPP): reward 1.0 when every
test of `check(candidate)` passes, else 0. The program runs in the sandbox (tasks/sandbox.py),
never in this process, and is judged as MBPP is (tasks/mbpp_judge.py, tasks/mbpp_runner.py): the
sandbox evaluates only each test's call, e.g. `candidate([1, 2])`, and returns its value as plain
data, which is compared here with the test's expected value, which never enters the sandbox.
`plan(test, entry_point)` reads each `check` body with `ast`:
- `assert <call> == <expected>` and the other shapes mbpp_judge.plan splits, and
  `assert abs(<call> - <expected>) < tol` (also `<=`, `math.fabs`), are judged by value here when
  the value side names only `candidate` and builtins. A literal expected value is read here; an
  expected expression of builtins and stdlib only (`(3 + 5 + 7, 3 * 5 * 7)`, `2.0 / 3.0`) is
  computed once per problem in a clean sandbox run without the candidate, cached, and judged the
  same way (MBPP's treatment of its non-literal rows);
- a loop `for x in range(<ints>)` of such asserts is unrolled, and a name bound once to a pure
  expression of literals and builtins (`lst = list(range(-99, 100, 2))`) is substituted into the
  asserts that read it, so those tests are judged by value too;
- statements that cannot fail (`assert True`, a bare `print`, docstrings) are dropped;
- a loop of random inputs whose only use of the candidate is a last `assert candidate(<args>) ==
  <expected>` (HumanEval/38, 50, 53) runs once, seeded (random.seed(SAMPLE_SEED)), in a clean
  sandbox run with the prompt's helpers and no candidate, which records each call's arguments and
  expected value; those become fixed value tests (the official harness draws new unseeded inputs
  on every run; here every completion meets the same 100). That run is retried once and then
  raises TaskDataError (tasks/code_runs.clean_run), as does a sampler that raises: the loop is
  never left to be judged inside the sandbox because a run failed;
- everything else (a loop that checks a property of the result, tests that compare the candidate
  with itself) runs together, in order, inside the sandbox as one function `check(candidate)`,
  as the original harness ran it. There a forged result or an assert-skipping trace hook could
  pass it; `run_info()["notes"]` names those problems.
Of the shipped 164, 162 are judged wholly by value and 2 partly in the sandbox: HumanEval/33
(literal tests by value, plus self-comparisons inside) and HumanEval/32 (a random-input loop that
checks `abs(poly(coeffs, solution)) < 1e-4`: judged wholly inside, so a forged result can pass it,
as it could in the official harness). HumanEval/34 has a single test, so one constant value
passes it; it is kept, as published. tests/test_task_humaneval.py pins these counts. The
judge's limits are MBPP's (mbpp_judge.Limits, `judge_s`). `extract_answer` returns the extracted code, whitespace-normalised,
for majority voting; `gold_completion` is the canonical solution (a body continuing the prompt).

    python -m pytest tests/test_task_humaneval.py -q
"""
from __future__ import annotations

import ast
import builtins
import copy
import gzip
import keyword
import operator
import os
import textwrap
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import datasets

from tasks import code_runs, mbpp_judge, sandbox
from tasks.base import (DATA_DIR, TaskDataError, check_count, json_kind, parse_json, read_text,
                        row_error, user_path)
from tasks.code_runs import check_sandbox_settings
from tasks.mbpp import extract_code

HUB_ID = "openai/openai_humaneval"
WHAT = "HumanEval data"
COLUMNS = ("task_id", "prompt", "canonical_solution", "test", "entry_point")
_BUILTINS = frozenset(dir(builtins))
_STDLIB = frozenset(__import__("sys").stdlib_module_names)
# Calls a substituted name may hold: builtins without side effects, so evaluating the expression
# at each use equals evaluating it once (a Random(42) or an input() would not).
_PURE = frozenset({"abs", "all", "any", "bool", "chr", "dict", "divmod", "enumerate", "filter",
                   "float", "frozenset", "int", "len", "list", "map", "max", "min", "ord", "pow",
                   "range", "reversed", "round", "set", "sorted", "str", "sum", "tuple", "zip"})
MAX_UNROLL = 50  # iterations of a `for x in range(...)` of asserts unrolled into value tests
_BUNDLE = "_esbench_check"  # the in-sandbox check function; not `check`, which a candidate may use
_SAMPLER, _RECORD = "_esbench_sample", "_esbench_record"
SAMPLE_SEED = 0  # random.seed for the clean run that samples random-input tests


@dataclass(frozen=True)
class Plan:
    """How one problem is judged: `checks` in order (outside: a value judged here; inside: the
    statements no value test covers, run as one function in the sandbox), the sandbox `setup`
    (the test module's top level without `check`, then `candidate = <entry_point>`), and the
    check-body statements judged inside (`inside_statements`, 0 when judged wholly by value)."""

    checks: tuple[mbpp_judge.Check, ...]
    setup: str
    inside_statements: int
    sample: str | None = None  # the inside statements as a sampler (see _sampler), else None

    @property
    def by_value(self) -> bool:
        return all(c.outside for c in self.checks)


@dataclass(frozen=True)
class AbsClose:
    """`abs(value - expected) < tol` (or `<=`), the test's own tolerance, applied here."""

    tol: float
    strict: bool = True

    def __call__(self, value, expected) -> bool:
        gap = abs(value - expected)
        return bool(gap < self.tol if self.strict else gap <= self.tol)


class HumanEval:
    """HumanEval (see the module docstring for data, splits, accepted completions and scoring).

    Args:
        version: bump when scores change.
        n_eval: use at most this many test rows (None = all 164).
        max_new_tokens: completion length for evaluation.
        source: "local" (shipped copy, or `path`) or "hub" (`openai/openai_humaneval`).
        path: a file in the official HumanEval.jsonl(.gz) format, instead of the shipped copy.
        timeout_s: wall-clock limit per program, in seconds (the official harness uses 3).
        memory_mb: memory ceiling per program, in MiB.
        workers: programs run in parallel when scoring a batch (None = min(8, CPUs)).
        judge_s: wall-clock limit for judging one completion's values here, in seconds.
    """

    name = "humaneval"

    def __init__(self, version: int = 1, n_eval: int | None = None, max_new_tokens: int = 512,
                 source: str = "local", path: str | None = None, timeout_s: float = 5,
                 memory_mb: int = 512, workers: int | None = None, judge_s: float = 2.0):
        if source not in ("local", "hub"):
            raise TaskDataError(f"task.source={source!r} is unknown; use local or hub")
        if source == "hub" and path:
            raise TaskDataError("task.path is only read with task.source=local; drop one of them")
        check_count("n_eval", n_eval)
        check_sandbox_settings(timeout_s, memory_mb, judge_s)
        self.version, self.n_eval, self.max_new_tokens = version, n_eval, max_new_tokens
        self.source, self.path = source, path
        self.timeout_s, self.memory_mb = timeout_s, memory_mb
        self.workers = workers or min(8, os.cpu_count() or 1)
        self.limits = mbpp_judge.Limits(seconds=judge_s)
        self._stats = code_runs.JudgeStats()
        self._lock = threading.Lock()
        self._plans: dict[tuple[str, str], Plan] = {}
        self._gates: dict[tuple[str, str], threading.Lock] = {}
        self._survey_gate = threading.Lock()
        self._survey: dict | None = None

    # ---- data ----
    def load(self, split: str) -> datasets.Dataset:
        """Rows: `prompt` (the benchmark's), `task_id`, `code_prompt` (the same text, for
        scoring), `canonical_solution`, `test`, `entry_point`."""
        if split in ("train", "validation"):
            raise TaskDataError(f"HumanEval is evaluation-only: there is no {split} split. Train "
                                "on another task (e.g. task=mbpp) and evaluate with "
                                "task=humaneval.")
        if split != "test":
            raise TaskDataError(f"split {split!r} is unknown; HumanEval has only test")
        rows = self.survey()["rows"]
        return datasets.Dataset.from_list(rows[:self.n_eval] if self.n_eval else rows)

    def survey(self) -> dict:
        """The data read once: `rows`, and per problem how it is judged (`by_value`: task_ids
        judged wholly by value; `inside`: task_ids with statements judged in the sandbox;
        `degenerate`: task_ids where one value passes every test). Plans every row (clean sandbox
        runs for non-literal expected values), so a broken row fails here, before any scoring."""
        with self._survey_gate:
            if self._survey is None:
                rows = self._rows()
                with ThreadPoolExecutor(max_workers=self.workers) as pool:
                    plans = list(pool.map(lambda r: self.plan(r["test"], r["entry_point"],
                                                             r["code_prompt"]), rows))
                pairs = list(zip(rows, plans))
                self._survey = {
                    "rows": rows,
                    "by_value": [r["task_id"] for r, p in pairs if p.by_value],
                    "inside": [r["task_id"] for r, p in pairs if not p.by_value],
                    "degenerate": [r["task_id"] for r, p in pairs
                                   if mbpp_judge.degenerate(list(p.checks))]}
            return self._survey

    def _rows(self) -> list[dict]:
        if self.source == "hub":
            try:
                raw = datasets.load_dataset(HUB_ID, split="test").to_list()
            except Exception as e:  # noqa: BLE001 - any hub failure gets the same advice
                detail = " ".join(f"{type(e).__name__}: {e}".split())[:200]
                raise TaskDataError(
                    f"could not load {HUB_ID} (split test) from the Hugging Face hub ({detail}). "
                    "Offline? Use task.source=local (the shipped copy) or set HF_DATASETS_CACHE "
                    "to a cache that holds it.") from None
            return [_row(r, f"{HUB_ID}:test", i) for i, r in enumerate(raw, start=1)]
        path = (user_path(self.path, "a HumanEval .jsonl or .jsonl.gz file") if self.path
                else DATA_DIR / "humaneval" / "HumanEval.jsonl.gz")
        return [_row(r, path, i) for i, r in read_rows(path)]

    # ---- judging plan ----
    def plan(self, test: str, entry_point: str, code_prompt: str = "") -> Plan:
        """A problem's resolved Plan, computed once per problem: non-literal expected values and
        sampled random-input tests come from clean sandbox runs (no candidate code) that later
        calls reuse."""
        key = (test, entry_point, code_prompt)
        with self._lock:
            if key in self._plans:
                return self._plans[key]
            gate = self._gates.setdefault(key, threading.Lock())
        with gate:
            with self._lock:
                if key in self._plans:
                    return self._plans[key]
            found = self._sample(self._resolve(plan(test, entry_point), entry_point),
                                 code_prompt, entry_point)
            with self._lock:
                self._plans[key] = found
            return found

    def _resolve(self, unresolved: Plan, entry_point: str) -> Plan:
        checks = list(unresolved.checks)
        pending = [c for c in checks if c.expected_src is not None]
        if not pending:
            return unresolved
        computed = iter(code_runs.expected_in_clean_run(
            pending, "", f"HumanEval problem {entry_point!r}", self.timeout_s, self.memory_mb,
            self.limits, self._stats))
        resolved = [next(computed) if c.expected_src is not None else c for c in checks]
        # A check resolve() sent inside runs its assert as a statement, where `candidate` is bound
        return Plan(tuple(resolved), unresolved.setup,
                    unresolved.inside_statements + sum(not c.outside for c in resolved)
                    - sum(not c.outside for c in checks), unresolved.sample)

    def _sample(self, found: Plan, code_prompt: str, entry_point: str) -> Plan:
        """Inside statements that are random-input loops of `assert candidate(...) == <expr>`
        (HumanEval/38, 50, 53): run once, seeded, in a clean sandbox run with the prompt's own
        helpers and no candidate, recording each call's arguments and expected value; the Plan
        then calls the candidate on those arguments and judges the values here. A failed run is
        retried, then a TaskDataError, as is a sampler that raises; arguments that are not plain
        data leave the loop inside (named in the notes)."""
        if found.sample is None or sum(not c.outside for c in found.checks) != 1:
            return replace(found, sample=None)
        args = {"code": code_prompt + f"\nimport random\nrandom.seed({SAMPLE_SEED})\n",
                "setup": found.sample, "items": [{"kind": "value", "src": f"{_SAMPLER}()"}]}
        what = f"HumanEval problem {entry_point!r}: its random-input tests"
        result = code_runs.clean_run(args, what, "fix the row's test or raise task.timeout_s",
                                     self.timeout_s, self.memory_mb, self._stats)
        record = next((r for r in result.records if r.get("i") == 0), {})
        if "value" not in record:
            problem = record.get("error") or record.get("load_error") or "no record"
            raise TaskDataError(f"{what} could not be sampled ({str(problem)[:120]}); fix the "
                                "row's test")
        try:
            pairs = mbpp_judge.decode(record["value"], self.limits)
        except (TypeError, ValueError, ArithmeticError, RecursionError, MemoryError):
            pairs = None
        sampled = _sampled_checks(pairs)
        if sampled is None:
            return replace(found, sample=None)
        checks = [x for c in found.checks for x in (sampled if not c.outside else [c])]
        return Plan(tuple(checks), found.setup, 0)

    # ---- scoring ----
    def gold_completion(self, canonical_solution: str, **_) -> str:
        """The canonical solution: the function body continuing the prompt."""
        return canonical_solution

    def extract_answer(self, text: str) -> str | None:
        """The extracted code with blank lines and trailing spaces removed, or None if empty."""
        lines = [line.rstrip() for line in extract_code(text).splitlines() if line.strip()]
        return "\n".join(lines) or None

    def is_correct(self, completion: str, code_prompt: str, test: str, entry_point: str,
                   **_) -> bool:
        """True when every test of the problem passes (values judged here, see the docstring)."""
        return self.judge_completion(completion, code_prompt, test, entry_point).ok

    def judge_completion(self, completion: str, code_prompt: str, test: str,
                         entry_point: str) -> mbpp_judge.Verdict:
        """Run one completion and judge it; the Verdict says per check whether it passed and, if
        not, why (a wrong value, an error, the sandbox's timeout, a judge limit)."""
        found = self.plan(test, entry_point, code_prompt)
        return code_runs.judge(program(code_prompt, completion), found.setup, found.checks,
                               self.timeout_s, self.memory_mb, self.limits, self._stats)

    def reward(self, completions: list[str], code_prompt: list[str], test: list[str],
               entry_point: list[str], **kwargs) -> list[float]:
        """TRL-style reward: 1.0 when every test passes, else 0.

        >>> task = HumanEval()
        >>> stub = 'def add(a, b):\\n    \"\"\"a + b\"\"\"\\n'
        >>> task.reward(["    return a + b\\n", "```python\\ndef add(a, b):\\n    return a - b\\n```"],
        ...             code_prompt=[stub] * 2, entry_point=["add"] * 2,
        ...             test=["def check(candidate):\\n    assert candidate(1, 2) == 3\\n"] * 2)
        [1.0, 0.0]
        """
        jobs = list(zip(completions, code_prompt, test, entry_point, strict=True))
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            return [float(ok) for ok in pool.map(lambda j: self.is_correct(*j), jobs)]

    # ---- run info ----
    def judge_stats(self) -> dict:
        """Checks scored so far, by where they were judged (outside: value compared here; inside:
        statements run in the sandbox), clean sandbox runs, completions stopped by a judge limit."""
        return self._stats.snapshot()

    def run_info(self) -> dict:
        """What a run record should keep: sandbox layers, judge counts and `notes`."""
        survey = self.survey()
        return {"sandbox_layers": sandbox.layers(), "judge": self.judge_stats(),
                "judged_by_value": len(survey["by_value"]),
                "judged_partly_inside": survey["inside"], "notes": _notes(survey)}


def _notes(survey: dict) -> list[str]:
    """What a reader of HumanEval numbers should know about the judging, one line each."""
    notes = []
    inside, total = survey["inside"], len(survey["rows"])
    if inside:
        notes.append(f"{len(inside)} of {total} problems have tests the judge cannot split "
                     f"({', '.join(inside)}); they run inside the sandbox, where a forged result "
                     "could pass them")
    if survey["degenerate"]:
        notes.append(f"{len(survey['degenerate'])} of {total} problems can be passed by one "
                     f"constant value ({', '.join(survey['degenerate'])}); kept, as published")
    return notes


def program(code_prompt: str, completion: str) -> str:
    """The program a completion makes: the prompt, then the completion's code (the first fenced
    block if it has one, else all of it), as the official harness's prompt + completion."""
    code = extract_code(completion)
    return code_prompt + ("" if code_prompt.endswith("\n") else "\n") + code


# ---- reading the data ----

def read_rows(path: Path) -> list[tuple[int, object]]:
    """(line number, parsed object) for every non-blank line of a .jsonl or .jsonl.gz file, every
    failure a TaskDataError naming the file (and line)."""
    if path.name.endswith(".gz"):
        text = _gunzip(path)
    else:
        text = read_text(path, WHAT)
    return [(i, parse_json(line, path, i)) for i, line in enumerate(text.split("\n"), start=1)
            if line.strip()]


def _gunzip(path: Path) -> str:
    if path.is_dir():
        raise TaskDataError(f"{WHAT} file {path} is a directory; point task.path at the file")
    if not path.is_file():
        raise TaskDataError(f"{WHAT} file {path} not found; check task.path or reinstall esbench")
    try:
        data = gzip.decompress(path.read_bytes())
    except OSError as e:
        if isinstance(e, gzip.BadGzipFile) or not e.strerror:
            raise TaskDataError(f"{WHAT} file {path} is not valid gzip ({e}); give the .jsonl.gz "
                                "as released, or the uncompressed .jsonl") from None
        raise TaskDataError(f"{WHAT} file {path} cannot be read ({e.strerror}); check its "
                            "permissions") from None
    except (EOFError, zlib.error) as e:
        raise TaskDataError(f"{WHAT} file {path} is not valid gzip ({type(e).__name__}: {e}); "
                            "give the .jsonl.gz as released, or the uncompressed .jsonl") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise row_error(path, line, f"not UTF-8 text (byte {e.object[e.start]:#04x})",
                        "save the file as UTF-8") from None
    if not text.strip():
        raise TaskDataError(f"{WHAT} file {path} is empty; it needs one JSON object per line")
    return text


def _row(raw, where, line: int) -> dict:
    """Validate one official-format row; a bad one is named `file:line` (hub: `id:split:row`)."""
    fix = ("each row needs string fields " + ", ".join(f"`{c}`" for c in COLUMNS)
           + " as in OpenAI's HumanEval.jsonl")
    if not isinstance(raw, dict):
        raise row_error(where, line, f"the row is {json_kind(raw)}, not an object", fix)
    for field in COLUMNS:
        if not isinstance(raw.get(field), str):
            problem = "missing" if field not in raw else f"{json_kind(raw[field])}, not a string"
            raise row_error(where, line, f"field `{field}` is {problem}", fix)
    entry = raw["entry_point"]
    if not entry.isidentifier() or keyword.iskeyword(entry):
        raise row_error(where, line, f"field `entry_point` ({entry[:60]!r}) is not a Python name",
                        "give the name of the function the tests call")
    try:
        tree = ast.parse(raw["test"])
    except (SyntaxError, ValueError, MemoryError, RecursionError) as e:
        raise row_error(where, line, f"field `test` is not valid Python ({type(e).__name__}: "
                        f"{getattr(e, 'msg', e)}, line {getattr(e, 'lineno', '?')} of the field)",
                        "fix the test code") from None
    if _check_def(tree) is None:
        raise row_error(where, line, "field `test` defines no top-level `def check(candidate)`",
                        "the tests must be a function check(candidate), as in HumanEval")
    try:
        ast.parse(raw["prompt"] + raw["canonical_solution"])
    except (SyntaxError, ValueError, MemoryError, RecursionError) as e:
        raise row_error(where, line, f"fields `prompt` + `canonical_solution` are not valid "
                        f"Python ({type(e).__name__}: {getattr(e, 'msg', e)})",
                        "the canonical solution must continue the prompt") from None
    return {"prompt": raw["prompt"], "task_id": raw["task_id"], "code_prompt": raw["prompt"],
            "canonical_solution": raw["canonical_solution"], "test": raw["test"],
            "entry_point": entry}


def _check_def(tree: ast.Module) -> ast.FunctionDef | None:
    """The test's `def check(candidate)` (the last one, as Python would bind it), or None."""
    found = None
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == "check":
            a = stmt.args
            if len(a.posonlyargs) + len(a.args) == 1 and not (a.vararg or a.kwarg
                                                              or a.kwonlyargs):
                found = stmt
            else:
                found = None
    return found


# ---- planning a check body ----

def plan(test: str, entry_point: str) -> Plan:
    """How one problem's `check(candidate)` is judged (unresolved: an expected expression waits
    for its clean sandbox run, HumanEval.plan). See the module docstring for the rules."""
    tree = ast.parse(test)
    check_fn = _check_def(tree)
    others = [s for s in tree.body if s is not check_fn]
    setup = (ast.unparse(ast.Module(others, [])) + "\n" if others else "") \
        + f"candidate = {entry_point}\n"
    arg = (check_fn.args.posonlyargs + check_fn.args.args)[0].arg
    body = [_rename(s, arg) for s in check_fn.body] if arg != "candidate" else check_fn.body
    body = _substitute_lets(body)
    statements = []  # (stmt, Check | None): None = judged inside
    for stmt in body:
        if _no_op(stmt):
            continue
        unrolled = _unroll(stmt)
        if unrolled is not None:
            statements += [(s, _outside(s)) for s in unrolled]
        else:
            statements.append((stmt, _outside(stmt)))
    # A name the inside statements bind is local to check() everywhere in it (Python's scoping),
    # so a value test that reads it must run inside too; repeat until nothing moves.
    while True:
        bound = _bound({id(s) for s, c in statements if c is None}, statements)
        moved = [(s, None if c is not None and _reads(c) & bound else c) for s, c in statements]
        if moved == statements:
            break
        statements = moved
    statements = _drop_unused_lets(statements)
    checks, inside, bundle_at = [], [s for s, c in statements if c is None], None
    for s, c in statements:
        if c is None:
            if bundle_at is None:
                bundle_at = len(checks)
                checks.append(_bundle(inside))
        else:
            checks.append(c)
    return Plan(tuple(checks), setup, len(inside), _sampler(inside))


def _sampler(inside: list[ast.stmt]) -> str | None:
    """The inside statements as a function that returns [(args, expected), ...] instead of
    calling the candidate, when every use of the candidate in them is the last statement of a
    `for` loop, `assert candidate(<args>) == <expected>` with no candidate in args or expected;
    else None. Its clean, seeded run turns a random-input loop into fixed value tests."""
    out, found = [], False
    for stmt in inside:
        if "candidate" not in mbpp_judge.free_names(stmt):
            out.append(stmt)
            continue
        if not (isinstance(stmt, ast.For) and stmt.body and not stmt.orelse):
            return None
        *head, last = stmt.body
        call = getattr(getattr(last, "test", None), "left", None)
        if not (isinstance(last, ast.Assert) and isinstance(last.test, ast.Compare)
                and len(last.test.ops) == 1 and isinstance(last.test.ops[0], ast.Eq)
                and isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                and call.func.id == "candidate" and not call.keywords
                and not any(isinstance(a, ast.Starred) for a in call.args)
                and "candidate" not in set().union(*(mbpp_judge.free_names(a) for a in call.args),
                                                    mbpp_judge.free_names(last.test.comparators[0]))
                and not any("candidate" in mbpp_judge.free_names(h) for h in head)
                and "candidate" not in mbpp_judge.free_names(stmt.iter)):
            return None
        record = ast.parse(f"{_RECORD}.append(((), None))").body[0]
        record.value.args[0].elts = [ast.Tuple(list(call.args), ast.Load()),
                                     last.test.comparators[0]]
        loop = copy.copy(stmt)
        loop.body = [*head, ast.fix_missing_locations(record)]
        out.append(loop)
        found = True
    if not found:
        return None
    lines = "\n".join(ast.unparse(s) for s in [ast.parse(f"{_RECORD} = []").body[0], *out])
    return (f"def {_SAMPLER}():\n{textwrap.indent(lines, '    ')}\n"
            f"    return {_RECORD}\n")


def _sampled_checks(pairs) -> list[mbpp_judge.Check] | None:
    """[(args, expected), ...] from the sampler's clean run as value tests, or None unless every
    argument is plain data whose repr reads back as the same value."""
    if not isinstance(pairs, list) or not pairs:
        return None
    checks = []
    for pair in pairs:
        if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], tuple)):
            return None
        try:
            if any(type(ast.literal_eval(repr(a))) is not type(a) or ast.literal_eval(repr(a)) != a
                   for a in pair[0]):
                return None
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None
        call = f"candidate({', '.join(repr(a) for a in pair[0])})"
        checks.append(mbpp_judge.Check(call, True, operator.eq, pair[1], test=call))
    return checks


def _rename(stmt: ast.stmt, arg: str) -> ast.stmt:
    """`def check(f)` reads the candidate as `f`: call it `candidate` like the other 163."""
    class Rename(ast.NodeTransformer):
        def visit_Name(self, node):
            return ast.copy_location(ast.Name("candidate", node.ctx), node) \
                if node.id == arg else node
    return ast.fix_missing_locations(Rename().visit(copy.deepcopy(stmt)))


def _no_op(stmt: ast.stmt) -> bool:
    """A statement that cannot fail: a docstring or constant, a bare builtin name (`print`),
    `pass`, or an assert of a true literal (`assert True, "..."`)."""
    if isinstance(stmt, ast.Pass):
        return True
    if isinstance(stmt, ast.Expr):
        v = stmt.value
        return isinstance(v, ast.Constant) or (isinstance(v, ast.Name) and v.id in _BUILTINS)
    if isinstance(stmt, ast.Assert):
        value = mbpp_judge.literal(stmt.test)
        try:
            return value is not mbpp_judge._MISSING and bool(value)
        except Exception:  # noqa: BLE001 - a literal's bool() does not raise, but be sure
            return False
    return False


def _value_ok(node: ast.AST) -> bool:
    """A value side the sandbox may evaluate: it calls the candidate and reads nothing but
    builtins, so no expected value and no name of the test's own hides in it."""
    names = mbpp_judge.free_names(node)
    return "candidate" in names and names <= _BUILTINS | {"candidate"}


def _outside(stmt: ast.stmt) -> mbpp_judge.Check | None:
    """The statement as a value test judged here, or None when it must run inside."""
    if not isinstance(stmt, ast.Assert):
        return None
    src = ast.unparse(ast.Assert(stmt.test))  # the message never matters to the verdict
    check = _abs_close(src, stmt.test) or mbpp_judge.plan(src)
    if not check.outside or not _value_ok(ast.parse(check.src, mode="eval")):
        return None
    return check


def _abs_close(src: str, test: ast.AST) -> mbpp_judge.Check | None:
    """`abs(a - b) < tol` (or `<=`, `math.fabs`): the side that calls the candidate runs in the
    sandbox alone, the other is the expected value, the tolerance is applied here."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], (ast.Lt, ast.LtE))):
        return None
    call, tol = test.left, mbpp_judge.literal(test.comparators[0])
    func = getattr(call, "func", None)
    named = (isinstance(func, ast.Name) and func.id == "abs") or (
        isinstance(func, ast.Attribute) and func.attr == "fabs"
        and isinstance(func.value, ast.Name) and func.value.id == "math")
    if not (named and len(call.args) == 1 and not call.keywords
            and isinstance(call.args[0], ast.BinOp) and isinstance(call.args[0].op, ast.Sub)
            and isinstance(tol, (int, float)) and not isinstance(tol, bool)):
        return None
    a, b = call.args[0].left, call.args[0].right
    value, expected = (a, b) if "candidate" in mbpp_judge.free_names(a) else (b, a)
    if "candidate" in mbpp_judge.free_names(expected):
        return None
    op = AbsClose(float(tol), isinstance(test.ops[0], ast.Lt))
    found = mbpp_judge.literal(expected)
    if found is not mbpp_judge._MISSING:
        if not isinstance(found, (int, float, complex)):
            return None
        return mbpp_judge.Check(ast.unparse(value), True, op, found, test=src)
    if not mbpp_judge.free_names(expected) <= _BUILTINS | _STDLIB:
        return None
    return mbpp_judge.Check(ast.unparse(value), True, op, mbpp_judge.PENDING,
                            expected_src=ast.unparse(expected), test=src)


def _reads(check: mbpp_judge.Check) -> set[str]:
    srcs = [check.src] + ([check.expected_src] if check.expected_src else [])
    return set().union(*(mbpp_judge.free_names(ast.parse(s, mode="eval")) for s in srcs))


def _stored(node: ast.AST) -> set[str]:
    """Names a statement binds anywhere (assignment, loop, import, def, walrus, except)."""
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)
             and isinstance(n.ctx, (ast.Store, ast.Del))}
    for n in ast.walk(node):
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            names.add(n.name)
    return names


def _bound(inside_ids: set[int], statements: list) -> set[str]:
    return set().union(*(_stored(s) for s, _ in statements if id(s) in inside_ids))


def _bundle(statements: list[ast.stmt]) -> mbpp_judge.Check:
    """The statements no value test covers, in order, as one function run in the sandbox."""
    lines = "\n".join(ast.unparse(s) for s in statements)
    src = (f"def {_BUNDLE}(candidate):\n{textwrap.indent(lines, '    ')}\n"
           f"{_BUNDLE}(candidate)\ndel {_BUNDLE}\n")
    return mbpp_judge.Check(src, False, test=src)


# ---- loops and names that hold plain data ----

def _unroll(stmt: ast.stmt) -> list[ast.stmt] | None:
    """`for x in range(<ints>)` whose body is asserts that only read `x`: the asserts, once per
    value of x with x written in; None for any other statement or if some unrolled assert could
    not be judged by value (then the loop runs inside as written)."""
    if not (isinstance(stmt, ast.For) and isinstance(stmt.target, ast.Name) and not stmt.orelse
            and isinstance(stmt.iter, ast.Call) and isinstance(stmt.iter.func, ast.Name)
            and stmt.iter.func.id == "range" and not stmt.iter.keywords
            and all(isinstance(s, ast.Assert) for s in stmt.body)):
        return None
    bounds = [mbpp_judge.literal(a) for a in stmt.iter.args]
    if not 1 <= len(bounds) <= 3 or not all(type(b) is int for b in bounds):
        return None
    values = range(*bounds)
    name = stmt.target.id
    if len(values) > MAX_UNROLL or any(name in _stored(s) for s in stmt.body):
        return None
    out = [_put(s, {name: ast.Constant(v)}) for v in values for s in stmt.body]
    return out if all(_outside(s) is not None for s in out) else None


def _put(stmt: ast.stmt, values: dict[str, ast.expr]) -> ast.stmt:
    """A copy of `stmt` with each name in `values` read replaced by its expression."""
    class Put(ast.NodeTransformer):
        def visit_Name(self, node):
            if isinstance(node.ctx, ast.Load) and node.id in values:
                return ast.copy_location(copy.deepcopy(values[node.id]), node)
            return node
    return ast.fix_missing_locations(Put().visit(copy.deepcopy(stmt)))


def _pure(expr: ast.expr, known: set[str]) -> bool:
    """Literals, operators, comprehensions and calls of _PURE builtins only, reading no name but
    those and `known` ones (names already substituted)."""
    for node in ast.walk(expr):
        if isinstance(node, (ast.Call)) and not (isinstance(node.func, ast.Name)
                                                 and node.func.id in _PURE):
            return False
        if isinstance(node, (ast.Attribute, ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr,
                             ast.Lambda)):
            return False
    return mbpp_judge.free_names(expr) <= (_PURE | known)


def _substitute_lets(body: list[ast.stmt]) -> list[ast.stmt]:
    """`name = <pure expression>` at the top of check(), bound nowhere else in it: its reads in
    later statements become the expression, so tests that read it can be judged by value. The
    assignment stays, marked `_esbench_let`; it is dropped unless an inside statement reads it."""
    stored_count: dict[str, int] = {}
    for stmt in body:
        for name in _stored(stmt):
            stored_count[name] = stored_count.get(name, 0) + 1
    lets: dict[str, ast.expr] = {}
    out = []
    for stmt in body:
        stmt = _put(stmt, lets) if lets and not (_stored(stmt) & lets.keys()) else stmt
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
                and stored_count[stmt.targets[0].id] == 1
                and stmt.targets[0].id not in _BUILTINS and _pure(stmt.value, set(lets))):
            lets[stmt.targets[0].id] = stmt.value
            stmt._esbench_let = True  # noqa: SLF001 - a mark read by _drop_unused_lets
        out.append(stmt)
    return out


def _drop_unused_lets(statements: list) -> list:
    """Substituted assignments that no inside statement reads (all their readers are value
    tests now, or there are none) have nothing left to do."""
    needed = set()
    for s, c in statements:
        if c is None and not getattr(s, "_esbench_let", False):
            needed |= {n.id for n in ast.walk(s) if isinstance(n, ast.Name)}
    return [(s, c) for s, c in statements
            if not (getattr(s, "_esbench_let", False) and s.targets[0].id not in needed)]
