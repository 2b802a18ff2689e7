"""GSM8K: grade-school maths word problems with an integer final answer (Cobbe et al. 2021).

Data: the official OpenAI files, shipped unmodified in tasks/data/gsm8k (MIT; see PROVENANCE.md),
or `source: hub` for the `openai/gsm8k` "main" config, or `path:` for a directory holding
train.jsonl and test.jsonl in the official format. Splits: test = the 1,319 official test rows;
validation = the last 500 rows of the official train file; train = the other 6,973.

Answer normalisation. Official (grade-school-math `dataset.py`): the first match of
`#### (\\-?[0-9\\.\\,]+)`, stripped, commas removed, compared as strings; no match is `[invalid]`.
Here the gold answer is extracted exactly that way. The prediction is more lenient, because small
models restate and format numbers freely: the prompt asks the model to end with `#### <number>`, so
when the completion has a `####` the prediction is the first number after the *last* `####`
(None if there is none); without a marker it is the last number anywhere in the completion. Numbers
may carry thousands commas, a `$` and decimals ("1,000", "$5", "5.00"), and are compared as floats
with absolute tolerance 1e-6, so "5.00" matches gold "5".

    python -m pytest tests/test_task_gsm8k.py -q
"""
from __future__ import annotations

import re
from pathlib import Path

import datasets

from tasks.base import DATA_DIR, TaskDataError, read_jsonl

HUB_ID = "openai/gsm8k"
N_VALIDATION = 500
TOLERANCE = 1e-6
PROMPT = ("{question}\n\nSolve the problem step by step. End your response with the final answer "
          "as a number on its own line, in the form \"#### <number>\".")
_GOLD = re.compile(r"#### (\-?[0-9\.\,]+)")  # the official regex
# A minus sign counts only when it cannot be subtraction ("12-4" is 12 and 4, not 12 and -4);
# commas count only as thousands separators, so "3,4" is two numbers.
_NUMBER = re.compile(r"(?:(?<![\w)\]])-)?\$?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")


def _to_float(text: str) -> float:
    return float(text.replace(",", "").replace("$", ""))


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
        self.version, self.n_eval, self.max_new_tokens = version, n_eval, max_new_tokens
        self.source, self.path = source, path

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
            folder = Path(self.path).expanduser() if self.path else DATA_DIR / "gsm8k"
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
        if "####" in text:
            found = _NUMBER.findall(text.rsplit("####", 1)[1])[:1]
        else:
            found = _NUMBER.findall(text)[-1:]
        return _canonical(_to_float(found[0])) if found else None

    def is_correct(self, completion: str, answer: str, **_) -> bool:
        """True when the predicted number equals the gold `answer` within 1e-6."""
        pred = self.extract_answer(completion)
        return pred is not None and abs(float(pred) - _to_float(answer)) <= TOLERANCE

    def reward(self, completions: list[str], answer: list[str], **kwargs) -> list[float]:
        """TRL-style reward: 1.0 when the completion's final number equals the gold answer, else 0.

        >>> GSM8K().reward(["16 - 3 - 4 = 9 eggs, 9 * 2 = 18.\\n#### 18", "#### eighteen"],
        ...                answer=["18", "18"])
        [1.0, 0.0]
        """
        return [float(self.is_correct(c, a)) for c, a in zip(completions, answer, strict=True)]


def _row(raw: dict, where, index: int) -> dict:
    question = raw.get("question") if isinstance(raw, dict) else None
    solution = raw.get("answer") if isinstance(raw, dict) else None
    gold = gold_answer(solution) if isinstance(solution, str) else None
    if not isinstance(question, str) or gold is None:
        raise TaskDataError(f"{where}: row {index} is malformed ({str(raw)[:80]}); each row needs "
                            "a string `question` and an `answer` ending in '#### <number>'")
    return {"prompt": PROMPT.format(question=question), "question": question,
            "solution": solution, "answer": gold}
