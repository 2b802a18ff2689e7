"""MATH-500: the 500-problem MATH test subset of "Let's Verify Step by Step" (Lightman et al. 2023).

Data: OpenAI's prm800k `math_splits/test.jsonl`, shipped unmodified in tasks/data/math500 (MIT; see
PROVENANCE.md), or `path:` for another file with the same columns. MATH-500 is evaluation-only:
load("train") and load("validation") raise TaskDataError rather than carve a split out of the test
set, which would make test scores incomparable with published ones. Train on another task (e.g.
gsm8k) and evaluate here.

Answer normalisation: Hugging Face `math-verify` (the checker used by open-r1 and lighteval),
`verify(parse(gold), parse(prediction))` with the gold first (the comparison is not symmetric).
The gold is the `answer` column wrapped in \\boxed{}; the prediction is the last \\boxed{...} of the
completion (`\\boxed 5` boxes 5: tasks/answers.py), or the whole completion when it has none
(math-verify then looks for other anchors such as "the final answer is"). Beyond math-verify, when
the gold is one value (no list, no \\pm, no relation):
- every side of a relation in the box must match: `\\boxed{x = 3}` and `\\boxed{\\frac{6}{2} = 3}`
  score for 3, `\\boxed{5 = 3}` and `\\boxed{3 \\approx 5}` do not (math-verify alone took either);
- a hedge is no answer: "The final answer is 3 or 5" and `\\boxed{3 \\vee 5}` score 0;
- a decimal is compared at the precision it is written to, at least math-verify's 6 places:
  `\\boxed{0.50000001}` is not 1/2, `\\boxed{0.333333}` still is 1/3.
math-verify can run for ever on a short answer, and its own timeouts (SIGALRM) work only on the
main thread, so it runs as tasks/judge/bounded.py says: linear guards refuse answers too costly to start
(power towers, huge exponents, expansions over 100 terms, functions nested over 3 deep, long sums
and products, integrals, >1,000 characters), the rest is verified in a worker process killed after
5 s, and one reward call's completions are graded in parallel under a budget of 2 s + 0.25 s each
(refused, killed and over-budget answers score 0, counted in `run_info()`), so a completion scores
the same on any thread and no answer stalls a run. Rows are validated when the task is built, so a
malformed file fails before any model loads. `extract_answer` (for maj@k) is the last \\boxed{}
content under a light string normalisation after Hendrycks et al.'s MATH `_strip_string`.

    python -m pytest tests/test_task_math500.py -q
"""
from __future__ import annotations

import re
from pathlib import Path

import datasets

from tasks.answers import (answer_line, decimals, hedged_latex, hedged_line, is_name, last_boxed,
                           sides, single_value)
from tasks.base import (DATA_DIR, TaskDataError, check_count, json_kind, read_jsonl, row_error,
                        user_path)
from tasks.judge import bounded

_TEXT = re.compile(r"\\text\{([^{}]*)\}")
PROMPT = "{problem}\n\nPlease reason step by step, and put your final answer within \\boxed{{}}."
_COLUMNS = ("problem", "answer")
_OPTIONAL = {"solution": str, "subject": str, "level": int, "unique_id": str}


def normalise(answer: str) -> str:
    """A light canonical form for voting, after MATH's `_strip_string` (\\dfrac -> \\frac, ...)."""
    s = answer.replace("\n", "").replace("\\!", "")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\left", "").replace("\\right", "")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "").replace("\\$", "").replace("\\%", "")
    s = _TEXT.sub(lambda m: m.group(1).strip(), s)  # no \s* before the group: it backtracked
    s = s.replace(" ", "").rstrip(".")
    s = re.sub(r"(?<![\d}])\.(\d)", r"0.\1", s)  # ".5" -> "0.5"
    if re.fullmatch(r"[a-z]=[^=]+", s):  # "x=5" -> "5", as MATH does for short assignments
        s = s.split("=", 1)[1]
    return s


class MATH500:
    """MATH-500 (see the module docstring for data, splits and normalisation).

    Args:
        version: bump when scores change.
        n_eval: use at most this many test rows (None = all 500).
        max_new_tokens: completion length for evaluation.
        source: "local" only (the shipped copy, or `path`).
        path: a jsonl file with `problem` and `answer` columns; overrides the shipped copy. Every
            row is checked here, when the task is built (TaskDataError naming file, row and fix).
    """

    name = "math500"

    def __init__(self, version: int = 1, n_eval: int | None = 500, max_new_tokens: int = 1024,
                 source: str = "local", path: str | None = None):
        if source != "local":
            raise TaskDataError(f"task.source={source!r} is unknown; MATH-500 is shipped, use "
                                "local (or task.path=/path/to/test.jsonl for another copy)")
        check_count("n_eval", n_eval)
        self.version, self.n_eval, self.max_new_tokens = version, n_eval, max_new_tokens
        self.source, self.path = source, path
        self._counted_from = bounded.stats()  # run_info counts this task's run only
        where = (user_path(path, "a MATH-500 jsonl file") if path
                 else DATA_DIR / "math500" / "test.jsonl")
        self._rows = [_row(r, where, i) for i, r in read_jsonl(where, "MATH-500 data")]

    # ---- data ----
    def load(self, split: str) -> datasets.Dataset:
        """Rows with `prompt`, `problem`, `solution`, `answer`, `subject`, `level`, `unique_id`."""
        if split in ("train", "validation"):
            raise TaskDataError(f"MATH-500 is evaluation-only: there is no {split} split. Train on "
                                "another task (e.g. task=gsm8k) and evaluate with task=math500.")
        if split != "test":
            raise TaskDataError(f"split {split!r} is unknown; MATH-500 has only test")
        rows = self._rows  # read and checked when the task was built
        return datasets.Dataset.from_list(rows[:self.n_eval] if self.n_eval else rows)

    # ---- scoring ----
    def gold_completion(self, answer: str, **_) -> str:
        """A completion holding the reference answer in the requested \\boxed{} form."""
        return f"The final answer is $\\boxed{{{answer}}}$."

    def extract_answer(self, text: str) -> str | None:
        """The normalised content of the last \\boxed{} in `text`, or None.

        >>> MATH500().extract_answer(r"So $\\boxed{\\left( 3, \\dfrac{\\pi}{2} \\right)}$.")
        '(3,\\\\frac{\\\\pi}{2})'
        """
        boxed = last_boxed(text)
        if boxed is None:
            return None
        return normalise(boxed) or None

    def is_correct(self, completion: str, answer: str, **_) -> bool:
        """math-verify equivalence of the completion's final answer with the gold `answer`, every
        side of a relation included; a hedge scores False (the module docstring)."""
        boxed = last_boxed(completion)
        if bounded.refuse(boxed if boxed is not None else completion):
            return False
        gold = f"\\boxed{{{answer}}}"
        if boxed is None:
            if single_value(answer) and hedged_line(answer_line(completion)):
                return False  # "The final answer is 3 or 5"
            return bounded.verify(gold, completion, _rounding(completion))
        parts = [boxed]
        if single_value(answer):
            if hedged_latex(boxed):
                return False  # \boxed{3 \vee 5}: math-verify reads 5
            parts = sides(boxed)
            parts = [p for p in (parts[1:] if len(parts) > 1 and is_name(parts[0]) else parts) if p]
        return bool(parts) and all(bounded.verify(gold, f"\\boxed{{{p}}}", _rounding(p))
                                   for p in parts)

    def reward(self, completions: list[str], answer: list[str], **kwargs) -> list[float]:
        """TRL-style reward: 1.0 when math-verify accepts the final answer, else 0. The completions
        are graded in parallel under one time budget (tasks/judge/bounded.py, layer 3).

        >>> MATH500().reward([r"... so $x = \\boxed{\\frac{1}{2}}$", r"\\boxed{\\frac{1}{"],
        ...                  answer=["0.5", "0.5"])
        [1.0, 0.0]
        """
        pairs = list(zip(completions, answer, strict=True))
        return bounded.grade_all(lambda pair: float(self.is_correct(*pair)), pairs)

    def run_info(self) -> dict:
        """What a run record should keep: how often the math-verify guards, limit and budget fired."""
        return {"math_verify": bounded.stats(since=self._counted_from)}


def _rounding(pred: str) -> int:
    """math-verify's float_rounding for `pred`: its own decimal places, at least the default 6."""
    return min(max(6, decimals(pred)), 50)


def _row(raw, path: Path, line: int) -> dict:
    """Validate one row: string `problem` and `answer`; the other columns are kept as given."""
    fix = "each row needs string `problem` and `answer` columns, as in prm800k's test.jsonl"
    if not isinstance(raw, dict):
        raise row_error(path, line, f"the row is {json_kind(raw)}, not an object", fix)
    for field in _COLUMNS:
        if not isinstance(raw.get(field), str):
            problem = "missing" if field not in raw else f"{json_kind(raw[field])}, not a string"
            raise row_error(path, line, f"field `{field}` is {problem}", fix)
    for field, kind in _OPTIONAL.items():  # Arrow needs one type per column, or it crashes
        if raw.get(field) is not None and not (isinstance(raw[field], kind)
                                               and not isinstance(raw[field], bool)):
            raise row_error(path, line, f"field `{field}` is {json_kind(raw[field])}",
                            f"make it {'an integer' if kind is int else 'a string'} or drop it")
    _check_answer(raw["answer"], path, line)
    keep = {k: raw.get(k) for k in _COLUMNS + tuple(_OPTIONAL)}
    return {"prompt": PROMPT.format(problem=raw["problem"]), **keep}


def _check_answer(answer: str, path: Path, line: int) -> None:
    """A gold answer every completion could match: not blank, braces balanced (it is wrapped in
    \\boxed{}), and not refused by the graders' guards (tasks/judge/bounded.py)."""
    if not answer.strip():
        raise row_error(path, line, "field `answer` is blank", "give the reference answer")
    depth = 0
    for c in answer:
        depth += {"{": 1, "}": -1}.get(c, 0)
        if depth < 0:
            break
    if depth != 0:
        raise row_error(path, line, f"field `answer` has unbalanced braces ({answer[:60]!r})",
                        "balance its { and } (it is read inside \\boxed{})")
    if bounded.blocked(answer):
        raise row_error(path, line, f"field `answer` is refused by the grader's cost guards "
                        f"({answer[:60]!r}), so no completion could score on it",
                        "write it in a simpler equivalent form or drop the row")
