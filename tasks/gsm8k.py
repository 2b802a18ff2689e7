"""GSM8K: grade-school maths word problems with an integer final answer (Cobbe et al. 2021).

Data: the official OpenAI files, shipped unmodified in tasks/data/gsm8k (MIT; see PROVENANCE.md),
or `source: hub` for the `openai/gsm8k` "main" config, or `path:` for a directory holding
train.jsonl and test.jsonl in the official format. Splits: test = the 1,319 official test rows;
validation = the last 500 rows of the official train file; train = the other 6,973. Every row of
both files is read and checked when the task is built, so a malformed row (no `####` answer) fails
before any model loads, naming its file and line.

Answer normalisation. Official (grade-school-math `dataset.py`): the first match of
`#### (\\-?[0-9\\.\\,]+)`, stripped, commas removed, compared as strings; no match is `[invalid]`.
Here the gold answer is extracted exactly that way. The prediction is more lenient, because small
models restate and format numbers freely (rules chosen on tests/data/gsm8k_grading.jsonl, a
hand-judged corpus). In order, the first rule that yields a number (or a hedge) decides:
1. the prompt asks the model to end with `#### <number>`: the first number on the first non-blank
   line after the *last* `####` ("#### three" counts as 3, "#### twenty-five" as 25; words are read
   as one numeral, never added up: "#### nine nine" is no number, tasks/numerals.py);
2. the number after the last "the answer is" / "answer:" phrase, on that line ("The answer is 64
   dollars for 16 glasses." is 64), unless it starts an expression ("answer: 3 + 4 = 7");
3. math-verify on the end of the completion, for \\boxed{} and LaTeX, under the same guards and
   per-completion time slice as MATH-500 (tasks/judge/bounded.py: the same answer on any thread,
   in any batch); a box is the answer: one refused, unreadable or past 2^1024 (`\\boxed{2^{1024}}`,
   `\\boxed{9999!}`) is no answer, and rule 4 never reads a number out of it;
4. the last number in the completion.
A hedge is no answer and scores 0, it does not pick a side: "#### 18 or 19", "#### 18, 19",
"#### 18 or maybe 19", "#### 18 ± 1", "answer: 18, 19 or 20", "The answer is not 18.", "It is 18
or 19.", `\\boxed{\\pm 18}`, `\\boxed{3 \\to 5}`, `\\boxed{3 \\\\ 5}` (tasks/answers.py). A completion
whose time slice runs out scores 0 and has no answer, whatever its neighbours in the call. Numbers may carry thousands
separators (commas or spaces: "70,000", "70 000"), a `$`, decimals ("5.00"), an exponent ("18e5" is
1,800,000) and a fraction bar ("36/2" is 18, never 36); a Unicode minus or dash before a number is
a minus sign ("#### −18" is -18). Values are exact: against an integer gold the prediction must be
that integer ("5.00" matches gold "5", "17.9999999" does not match 18); a non-integer gold matches
within `tolerance` (task YAML); a value past 2^1024 is no answer. `extract_answer` spells the
value exactly ("18.00000000001", "1/3"), so maj@k votes over the values the judge compares. Every
rule is linear in the completion's length; no string makes a grader raise.

    python -m pytest tests/test_task_gsm8k.py -q
"""
from __future__ import annotations

import math
import re
from fractions import Fraction

import datasets

from tasks.answers import (MINUS_SIGNS, hedge_after, hedge_before, hedged_latex, last_boxed,
                           negated)
from tasks.base import (DATA_DIR, TaskDataError, check_count, json_kind, load_hub, read_jsonl,
                        row_error, user_path)
from tasks.judge import bounded
from tasks.numerals import word_number

HUB_ID = "openai/gsm8k"
N_VALIDATION = 500
PROMPT = ("{question}\n\nSolve the problem step by step. End your response with the final answer "
          "as a number on its own line, in the form \"#### <number>\".")
_GOLD = re.compile(r"#### (\-?[0-9\.\,]+)")  # the official regex
# A minus sign counts only when it cannot be subtraction ("12-4" is 12 and 4, not 12 and -4);
# commas (or single spaces) count only as thousands separators, so "3,4" is two numbers; a
# fraction bar joins two numbers into one value ("36/2").
_SPACE = "[ \u00a0\u2009\u202f]"  # space, no-break space, thin space, narrow no-break space
_UNSIGNED = (r"\$?(?:(?:\d{1,3}(?:,\d{3})+(?!\d)|\d{1,3}(?:" + _SPACE + r"\d{3})+(?![\d,])|\d+)"
             r"(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?")
_NUMBER = re.compile(r"(?:(?<![\w)\]])[" + MINUS_SIGNS + r"])?(?<![\d.])" + _UNSIGNED
                     + r"(?:\s*/\s*(" + _UNSIGNED + r"))?(?![\d])")
_PHRASE = re.compile(r"\banswer\b\**\s*(?:is(?:\b|(?=n't))|was(?:\b|(?=n't))|:|=)", re.I)  # isn't: negated
_OPERATOR_NEXT = re.compile(r"\s*[+*/x\u00d7=" + MINUS_SIGNS + r"]\s*\$?\d")  # "answer: 3 + 4 = 7"
_DIGIT = re.compile(r"\d")  # a quick look before _NUMBER, which tries every position
_SEPARATORS = re.compile(r"[,$\s\u00a0\u2009\u202f]")
MATH_VERIFY_CHARS = 1000  # math-verify reads only the end of a completion: bounded time
MAX_DIGITS = 300  # a longer "number" (or exponent past 10^300) is no answer
HEDGE = "hedge"  # what a rule returns for "18 or 19": no answer, and no later rule is asked
# A list in a box (`\boxed{18, 19}`): a comma not followed by a thousands group (`10,\!080`).
_BOX_LIST = re.compile(r",(?!(?:\\!)?\d{3}(?!\d))")
# A box math-verify cannot read is read only when it holds one plain number and no operator
# (`\boxed{18 \text{ eggs}}`), never `\boxed{2^{1024}}` as 1024 or `\boxed{9999!}` as 9999.
_BOX_WORDS = re.compile(r"\\(?:text|mbox|textbf|mathrm)\{[^{}]*\}|\\[$,!;%]|[$%\s]|\.$")


def _exact(text: str) -> Fraction | None:
    """One numeral ("$1,000.50", "−18", "18e5", ".5") as an exact Fraction; None when too large."""
    s = _SEPARATORS.sub("", text)
    sign = -1 if s[:1] in MINUS_SIGNS else 1
    s = s[1:] if sign < 0 else s
    mantissa, _, exponent = s.replace("E", "e").partition("e")
    if len(mantissa) > MAX_DIGITS or len(exponent) > 4 or abs(int(exponent or 0)) > MAX_DIGITS:
        return None
    value = sign * Fraction(mantissa) * Fraction(10) ** int(exponent or 0)
    return value if abs(value) < bounded.OVERFLOW else None  # past every float: no answer


def _value(match: re.Match) -> Fraction | None:
    """The value of one _NUMBER match; a fraction is divided out (None for "/0")."""
    whole = match.group(0)
    if match.group(1) is None:
        return _exact(whole)
    numerator, denominator = (_exact(x) for x in whole.rsplit("/", 1))
    if numerator is None or not denominator:
        return None
    value = numerator / denominator
    return value if abs(value) < bounded.OVERFLOW else None


def _first(line: str):
    """The first number of an answer line (digits, else words); HEDGE when alternatives follow."""
    m = _NUMBER.search(line)
    if m is None:
        value, hedged = word_number(line)
        return HEDGE if hedged else (None if value is None else Fraction(value))
    if _OPERATOR_NEXT.match(line, m.end()):
        return None  # "answer: 3 + 4 = 7" is working, not the answer
    return HEDGE if hedge_after(line, m.end()) or negated(line, m.start()) else _value(m)


def _marker_answer(text: str):
    """Rule 1: the number on the first non-blank line after the last `####` (a box there is read
    by rule 3: `#### \\boxed{2^{1024}}` is no answer, not 2)."""
    line = text.rsplit("####", 1)[1].lstrip().split("\n", 1)[0]
    if "\\boxed" in line or "\\fbox" in line:
        found = _math_verify_answer(line)
        return HEDGE if found is None else found
    m = _NUMBER.search(line) if _DIGIT.search(line) else None
    if m is not None and (hedge_after(line, m.end()) or negated(line, m.start())):
        return HEDGE
    found = _value(m) if m else None
    if found is not None:
        return found
    value, hedged = word_number(line)
    return HEDGE if hedged else (None if value is None else Fraction(value))


def _phrase_answer(text: str):
    """Rule 2: the number after the last "the answer is" / "answer:" on the same line."""
    last = None
    for last in _PHRASE.finditer(text):
        pass
    if last is None:
        return None
    line = text[last.end():].split("\n", 1)[0]
    if "\\boxed" in line or "\\fbox" in line:
        return None  # "The answer is $\\boxed{2^{1024}}$": the box is the answer (rule 3), not 2
    return _first(line)


def _math_verify_answer(text: str):
    """Rule 3: math-verify on the end of the text, for LaTeX answers (\\boxed{}, \\frac{}{}).

    Plain text is left to rule 4: math-verify reads "3,4" as 3.4, and costs milliseconds. A box is
    the answer: one that is refused, too large (`\\boxed{2^{1024}}`) or unreadable is no answer,
    never a number read out of it by rule 4.
    """
    if "\\" not in text:
        return None
    tail = text[-MATH_VERIFY_CHARS:]
    boxed = last_boxed(tail)
    if boxed is not None and (hedged_latex(boxed, signs=True) or _BOX_LIST.search(boxed)):
        return HEDGE  # \boxed{\pm 18}, \boxed{18 \text{ or } 19}, \boxed{3 \to 5}, \boxed{18, 19}
    if bounded.refuse(tail if boxed is None else boxed):  # the guards of MATH-500 (bounded.py)
        return None if boxed is None else HEDGE
    value = bounded.number(tail)
    if value is None and boxed is not None:
        plain = _BOX_WORDS.sub("", boxed)
        m = _NUMBER.fullmatch(plain) if len(plain) < 100 else None
        return _value(m) if m is not None else HEDGE
    return Fraction(value) if isinstance(value, float) else value


def _last_number(text: str):
    """Rule 4: the last number; HEDGE when it ends alternatives ("It is 18 or 19.")."""
    last = None
    for last in _NUMBER.finditer(text) if _DIGIT.search(text) else ():
        pass
    if last is None:
        return None
    return HEDGE if hedge_before(text, last.start()) else _value(last)


def predict(text: str) -> Fraction | None:
    """The predicted number of a completion (the module docstring's rules, in order), or None.
    Call it inside bounded.judged (the completion's time slice)."""
    rules = (_phrase_answer, _math_verify_answer, _last_number)
    if "####" in text:
        found = _marker_answer(text)
        if found is not None:
            return None if found is HEDGE else found
        text = text.replace("####", "\n")  # a bare or wordy marker is no number
    for rule in rules:
        found = rule(text)
        if found is not None:
            return None if found is HEDGE else found
    return None


def _canonical(value: Fraction) -> str:
    """18 -> '18', 5/2 -> '2.5', 1/3 -> '1/3': one exact spelling per number, so two answers vote
    together exactly when is_correct cannot tell them apart (18.00000000001 is not 18).

    >>> [_canonical(Fraction(x)) for x in ("18", "5/2", "-1/3", "18.00000000001")]
    ['18', '2.5', '-1/3', '18.00000000001']
    """
    n, d = value.numerator, value.denominator
    if d == 1:
        return str(n)
    twos, fives = 0, 0
    while d % 2 == 0:
        d, twos = d // 2, twos + 1
    while d % 5 == 0:
        d, fives = d // 5, fives + 1
    if d != 1:
        return f"{n}/{value.denominator}"
    places = max(twos, fives)
    digits = str(abs(value.numerator) * 10 ** places // value.denominator).rjust(places + 1, "0")
    return ("-" if n < 0 else "") + digits[:-places] + "." + digits[-places:]


def gold_answer(solution: str) -> str | None:
    """The official final answer of a GSM8K solution (commas removed), or None."""
    m = _GOLD.search(solution)
    return m.group(1).strip().replace(",", "") if m else None


class GSM8K:
    """GSM8K (see the module docstring for data, splits and normalisation).

    Args:
        version: bump when scores change.
        n_eval: use at most this many test/validation rows (None = all).
        max_new_tokens: completion length for evaluation and training.
        source: "local" (shipped copy, or `path`) or "hub" (`openai/gsm8k`, "main").
        path: directory with train.jsonl and test.jsonl (official format), instead of the
            shipped copy. Every row of both is checked here, when the task is built.
        tolerance: how far a prediction may be from a non-integer gold answer (integer golds, all
            of the official ones, are compared exactly).
    """

    name = "gsm8k"
    reward_is_correct = True  # reward() is float(is_correct()): evaluation grades once

    def __init__(self, version: int = 1, n_eval: int | None = 500, max_new_tokens: int = 512,
                 source: str = "local", path: str | None = None, tolerance: float = 1e-6):
        if source not in ("local", "hub"):
            raise TaskDataError(f"task.source={source!r} is unknown; use local or hub")
        if source == "hub" and path:
            raise TaskDataError("task.path is only read with task.source=local; drop one of them")
        check_count("n_eval", n_eval)
        if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) \
                or not 0 <= tolerance < math.inf:
            raise TaskDataError(f"task.tolerance={tolerance!r} is not a tolerance; use a small "
                                "non-negative number such as 1.0e-6")
        self.version, self.n_eval, self.max_new_tokens = version, n_eval, max_new_tokens
        self.source, self.path, self.tolerance = source, path, float(tolerance)
        self._counted_from = bounded.stats()  # run_info counts this task's run only
        self._official = {split: self._rows(split) for split in ("test", "train")}  # checked now
        if len(self._official["train"]) <= N_VALIDATION:
            raise TaskDataError(f"GSM8K's train file has {len(self._official['train'])} rows; the "
                                f"validation split is its last {N_VALIDATION}, so it needs more "
                                "(the official train.jsonl has 7,473)")

    # ---- data ----
    def load(self, split: str) -> datasets.Dataset:
        """Rows with `prompt`, `question`, `solution` (the worked answer) and `answer` (gold)."""
        if split not in ("train", "validation", "test"):
            raise TaskDataError(f"split {split!r} is unknown; use train, validation or test")
        rows = self._official["test" if split == "test" else "train"]
        if split == "train":
            return datasets.Dataset.from_list(rows[:-N_VALIDATION])
        rows = rows[-N_VALIDATION:] if split == "validation" else rows
        return datasets.Dataset.from_list(rows[:self.n_eval] if self.n_eval else rows)

    def _rows(self, official_split: str) -> list[dict]:
        if self.source == "hub":
            raw = load_hub(HUB_ID, "main", official_split, "Use task.source=local (the shipped "
                           "copy) or set HF_DATASETS_CACHE to a cache that holds it.")
            where = f"{HUB_ID}:{official_split}"
        else:
            folder = user_path(self.path, "a GSM8K directory") if self.path else DATA_DIR / "gsm8k"
            if folder.is_file():
                raise TaskDataError(f"task.path={self.path} is a file; GSM8K's task.path is a "
                                    "directory holding train.jsonl and test.jsonl")
            where = folder / f"{official_split}.jsonl"
            raw = read_jsonl(where, "GSM8K data (task.path: a directory with train.jsonl and test.jsonl)")
            return [_row(r, where, i) for i, r in raw]
        return [_row(r, where, i) for i, r in enumerate(raw, start=1)]

    # ---- scoring ----
    def gold_completion(self, solution: str, **_) -> str:
        """The dataset's worked solution, which ends in "#### <answer>"."""
        return solution

    def extract_answer(self, text: str) -> str | None:
        """The predicted number in canonical form, or None when there is none.

        >>> GSM8K().extract_answer("3 + 4 = 7 ... so she pays $1,000.00\\n#### $1,000.00")
        '1000'
        >>> GSM8K().extract_answer("I am not sure.") is None
        True
        """
        return self.judge(text, None)[1]

    def is_correct(self, completion: str, answer: str, **_) -> bool:
        """True when the predicted number is the gold `answer`: exactly for an integer gold,
        within `tolerance` otherwise. False for any string it cannot read, never an exception."""
        return self.judge(completion, answer)[0]

    def judge(self, completion: str, answer: str | None, **_) -> tuple[bool, str | None]:
        """(is_correct, extract_answer) from one reading, under one time slice: evaluation votes
        over the same answer the judge scored (a class of equal answers is right or wrong as one)."""
        def both():
            pred = predict(completion)
            if pred is None:
                return False, None
            gold = None if answer is None else _parse_gold(answer)
            right = gold is not None and (pred == gold if gold.denominator == 1
                                          else abs(pred - gold) <= self.tolerance)
            return right, _canonical(pred)
        return bounded.judged(both, (False, None))

    def judge_all(self, completions: list[str], rows: list[dict]) -> list[tuple[bool, str | None]]:
        """`judge` of each completion with its row's columns, in parallel, each under its own
        slice: evaluation's grading path (harness/evaluation/grading.py)."""
        return bounded.grade_all(lambda pair: self.judge(pair[0], **pair[1]),
                                 list(zip(completions, rows, strict=True)))

    def reward(self, completions: list[str], answer: list[str], **kwargs) -> list[float]:
        """TRL-style reward: 1.0 when the completion's final number equals the gold answer, else 0.
        Graded in parallel, each completion under its own time slice (tasks/judge/budget.py).

        >>> GSM8K().reward(["16 - 3 - 4 = 9 eggs, 9 * 2 = 18.\\n#### 18", "#### seventeen"],
        ...                answer=["18", "18"])
        [1.0, 0.0]
        """
        pairs = list(zip(completions, answer, strict=True))
        return bounded.grade_all(lambda pair: float(self.is_correct(*pair)), pairs)

    def run_info(self) -> dict:
        """What a run record should keep: how often rule 3's math-verify guards, limit and budget
        fired."""
        return {"math_verify": bounded.stats(since=self._counted_from)}


def _row(raw, where, line: int) -> dict:
    """Validate one official-format row; a bad one is named `file:line` (hub: `id:split:row`)."""
    fix = ("each row needs a string `question` and a string `answer` ending in '#### <number>', "
           "as in the official files")
    if not isinstance(raw, dict):
        raise row_error(where, line, f"the row is {json_kind(raw)}, not an object", fix)
    for field in ("question", "answer"):
        if not isinstance(raw.get(field), str):
            problem = "missing" if field not in raw else f"{json_kind(raw[field])}, not a string"
            raise row_error(where, line, f"field `{field}` is {problem}", fix)
    solution = raw["answer"]
    gold = gold_answer(solution)
    if gold is None or _parse_gold(gold) is None:
        raise row_error(where, line, f"field `answer` has no usable '#### <number>' "
                        f"(ends {solution[-40:]!r})", fix)
    return {"prompt": PROMPT.format(question=raw["question"]), "question": raw["question"],
            "solution": solution, "answer": gold}


def _parse_gold(gold: str) -> Fraction | None:
    """The official regex also matches "#### ." and "#### 1.2.3"; those are no number (None)."""
    try:
        return _exact(gold)
    except (ValueError, ArithmeticError):
        return None
