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
test of `check(candidate)` passes, else 0. The program runs in the sandbox
(tasks/judge/sandbox.py), never in this process, and is judged as MBPP is
(tasks/judge/mbpp_judge.py, tasks/judge/mbpp_runner.py): the sandbox evaluates only each test's
call, e.g. `candidate([1, 2])`, and returns its value as plain data, which is compared here with
the test's expected value, which never enters the sandbox.
`plan(test, entry_point)` (tasks/judge/humaneval_plan.py) reads each `check` body with `ast`:
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
  raises TaskDataError (tasks/code_task.clean_run), as does a sampler that raises: the loop is
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
judge's limits are MBPP's (mbpp_judge.Limits, `judge_s`). `extract_answer` returns the extracted
code, whitespace-normalised, for majority voting; `gold_completion` is the canonical solution (a
body continuing the prompt).

    python -m pytest tests/test_task_humaneval.py -q
"""
from __future__ import annotations

import ast
import gzip
import keyword
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import datasets

from tasks.base import (DATA_DIR, TaskDataError, check_count, json_kind, load_hub, parse_json,
                        read_text, row_error, user_path)
from tasks.code_task import SandboxedCodeTask, extract_code
from tasks.judge import mbpp_judge
from tasks.judge.humaneval_plan import SAMPLE_SEED, SAMPLER, Plan, check_def, plan, sampled_checks

HUB_ID = "openai/openai_humaneval"
WHAT = "HumanEval data"
COLUMNS = ("task_id", "prompt", "canonical_solution", "test", "entry_point")


class HumanEval(SandboxedCodeTask):
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
        self._sandboxed(timeout_s, memory_mb, workers, judge_s)
        self.version, self.n_eval, self.max_new_tokens = version, n_eval, max_new_tokens
        self.source, self.path = source, path
        self._plans: dict[tuple[str, str, str], Plan] = {}

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

    def _read_survey(self) -> dict:
        """The data read once (`survey()`): `rows`, and per problem how it is judged (`by_value`:
        task_ids judged wholly by value; `inside`: task_ids with statements judged in the sandbox;
        `degenerate`: task_ids where one value passes every test). Plans every row."""
        rows = self._rows()
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            plans = list(pool.map(lambda r: self.plan(r["test"], r["entry_point"],
                                                     r["code_prompt"]), rows))
        pairs = list(zip(rows, plans))
        return {"rows": rows,
                "by_value": [r["task_id"] for r, p in pairs if p.by_value],
                "inside": [r["task_id"] for r, p in pairs if not p.by_value],
                "degenerate": [r["task_id"] for r, p in pairs
                               if mbpp_judge.degenerate(list(p.checks))]}

    def _rows(self) -> list[dict]:
        if self.source == "hub":
            raw = load_hub(HUB_ID, None, "test", "Use task.source=local (the shipped copy) or set "
                           "HF_DATASETS_CACHE to a cache that holds it.")
            return [_row(r, f"{HUB_ID}:test", i) for i, r in enumerate(raw, start=1)]
        path = (user_path(self.path, "a HumanEval .jsonl or .jsonl.gz file") if self.path
                else DATA_DIR / "humaneval" / "HumanEval.jsonl.gz")
        return [_row(r, path, i) for i, r in read_rows(path)]

    # ---- judging plan ----
    def plan(self, test: str, entry_point: str, code_prompt: str = "") -> Plan:
        """A problem's resolved Plan, computed once per problem: non-literal expected values and
        sampled random-input tests come from clean sandbox runs (no candidate code) that later
        calls reuse."""
        return self._once(self._plans, (test, entry_point, code_prompt), lambda: self._sample(
            self._resolve(plan(test, entry_point), entry_point), code_prompt, entry_point))

    def _resolve(self, unresolved: Plan, entry_point: str) -> Plan:
        checks = list(unresolved.checks)
        pending = [c for c in checks if c.expected_src is not None]
        if not pending:
            return unresolved
        computed = iter(self._expected(pending, "", f"HumanEval problem {entry_point!r}"))
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
                "setup": found.sample, "items": [{"kind": "value", "src": f"{SAMPLER}()"}]}
        what = f"HumanEval problem {entry_point!r}: its random-input tests"
        result = self._clean_run(args, what, "fix the row's test or raise task.timeout_s")
        record = next((r for r in result.records if r.get("i") == 0), {})
        if "value" not in record:
            problem = record.get("error") or record.get("load_error") or "no record"
            raise TaskDataError(f"{what} could not be sampled ({str(problem)[:120]}); fix the "
                                "row's test")
        try:
            pairs = mbpp_judge.decode(record["value"], self.limits)
        except (TypeError, ValueError, ArithmeticError, RecursionError, MemoryError):
            pairs = None
        sampled = sampled_checks(pairs)
        if sampled is None:
            return replace(found, sample=None)
        checks = [x for c in found.checks for x in (sampled if not c.outside else [c])]
        return Plan(tuple(checks), found.setup, 0)

    # ---- scoring ----
    def gold_completion(self, canonical_solution: str, **_) -> str:
        """The canonical solution: the function body continuing the prompt."""
        return canonical_solution

    def is_correct(self, completion: str, code_prompt: str, test: str, entry_point: str,
                   **_) -> bool:
        """True when every test of the problem passes (values judged here, see the docstring)."""
        return self.judge_completion(completion, code_prompt, test, entry_point).ok

    def judge_completion(self, completion: str, code_prompt: str, test: str,
                         entry_point: str) -> mbpp_judge.Verdict:
        """Run one completion and judge it; the Verdict says per check whether it passed and, if
        not, why (a wrong value, an error, the sandbox's timeout, a judge limit)."""
        found = self.plan(test, entry_point, code_prompt)
        return self._judge(program(code_prompt, completion), found.setup, found.checks)

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
        return self._scores(list(zip(completions, code_prompt, test, entry_point, strict=True)))

    # ---- run info ----
    def run_info(self) -> dict:
        """What a run record should keep: sandbox layers, judge counts and `notes`."""
        survey = self.survey()
        return self._run_info(judged_by_value=len(survey["by_value"]),
                              judged_partly_inside=survey["inside"], notes=_notes(survey))


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
    if check_def(tree) is None:
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
