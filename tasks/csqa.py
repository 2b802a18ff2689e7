"""CommonsenseQA: 5-way multiple-choice questions on everyday knowledge (Talmor et al. 2019).

Data (task.source):
- `hub`: `tau/commonsense_qa` (splits train 9,741 / validation 1,221 / test 1,140 without
  answers). Row layout: `id`, `question` (the stem, a string), `question_concept`,
  `choices` {`label`: [A..E], `text`: [...]}, `answerKey`.
- `local` with task.path = a directory holding the official files, in either layout per row:
  the original release's `train_rand_split.jsonl` and `dev_rand_split.jsonl` (rows `id`,
  `question` {`stem`, `question_concept`, `choices`: [{`label`, `text`}, ...]}, `answerKey`), or
  the hub's splits saved as `train.jsonl` and `validation.jsonl` (`ds.to_json`, the hub layout).
- `fixture` (the default, because no copy of CommonsenseQA loads offline: none is shipped and
  there is no hub here): 20 hand-written rows in the original layout in tasks/data/csqa/fixture/,
  NOT CommonsenseQA (README.md there). The task is then named "csqa-fixture", each load logs a
  warning, and run_info()["notes"] says so, which the report prints under its tables.

Splits: the official test split has no answers, so this harness's test = the official
validation (dev) split (1,221 rows; published CommonsenseQA numbers are on it too); validation =
500 rows of the official train split, the ones with the smallest sha256 of their `id` (so the
carve does not depend on file order or layout; a quarter of train when train has fewer than
2,000 rows, as the fixture has); train = the other official train rows, in file order.

Every row of both official files (or hub splits) is checked when the task is built, before any
model loads: a bad one is `file:line: field ...; fix` (hub: `tau/commonsense_qa:split:row`), and
a task.path directory must hold both files. A row needs five options labelled A-E in order,
non-empty texts, and an `answerKey` among those labels (an empty one is the answerless official
test file).

Prompt and grading: tasks/multiple_choice.py ("Answer: X" on the last line; exactly one letter
named in its answer span).

    python -m pytest tests/test_task_multiple_choice.py -q
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import datasets

from tasks.base import (DATA_DIR, TaskDataError, check_count, json_kind, load_hub, read_jsonl,
                        row_error, user_path)
from tasks.multiple_choice import MultipleChoiceTask, format_prompt, letters_for

HUB_ID = "tau/commonsense_qa"
N_CHOICES = 5
N_VALIDATION = 500
FIXTURE_DIR = DATA_DIR / "csqa" / "fixture"
# official split -> the file names a task.path directory may hold (original release, hub export)
FILES = {"train": ("train_rand_split.jsonl", "train.jsonl"),
         "validation": ("dev_rand_split.jsonl", "validation.jsonl")}


class CommonsenseQA(MultipleChoiceTask):
    """CommonsenseQA (see the module docstring for data, splits and grading).

    Args:
        version: bump when scores change.
        n_eval: use at most this many test/validation rows (None = all).
        max_new_tokens: completion length for evaluation and training.
        source: "fixture" (hand-written test rows, not the benchmark), "local" (task.path) or
            "hub" (`tau/commonsense_qa`).
        path: with source=local, a directory holding the official train and dev files.

    Raises:
        TaskDataError: a bad setting, a missing file, or a malformed row in either official file
            or hub split (named `file:line` with the fix), all from the constructor.
    """

    name = "csqa"
    benchmark = "CommonsenseQA"
    n_choices = N_CHOICES
    fixture_dir = "tasks/data/csqa/fixture"

    def __init__(self, version: int = 1, n_eval: int | None = 500, max_new_tokens: int = 512,
                 source: str = "fixture", path: str | None = None):
        self._set_source(source, path, "/dir", "task.source=local needs task.path=/dir holding "
                         "train_rand_split.jsonl and dev_rand_split.jsonl (no CommonsenseQA "
                         "copy is shipped); or use task.source=hub")
        check_count("n_eval", n_eval)
        self.version, self.n_eval, self.max_new_tokens = version, n_eval, max_new_tokens
        self.path = path
        # every row of both official files, checked now (before any model loads); load() reuses them
        self._official = {official: self._rows(official) for official in ("validation", "train")}

    # ---- data ----
    def load(self, split: str) -> datasets.Dataset:
        """Rows with `prompt`, `id`, `question`, `concept`, `choices` (texts, A-E) and `answer`."""
        if split not in ("train", "validation", "test"):
            raise TaskDataError(f"split {split!r} is unknown; use train, validation or test")
        rows = self._official["validation" if split == "test" else "train"]
        if split != "test":
            held = set(validation_ids([r["id"] for r in rows]))
            rows = [r for r in rows if (r["id"] in held) == (split == "validation")]
        if split != "train" and self.n_eval:
            rows = rows[:self.n_eval]
        self._warn_fixture(len(rows), split)
        return datasets.Dataset.from_list(rows)

    def _rows(self, official: str) -> list[dict]:
        if self.source == "hub":
            raw = load_hub(HUB_ID, None, official, "Use task.source=local task.path=/dir (the "
                           "official jsonl files), or set HF_DATASETS_CACHE to a cache that holds it.")
            return [_row(r, f"{HUB_ID}:{official}", i) for i, r in enumerate(raw, start=1)]
        if self.source == "fixture":
            folder = FIXTURE_DIR
        else:
            folder = user_path(self.path, "a CommonsenseQA directory")
            if folder.is_file():
                raise TaskDataError(f"task.path={self.path} is a file; CommonsenseQA's task.path is a "
                                    "directory holding train_rand_split.jsonl and dev_rand_split.jsonl")
        where = _find(folder, official)
        raw = read_jsonl(where, "CommonsenseQA data (task.path: a directory with the official "
                                "train_rand_split.jsonl and dev_rand_split.jsonl)")
        return [_row(r, where, i) for i, r in raw]

    def _info(self) -> dict:
        return {"splits": "test = official validation (dev); validation = 500 official train rows "
                          "by sha256(id); train = the rest"}


def _find(folder: Path, official: str) -> Path:
    """The file of an official split in a task.path directory: original name, else hub export."""
    for name in FILES[official]:
        if (folder / name).is_file():
            return folder / name
    names = " or ".join(FILES[official])
    raise TaskDataError(f"{folder} has no {names}; task.path must be a directory holding the "
                        f"official CommonsenseQA {official} file")


def validation_ids(ids: list[str]) -> list[str]:
    """The official train rows this harness holds out for validation: the N_VALIDATION ids (a
    quarter of them under 2,000 rows) with the smallest sha256, independent of row order.

    >>> validation_ids(["a", "b", "c", "d", "e", "f", "g", "h"])
    ['d', 'f']
    """
    n = N_VALIDATION if len(ids) >= 4 * N_VALIDATION else len(ids) // 4
    return sorted(ids, key=lambda i: hashlib.sha256(i.encode()).hexdigest())[:n]


def _text(raw: dict, field: str, where, line: int, fix: str, label: str | None = None) -> str:
    value = raw.get(field)
    if not isinstance(value, str):
        problem = "missing" if field not in raw else f"{json_kind(value)}, not a string"
        raise row_error(where, line, f"field `{label or field}` is {problem}", fix)
    return value


def _row(raw, where, line: int) -> dict:
    """Validate one row in either layout; a bad one is named `file:line` (hub: `id:split:row`)."""
    fix = ("each row needs `id`, `question` (hub layout: the stem, with `choices` {label, text}; "
           "original layout: {stem, choices: [{label, text}]}) and `answerKey`, as in the "
           "official files")
    if not isinstance(raw, dict):
        raise row_error(where, line, f"the row is {json_kind(raw)}, not an object", fix)
    row_id = _text(raw, "id", where, line, fix)
    question = raw.get("question")
    if isinstance(question, dict):  # original release: the stem and choices nest in `question`
        stem = _text(question, "stem", where, line, fix, "question.stem")
        concept = question.get("question_concept")
        labels, texts = _listed_choices(question.get("choices"), "question.choices", where, line, fix)
    elif isinstance(question, str):  # hub layout
        stem, concept = question, raw.get("question_concept")
        labels, texts = _columnar_choices(raw.get("choices"), where, line, fix)
    else:
        problem = "missing" if "question" not in raw else f"{json_kind(question)}"
        raise row_error(where, line, f"field `question` is {problem}, not a string (hub layout) "
                        "or an object (original layout)", fix)
    if not stem.strip():
        raise row_error(where, line, "the question's stem is empty", fix)
    want = list(letters_for(N_CHOICES))
    if labels != want:
        raise row_error(where, line, f"the choice labels are {labels}, not {want}",
                        "CommonsenseQA rows have five options labelled A-E in order")
    for letter, text in zip(labels, texts):
        if not text.strip():
            raise row_error(where, line, f"option {letter}'s text is empty", fix)
    key = _text(raw, "answerKey", where, line, fix)
    if key not in labels:
        problem = ("field `answerKey` is empty (the official test split has no answers)" if not key
                   else f"field `answerKey` is {key!r}, not among the choice labels {', '.join(labels)}")
        raise row_error(where, line, problem, "use rows with answers (the official train and dev "
                        "files) whose answerKey is one of their labels")
    return {"prompt": format_prompt(stem, texts), "id": row_id, "question": stem,
            "concept": concept if isinstance(concept, str) else "", "choices": texts,
            "answer": key}


def _listed_choices(choices, field: str, where, line: int, fix: str) -> tuple[list, list[str]]:
    """Original layout: [{"label": "A", "text": "..."}, ...]."""
    if not isinstance(choices, list):
        kind = "missing" if choices is None else json_kind(choices)
        raise row_error(where, line, f"field `{field}` is {kind}, not an array", fix)
    labels, texts = [], []
    for k, choice in enumerate(choices):
        if not isinstance(choice, dict):
            raise row_error(where, line, f"field `{field}[{k}]` is {json_kind(choice)}, not an "
                            "object", fix)
        labels.append(_text(choice, "label", where, line, fix, f"{field}[{k}].label"))
        texts.append(_text(choice, "text", where, line, fix, f"{field}[{k}].text"))
    return labels, texts


def _columnar_choices(choices, where, line: int, fix: str) -> tuple[list, list[str]]:
    """Hub layout: {"label": ["A", ...], "text": ["...", ...]}."""
    if not isinstance(choices, dict):
        kind = "missing" if choices is None else json_kind(choices)
        raise row_error(where, line, f"field `choices` is {kind}, not an object", fix)
    columns = {}
    for key in ("label", "text"):
        values = choices.get(key)
        if not isinstance(values, list):
            kind = "missing" if values is None else json_kind(values)
            raise row_error(where, line, f"field `choices.{key}` is {kind}, not an array", fix)
        for k, v in enumerate(values):
            if not isinstance(v, str):
                raise row_error(where, line, f"field `choices.{key}[{k}]` is {json_kind(v)}, "
                                "not a string", fix)
        columns[key] = values
    if len(columns["label"]) != len(columns["text"]):
        raise row_error(where, line, f"field `choices` has {len(columns['label'])} labels but "
                        f"{len(columns['text'])} texts", fix)
    return columns["label"], columns["text"]
