"""GPQA: graduate-level 4-way multiple-choice science questions (Rein et al. 2023).

GPQA's authors ask that its questions not be published in plain text (to keep them out of
training corpora), so no copy is shipped and none may be committed: the task loads the user's
copy or the (gated) hub dataset.

Data (task.source):
- `hub`: `Idavidrein/gpqa`, config `gpqa_<subset>` (task.subset: diamond, the default, 198
  questions; main, 448; extended, 546), split "train" (the only one). The dataset is gated: accept
  its terms on the hub and log in (HF_TOKEN) first.
- `local` with task.path = the official CSV (e.g. dataset/gpqa_diamond.csv from the authors'
  zip). Columns read: "Record ID", "Question", "Correct Answer", "Incorrect Answer 1",
  "Incorrect Answer 2", "Incorrect Answer 3"; the others are ignored. A file named after another
  subset than task.subset (gpqa_main.csv with subset=diamond) is refused, so a record never names
  the wrong subset.
- `fixture` (the default, because nothing else loads offline): 12 hand-written rows of simple
  questions in the official CSV format, tasks/data/gpqa/fixture.csv, NOT GPQA (README.md there).
  The task is then named "gpqa-fixture", each load logs a warning, and run_info()["notes"] says
  so, which the report prints under its tables.

GPQA is evaluation-only, like MATH-500: load("train") and load("validation") raise rather than
carve a split out of the questions scored; train on another task (e.g. task=csqa) and evaluate
here (eval.tasks=[gpqa]). test = every row of the subset, in file order (n_eval: the first rows).

Choice order: the official columns put the correct answer first, so the four options are
shuffled per question, by a permutation fixed by the question's "Record ID" alone (the options
sorted by sha256("gpqa:<Record ID>:<column index>"), the same on every machine, Python version and
file order). The row records it: `permutation[j]` is the column shown as letter j (0 = "Correct
Answer", 1-3 = "Incorrect Answer 1-3"), so `answer` is the letter at which 0 sits.

Every row is checked when the task is built, before any model loads: a bad one is
`file:line: field ...; fix` (hub: `Idavidrein/gpqa:config:row`); every answer must be a
non-empty string, and the correct answer must differ from each incorrect one (else it would be
among the choices twice, and one of its letters scored wrong).

Prompt and grading: tasks/multiple_choice.py ("Answer: X" on the last line; exactly one letter
named in its answer span).

    python -m pytest tests/test_task_multiple_choice.py -q
"""
from __future__ import annotations

import csv
import hashlib
import io
from pathlib import Path

import datasets

from tasks.base import (DATA_DIR, TaskDataError, check_count, json_kind, load_hub, read_text,
                        row_error, user_path)
from tasks.multiple_choice import MultipleChoiceTask, format_prompt, letters_for

HUB_ID = "Idavidrein/gpqa"
SUBSETS = ("diamond", "main", "extended")
FIXTURE = DATA_DIR / "gpqa" / "fixture.csv"
ANSWER_COLUMNS = ("Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")
COLUMNS = ("Record ID", "Question", *ANSWER_COLUMNS)


def permutation(record_id: str) -> list[int]:
    """The answer columns in the order shown (column indices into ANSWER_COLUMNS), fixed by the
    record id alone.

    >>> permutation("rec0000000000000")
    [3, 1, 2, 0]
    """
    digest = lambda k: hashlib.sha256(f"gpqa:{record_id}:{k}".encode()).hexdigest()  # noqa: E731
    return sorted(range(len(ANSWER_COLUMNS)), key=digest)


class GPQA(MultipleChoiceTask):
    """GPQA (see the module docstring for data, choice order and grading).

    Args:
        version: bump when scores change.
        n_eval: use at most this many test rows (None = all).
        max_new_tokens: completion length for evaluation.
        source: "fixture" (hand-written test rows, not the benchmark), "local" (task.path, the
            official CSV) or "hub" (`Idavidrein/gpqa`, gated).
        subset: diamond, main or extended (the hub config gpqa_<subset>).
        path: with source=local, the official CSV of that subset.

    Raises:
        TaskDataError: a bad setting, a missing or broken file, or a malformed row (named
            `file:line` with the fix), all from the constructor.
    """

    name = "gpqa"
    benchmark = "GPQA"
    n_choices = len(ANSWER_COLUMNS)
    fixture_dir = "tasks/data/gpqa/fixture.csv"

    def __init__(self, version: int = 1, n_eval: int | None = None, max_new_tokens: int = 1024,
                 source: str = "fixture", subset: str = "diamond", path: str | None = None):
        self._set_source(source, path, "/path/to/gpqa_diamond.csv",
                         "task.source=local needs task.path=/path/to/gpqa_<subset>.csv (GPQA "
                         "is never shipped: its authors ask that the questions stay out of "
                         "public text); or use task.source=hub")
        if subset not in SUBSETS:
            raise TaskDataError(f"task.subset={subset!r} is unknown; use {', '.join(SUBSETS)}")
        check_count("n_eval", n_eval)
        self.version, self.n_eval, self.max_new_tokens = version, n_eval, max_new_tokens
        self.subset, self.path = subset, path
        self._checked = self._rows()  # every row, checked now (before any model loads)

    # ---- data ----
    def load(self, split: str) -> datasets.Dataset:
        """Rows with `prompt`, `record_id`, `question`, `choices` (texts in the order shown),
        `permutation` (the answer column shown at each letter) and `answer` (the gold letter)."""
        if split in ("train", "validation"):
            raise TaskDataError(f"GPQA is evaluation-only: there is no {split} split. Train on "
                                "another task (e.g. task=csqa) and evaluate with eval.tasks=[gpqa].")
        if split != "test":
            raise TaskDataError(f"split {split!r} is unknown; GPQA has only test")
        rows = self._checked[:self.n_eval] if self.n_eval else self._checked
        self._warn_fixture(len(rows), split)
        return datasets.Dataset.from_list(rows)

    def _rows(self) -> list[dict]:
        config = f"gpqa_{self.subset}"
        if self.source == "hub":
            raw = load_hub(HUB_ID, config, "train", "Use task.source=local task.path=/path/to/"
                           f"{config}.csv, or set HF_DATASETS_CACHE to a cache that holds it. The "
                           "dataset is gated: accept its terms on the hub and set HF_TOKEN.")
            return [_row(r, f"{HUB_ID}:{config}", i) for i, r in enumerate(raw, start=1)]
        if self.source == "fixture":
            path = FIXTURE
        else:
            path = user_path(self.path, "a GPQA CSV file")
            named = next((s for s in SUBSETS if path.stem == f"gpqa_{s}"), self.subset)
            if named != self.subset:
                raise TaskDataError(f"task.path={self.path} is the {named} subset's file but "
                                    f"task.subset={self.subset}; set task.subset={named}")
        return [_row(r, path, line) for line, r in read_csv(path)]

    def _info(self) -> dict:
        return {"subset": None if self.fixture else f"gpqa_{self.subset}",
                "choice_order": "shuffled per question by sha256 of its Record ID; the row's "
                                "`permutation` column records it"}


def read_csv(path: Path) -> list[tuple[int, dict]]:
    """(first line, row as a dict) for every record of a GPQA CSV with a header row.

    Raises:
        TaskDataError: the file is missing, unreadable or not UTF-8, a required column is
            absent from the header, or the CSV itself is broken (naming the line).
    """
    what = "GPQA data (task.path: the official CSV, e.g. gpqa_diamond.csv)"
    reader = csv.reader(io.StringIO(read_text(path, what), newline=""))
    rows, start = [], 1
    try:
        header = next(reader)
        missing = [c for c in COLUMNS if c not in header]
        if missing:
            raise row_error(path, 1, f"the header lacks column(s) {', '.join(map(repr, missing))}",
                            "use the official GPQA CSV, whose header names them")
        start = reader.line_num + 1
        for record in reader:
            if any(cell.strip() for cell in record):
                row = dict(zip(header, record))
                for column in header[len(record):]:  # a short record: the cells it lacks
                    row.pop(column, None)
                rows.append((start, row))
            start = reader.line_num + 1
    except csv.Error as e:
        raise row_error(path, start, f"not valid CSV ({e})", "fix or delete that record") from None
    return rows


def _row(raw, where, line: int) -> dict:
    """Validate one official row and shuffle its answers by its record id."""
    fix = ("each row needs a non-empty \"Record ID\", \"Question\", \"Correct Answer\" and "
           "\"Incorrect Answer 1\"-\"3\", as in the official GPQA CSV")
    if not isinstance(raw, dict):
        raise row_error(where, line, f"the row is {json_kind(raw)}, not a record", fix)
    values = {}
    for field in COLUMNS:
        value = raw.get(field)
        if not isinstance(value, str) or not value.strip():
            problem = ("missing" if value is None else "empty" if isinstance(value, str)
                       else f"{json_kind(value)}, not text")
            raise row_error(where, line, f"field `{field}` is {problem}", fix)
        values[field] = value
    answers = [values[c].strip() for c in ANSWER_COLUMNS]
    for k in range(1, len(answers)):
        if answers[k] == answers[0]:
            raise row_error(where, line, f"field `{ANSWER_COLUMNS[k]}` repeats the correct answer, "
                            "so the correct answer is not one choice among four",
                            "make every incorrect answer differ from the correct one")
    order = permutation(values["Record ID"])
    letters = letters_for(len(ANSWER_COLUMNS))
    return {"prompt": format_prompt(values["Question"], [answers[k] for k in order]),
            "record_id": values["Record ID"], "question": values["Question"],
            "choices": [answers[k] for k in order], "permutation": order,
            "answer": letters[order.index(0)]}
