"""GSM8K: grade-school maths word problems with an integer final answer (Cobbe et al. 2021).

Data: the official OpenAI files, shipped unmodified in tasks/data/gsm8k (MIT; see PROVENANCE.md),
or `source: hub` for the `openai/gsm8k` "main" config, or `path:` for a directory holding
train.jsonl and test.jsonl in the official format. Splits: test = the 1,319 official test rows;
validation = the last 500 rows of the official train file; train = the other 6,973.

Answer normalisation. Official (grade-school-math `dataset.py`): the first match of
`#### (\\-?[0-9\\.\\,]+)`, stripped, commas removed, compared as strings; no match is `[invalid]`.
Here the gold answer is extracted exactly that way. The prediction is more lenient, because small
models restate and format numbers freely (rules chosen on tests/data/gsm8k_grading.jsonl, a
hand-judged corpus). In order, the first rule that yields a number wins:
1. the prompt asks the model to end with `#### <number>`: the first number on the first non-blank
   line after the *last* `####` ("#### three" counts as 3, "#### twenty-five" as 25; words are read
   as one numeral, never added up: "#### nine nine" is no number);
2. the number after the last "the answer is" / "answer:" phrase, on that line ("The answer is 64
   dollars for 16 glasses." is 64), unless it starts an expression ("answer: 3 + 4 = 7");
3. math-verify on the end of the completion, for \\boxed{} and LaTeX, under the same guard and
   time limit as MATH-500 (tasks/bounded.py: the same answer on any thread, 0 after 5 s);
4. the last number in the completion.
Numbers may carry thousands separators (commas or spaces: "70,000", "70 000"), a `$`, decimals
("5.00") and a fraction bar ("36/2" is 18, never 36); they are compared as floats with absolute
tolerance 1e-6, so "5.00" matches gold "5". Every rule is linear in the completion's length.

    python -m pytest tests/test_task_gsm8k.py -q
"""
from __future__ import annotations

import math
import re
from fractions import Fraction

import datasets

from tasks import bounded
from tasks.base import (DATA_DIR, TaskDataError, check_count, json_kind, read_jsonl, row_error,
                        user_path)

HUB_ID = "openai/gsm8k"
N_VALIDATION = 500
TOLERANCE = 1e-6
PROMPT = ("{question}\n\nSolve the problem step by step. End your response with the final answer "
          "as a number on its own line, in the form \"#### <number>\".")
_GOLD = re.compile(r"#### (\-?[0-9\.\,]+)")  # the official regex
# A minus sign counts only when it cannot be subtraction ("12-4" is 12 and 4, not 12 and -4);
# commas (or single spaces) count only as thousands separators, so "3,4" is two numbers; a
# fraction bar joins two numbers into one value ("36/2").
_SPACE = "[ \u00a0\u2009\u202f]"  # space, no-break space, thin space, narrow no-break space
_UNSIGNED = (r"\$?(?:(?:\d{1,3}(?:,\d{3})+(?!\d)|\d{1,3}(?:" + _SPACE + r"\d{3})+(?![\d,])|\d+)"
             r"(?:\.\d+)?|\.\d+)")
_NUMBER = re.compile(r"(?:(?<![\w)\]])-)?(?<![\d.])" + _UNSIGNED
                     + r"(?:\s*/\s*(" + _UNSIGNED + r"))?(?![\d])")
_PHRASE = re.compile(r"\banswer\b\**\s*(?:is\b|was\b|:|=)", re.I)
_OPERATOR_NEXT = re.compile(r"\s*[-+*/x\u00d7=]\s*\$?\d")  # "answer: 3 + 4 = 7" is working
_UNITS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen".split())}
_TENS = {w: 10 * i for i, w in enumerate(
    "twenty thirty forty fifty sixty seventy eighty ninety".split(), start=2)}
_NUMBER_WORDS = {*_UNITS, *_TENS, "hundred", "thousand"}
MATH_VERIFY_CHARS = 1000  # math-verify reads only the end of a completion: bounded time


def _to_float(text: str) -> float:
    return float(re.sub(r"[,$\s\u00a0\u2009\u202f]", "", text))


def _value(match: re.Match) -> float | None:
    """The value of one _NUMBER match; a fraction is divided out (None for "/0")."""
    whole = match.group(0)
    if match.group(1) is None:
        value = _to_float(whole)
        return value if math.isfinite(value) else None  # a 400-digit "number" is no answer
    numerator, denominator = (_to_float(x) for x in whole.rsplit("/", 1))
    if denominator == 0 or not math.isfinite(numerator) or not math.isfinite(denominator):
        return None
    return float(Fraction(numerator) / Fraction(denominator))


def _first_number(text: str) -> float | None:
    m = _NUMBER.search(text)
    return _value(m) if m else None


def _last_number(text: str) -> float | None:
    last = None
    for last in _NUMBER.finditer(text):
        pass
    return _value(last) if last else None


def _word_number(text: str) -> float | None:
    """One number in words at the start of `text`: "three", "twenty-five", "one hundred and five",
    "two thousand three hundred", "minus four". Words are read as one English numeral, never
    added up: "nine nine", "ten eight" and "six six six" are no number (None), where a sum would
    make each of them 18. Reading stops at punctuation ("three. Three apples" is 3).
    """
    words = re.findall(r"[a-z]+|[^\sa-z-]", text[:200].lower())  # hyphens separate words
    sign, i = (-1, 1) if words[:1] == ["minus"] else (1, 0)
    value, i = _below_million(words, i)
    if value is None:
        return None
    if words[i:i + 1] == ["and"]:
        i += 1
    if i < len(words) and words[i] in _NUMBER_WORDS:  # another numeral follows: not one number
        return None
    return float(sign * value)


def _below_hundred(words: list[str], i: int) -> tuple[int | None, int]:
    word = words[i] if i < len(words) else ""
    if word in _UNITS:
        return _UNITS[word], i + 1
    if word not in _TENS:
        return None, i
    nxt = words[i + 1] if i + 1 < len(words) else ""
    if 1 <= _UNITS.get(nxt, 0) <= 9:  # "twenty-five", "twenty five"
        return _TENS[word] + _UNITS[nxt], i + 2
    return _TENS[word], i + 1


def _scaled(words: list[str], i: int, below, scale: str, factor: int, top: int):
    """`below` words, optionally times `factor` ("hundred", "thousand") plus an optional rest."""
    value, i = below(words, i)
    if value is None or not 1 <= value <= top or words[i:i + 1] != [scale]:
        return value, i
    value, i = value * factor, i + 1
    j = i + 1 if words[i:i + 1] == ["and"] else i
    rest, j = below(words, j)
    return (value + rest, j) if rest else (value, i)


def _below_thousand(words: list[str], i: int) -> tuple[int | None, int]:
    return _scaled(words, i, _below_hundred, "hundred", 100, 99)  # "twelve hundred"


def _below_million(words: list[str], i: int) -> tuple[int | None, int]:
    return _scaled(words, i, _below_thousand, "thousand", 1000, 999)


def _marker_answer(text: str) -> float | None:
    """Rule 1: the number on the first non-blank line after the last `####`."""
    line = text.rsplit("####", 1)[1].lstrip().split("\n", 1)[0]
    found = _first_number(line)
    return found if found is not None else _word_number(line)


def _phrase_answer(text: str) -> float | None:
    """Rule 2: the number after the last "the answer is" / "answer:" on the same line."""
    last = None
    for last in _PHRASE.finditer(text):
        pass
    if last is None:
        return None
    line = text[last.end():].split("\n", 1)[0]
    m = _NUMBER.search(line)
    if m is None:
        return _word_number(line)
    return None if _OPERATOR_NEXT.match(line, m.end()) else _value(m)


def _math_verify_answer(text: str) -> float | None:
    """Rule 3: math-verify on the end of the text, for LaTeX answers (\\boxed{}, \\frac{}{}).

    Plain text is left to rule 4: math-verify reads "3,4" as 3.4, and costs milliseconds.
    """
    if "\\" not in text:
        return None
    tail = text[-MATH_VERIFY_CHARS:]
    if bounded.refuse(tail):  # the same guard and limit as MATH-500 (tasks/bounded.py)
        return None
    return bounded.number(tail)


def predict(text: str) -> float | None:
    """The predicted number of a completion (the module docstring's rules, in order), or None."""
    if "####" in text:
        found = _marker_answer(text)
        if found is not None:
            return found
        text = text.replace("####", "\n")  # a bare or wordy marker is no number
    for rule in (_phrase_answer, _math_verify_answer, _last_number):
        found = rule(text)
        if found is not None:
            return found
    return None


def _canonical(value: float) -> str:
    """18.0 -> '18', 2.5 -> '2.5': one spelling per number, so majority votes agree."""
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.6f}".rstrip("0").rstrip(".")


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
            shipped copy.
    """

    name = "gsm8k"

    def __init__(self, version: int = 1, n_eval: int | None = 500, max_new_tokens: int = 512,
                 source: str = "local", path: str | None = None):
        if source not in ("local", "hub"):
            raise TaskDataError(f"task.source={source!r} is unknown; use local or hub")
        if source == "hub" and path:
            raise TaskDataError("task.path is only read with task.source=local; drop one of them")
        check_count("n_eval", n_eval)
        self.version, self.n_eval, self.max_new_tokens = version, n_eval, max_new_tokens
        self.source, self.path = source, path
        self._counted_from = bounded.stats()  # run_info counts this task's run only

    # ---- data ----
    def load(self, split: str) -> datasets.Dataset:
        """Rows with `prompt`, `question`, `solution` (the worked answer) and `answer` (gold)."""
        if split not in ("train", "validation", "test"):
            raise TaskDataError(f"split {split!r} is unknown; use train, validation or test")
        rows = self._rows("test" if split == "test" else "train")
        if split == "train":
            return datasets.Dataset.from_list(rows[:-N_VALIDATION])
        rows = rows[-N_VALIDATION:] if split == "validation" else rows
        return datasets.Dataset.from_list(rows[:self.n_eval] if self.n_eval else rows)

    def _rows(self, official_split: str) -> list[dict]:
        if self.source == "hub":
            try:
                raw = datasets.load_dataset(HUB_ID, "main", split=official_split).to_list()
            except Exception as e:  # noqa: BLE001 - any hub failure gets the same advice
                raise TaskDataError(
                    f"could not load {HUB_ID} ('main', split {official_split}) from the Hugging "
                    f"Face hub ({type(e).__name__}: {str(e)[:200]}). Offline? Use "
                    "task.source=local (the shipped copy) or set HF_DATASETS_CACHE to a cache "
                    "that holds it.") from e
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
        value = predict(text)
        return None if value is None else _canonical(value)

    def is_correct(self, completion: str, answer: str, **_) -> bool:
        """True when the predicted number equals the gold `answer` within 1e-6."""
        pred = self.extract_answer(completion)
        return pred is not None and abs(float(pred) - _to_float(answer)) <= TOLERANCE

    def reward(self, completions: list[str], answer: list[str], **kwargs) -> list[float]:
        """TRL-style reward: 1.0 when the completion's final number equals the gold answer, else 0.

        >>> GSM8K().reward(["16 - 3 - 4 = 9 eggs, 9 * 2 = 18.\\n#### 18", "#### seventeen"],
        ...                answer=["18", "18"])
        [1.0, 0.0]
        """
        return [float(self.is_correct(c, a)) for c, a in zip(completions, answer, strict=True)]

    def run_info(self) -> dict:
        """What a run record should keep: how often rule 3's math-verify guard and limit fired."""
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
    if gold is None or not math.isfinite(_parse_gold(gold)):
        raise row_error(where, line, f"field `answer` has no usable '#### <number>' "
                        f"(ends {solution[-40:]!r})", fix)
    return {"prompt": PROMPT.format(question=raw["question"]), "question": raw["question"],
            "solution": solution, "answer": gold}


def _parse_gold(gold: str) -> float:
    """The official regex also matches "#### ." and "#### 1.2.3"; those are no number (nan)."""
    try:
        return _to_float(gold)
    except ValueError:
        return math.nan
