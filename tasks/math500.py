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
  `\\boxed{0.50000001}` is not 1/2, `\\boxed{0.333333}` still is 1/3;
- a thousands comma (`10,\\!080`) makes one value, not a list, so these rules apply to it;
- a unit is compared, not dropped: when both state one (`5.4 \\text{ cents}`, `\\$18.90`, `15\\mbox{
  cm}^2`), `\\boxed{5.4 \\text{ dollars}}` is wrong; an answer without a unit is judged by value;
- `\\to`, `\\rightarrow` and a line break `\\\\` outside a matrix are hedges like `\\vee`, and so is
  "The final answer is not 18".
math-verify can run for ever on a short answer, and its own timeouts (SIGALRM) work only on the
main thread, so it runs as tasks/judge/bounded.py says: linear guards refuse answers too costly to start
(power towers, huge exponents, expansions over 100 terms, functions nested over 3 deep, long sums
and products, integrals, >1,000 characters), the rest is verified in a worker process, each
completion under its own time slice (1 s of the worker's CPU, tasks/judge/budget.py), and one
reward call's completions are graded in parallel (refused answers and those that spend their slice
score 0, alone, counted in `run_info()`), so a completion scores the same on any thread and in any
batch, and no answer stalls a run. Rows are validated when the task is built, so a malformed file
fails before any model loads. A boxed answer is read once, as `normalise` (a light string form
after Hendrycks et al.'s MATH `_strip_string`: `\\dfrac` is `\\frac`, `5.` and `5\\%` are 5) plus its
unit: `extract_answer` returns that key for maj@k and `is_correct` judges that key, so answers that
vote together are right or wrong together. No string makes a grader raise.

    python -m pytest tests/test_task_math500.py -q
"""
from __future__ import annotations

import re
from pathlib import Path

import datasets

from tasks.answers import (HEDGE_COMMANDS, SIGNED, answer_line, decimals, hedged_line, is_name,
                           last_boxed, sides, single_value)
from tasks.base import (DATA_DIR, TaskDataError, check_count, json_kind, read_jsonl, row_error,
                        user_path)
from tasks.judge import bounded

_TEXT = re.compile(r"\\text\{([^{}]*)\}")
_SPACES = re.compile(r"(?<![A-Za-z]) +| +(?![A-Za-z])")  # `\pi r` keeps its space: `\pir` is no command
_OR_KEY = re.compile(r"(?<![A-Za-z\\])or(?![A-Za-z])")  # "or" in a key without spaces: 18or19
# A unit at the end of an answer: `5.4 \text{ cents}`, `864 \mbox{ inches}^2` (a number before it).
_UNIT = re.compile(r"\\(?:text|mbox|mathrm)\{\s*([A-Za-z][A-Za-z ]{0,30}?)\s*\}(?:\^\{?(\d)\}?)?\s*\.?\s*")
PROMPT = "{problem}\n\nPlease reason step by step, and put your final answer within \\boxed{{}}."
_COLUMNS = ("problem", "answer")
_OPTIONAL = {"solution": str, "subject": str, "level": int, "unique_id": str}


def normalise(answer: str) -> str:
    """A light canonical form, after MATH's `_strip_string` (\\dfrac -> \\frac, ...): what maj@k votes
    over and what is_correct judges, so two answers in one class are right or wrong together."""
    s = answer.replace("\n", " ").replace("\\!", "")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\left", "").replace("\\right", "")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "").replace("\\$", "").replace("\\%", "")
    s = _TEXT.sub(lambda m: m.group(1).strip(), s)  # no \s* before the group: it backtracked
    s = _SPACES.sub("", s).rstrip(".")
    s = re.sub(r"(?<![\d}])\.(\d)", r"0.\1", s)  # ".5" -> "0.5"
    if re.fullmatch(r"[a-z]=[^=]+", s):  # "x=5" -> "5", as MATH does for short assignments
        s = s.split("=", 1)[1]
    return s


def unit_of(answer: str) -> tuple[str, str | None]:
    """(the answer without its unit, the unit) for `5.4 \\text{ cents}` -> ("5.4", "cent"), `\\$36` ->
    ("36", "dollar"), `864 \\mbox{ inches}^2` -> ("864", "inch^2"); (answer, None) with no unit.

    >>> unit_of(r"5.4 \\text{ cents}"), unit_of(r"\\$32,\\!348"), unit_of(r"\\text{Evelyn}")
    (('5.4', 'cent'), ('32,\\\\!348', 'dollar'), ('\\\\text{Evelyn}', None))
    """
    at = max(answer.rfind("\\text{"), answer.rfind("\\mbox{"), answer.rfind("\\mathrm{"))
    m = _UNIT.fullmatch(answer, at) if at > 0 else None
    if m is not None and any(c.isdigit() for c in answer[:at]):
        word = " ".join(m.group(1).lower().split())
        word = word[:-2] if word.endswith(("ches", "shes", "xes")) else \
            word[:-1] if word.endswith("s") and not word.endswith("ss") else word
        return answer[:at].strip(), word + (f"^{m.group(2)}" if m.group(2) else "")
    stripped = answer.strip()
    if stripped.startswith("\\$") and any(c.isdigit() for c in stripped):
        return stripped[2:].strip(), "dollar"
    return answer, None


def read_box(boxed: str) -> tuple[str, str | None] | None:
    """The (normalised value, unit) of a box, or None when nothing is left of it."""
    value, unit = unit_of(boxed)
    value = normalise(value)
    return (value, unit) if value else None


def hedged(value: str) -> bool:
    """Alternatives in a normalised value: 3\\vee5, 3\\to5, 18or19 (from `18 \\text{ or } 19`), 3\\\\5,
    \\pm18. A hedge only against a gold that is one value (tasks/answers.py `single_value`)."""
    return any(m in value for m in HEDGE_COMMANDS + SIGNED) or bool(_OR_KEY.search(value)) \
        or ("\\\\" in value and "\\begin" not in value)


def key(read: tuple[str, str | None] | None) -> str | None:
    """The vote key of a read box: its value, and its unit when it has one."""
    if read is None:
        return None
    return read[0] if read[1] is None else f"{read[0]}\\text{{{read[1]}}}"


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
    reward_is_correct = True  # reward() is float(is_correct()): evaluation grades once

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
        """The normalised content of the last \\boxed{} in `text` (with its unit), or None.

        >>> MATH500().extract_answer(r"So $\\boxed{\\left( 3, \\dfrac{\\pi}{2} \\right)}$.")
        '(3,\\\\frac{\\\\pi}{2})'
        """
        return bounded.judged(lambda: key(self._read(text)), None)

    def is_correct(self, completion: str, answer: str, **_) -> bool:
        """math-verify equivalence of the completion's final answer with the gold `answer`, every
        side of a relation included; a hedge scores False (the module docstring). A boxed answer is
        judged by its normalised form, the one maj@k votes over. Never raises."""
        return self.judge(completion, answer)[0]

    def judge(self, completion: str, answer: str, **_) -> tuple[bool, str | None]:
        """(is_correct, extract_answer) under one time slice: the judgement of a boxed answer is a
        function of its vote key, so maj@k's winner is right or wrong whatever the samples' order."""
        def both():
            read = self._read(completion)
            if read is None:
                return (last_boxed(completion) is None and self._unboxed(completion, answer)), None
            return self._boxed(read, answer), key(read)
        return bounded.judged(both, (False, None))

    @staticmethod
    def _read(text: str) -> tuple[str, str | None] | None:
        boxed = last_boxed(text)
        return None if boxed is None else read_box(boxed)

    @staticmethod
    def _unboxed(completion: str, answer: str) -> bool:
        """No box: math-verify reads the completion (its "final answer is" anchors)."""
        if bounded.refuse(completion):
            return False
        if single_value(answer) and hedged_line(answer_line(completion)):
            return False  # "The final answer is 3 or 5", "The final answer is not 3"
        return bounded.verify(f"\\boxed{{{answer}}}", completion, _rounding(completion))

    @staticmethod
    def _boxed(read: tuple[str, str | None], answer: str) -> bool:
        """A read box against the gold: same unit when both state one, every side matching."""
        value, unit = read
        if bounded.refuse(value):
            return False
        gold_unit = unit_of(answer)[1]
        if unit is not None and gold_unit is not None and unit != gold_unit:
            return False  # 5.4 dollars is not 5.4 cents
        parts = [value]
        if single_value(answer):
            if hedged(value):
                return False  # \boxed{3 \vee 5}: math-verify reads 5
            parts = sides(value)
            parts = [p for p in (parts[1:] if len(parts) > 1 and is_name(parts[0]) else parts) if p]
        gold = f"\\boxed{{{answer}}}"
        return bool(parts) and all(bounded.verify(gold, f"\\boxed{{{p}}}", _rounding(p))
                                   for p in parts)

    def judge_all(self, completions: list[str], rows: list[dict]) -> list[tuple[bool, str | None]]:
        """`judge` of each completion with its row's columns, in parallel, each under its own
        slice: evaluation's grading path (harness/evaluation/grading.py)."""
        return bounded.grade_all(lambda pair: self.judge(pair[0], **pair[1]),
                                 list(zip(completions, rows, strict=True)))

    def reward(self, completions: list[str], answer: list[str], **kwargs) -> list[float]:
        """TRL-style reward: 1.0 when math-verify accepts the final answer, else 0. The completions
        are graded in parallel, each under its own time slice (tasks/judge/budget.py).

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
    return min(max(6, decimals(pred)), 50)  # decimals() is linear: a 64k-digit tail is fine


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
