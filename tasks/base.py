"""The task interface every task module implements.

A task is one module in tasks/ plus one YAML file in conf/task/ whose `_target_` names the class.
There is no registry: `_target_` is the registration.

Data files are user input (task.path): every reader here turns a bad file into one TaskDataError
of the form `path:line: what is wrong; the fix`, never a traceback from inside json or datasets.

    python -m pytest tests/test_tasks.py
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Protocol, runtime_checkable

import datasets

from harness.core.errors import UserError

DATA_DIR = Path(__file__).parent / "data"


@runtime_checkable
class Task(Protocol):
    """What the harness needs from a task.

    `load(split)` returns a Dataset with a `prompt` column (the user-facing problem text, *not*
    chat-formatted: the harness applies a model's chat template when its config asks for one)
    plus every column `reward` needs. Splits: "train", "validation", "test".

    `reward(completions, **columns)` follows TRL's reward-function convention: `completions` is a
    list of completion strings (the completion only, never prompt+completion), each dataset column
    arrives as a keyword list aligned with it, and unknown keywords are ignored via **kwargs.
    GRPO and PPO take it unchanged and ES calls the same function.

    `gold_completion(**row)` returns a completion that earns full marks on that row (the reference
    solution in the task's expected form); the conformance test scores it.

    `extract_answer(text)` returns a canonical answer string for majority voting, or None when
    the completion holds no parsable answer (None never wins a vote).
    """

    name: str
    version: int

    def load(self, split: str) -> datasets.Dataset: ...

    def reward(self, completions: list[str], **kwargs) -> list[float]: ...

    def extract_answer(self, text: str) -> str | None: ...

    def is_correct(self, completion: str, **row) -> bool: ...

    def gold_completion(self, **row) -> str: ...


class TaskDataError(UserError, ValueError):
    """A data file is missing or a row is malformed; the message names the file, row and fix."""


def row_error(path, line: int, problem: str, fix: str) -> TaskDataError:
    """The one error format for a bad row, `path:line: problem; fix`, as editors and grep print it."""
    return TaskDataError(f"{path}:{line}: {problem}; {fix}")


def user_path(path, what: str) -> Path:
    """A task.path value as a Path; a non-string (Hydra reads `task.path=123` as an int) is an error."""
    if not isinstance(path, (str, Path)) or not str(path).strip():
        raise TaskDataError(f"task.path={path!r} is not a file path; give {what} as a path string")
    return Path(path).expanduser()


def read_text(path: Path, what: str) -> str:
    """The whole file as text, with every way of failing to read it turned into a TaskDataError.

    Args:
        path: the file.
        what: what the file holds, for the error message (e.g. "GSM8K data").
    """
    if path.is_dir():
        raise TaskDataError(f"{what} file {path} is a directory; point task.path at the file")
    if not path.is_file():
        raise TaskDataError(f"{what} file {path} not found; check task.path or reinstall esbench")
    try:
        text = path.read_bytes().decode("utf-8-sig")  # -sig: a byte-order mark is not data
    except OSError as e:
        raise TaskDataError(f"{what} file {path} cannot be read ({e.strerror or e}); check its "
                            "permissions") from None
    except UnicodeDecodeError as e:
        line = path.read_bytes()[:e.start].count(b"\n") + 1
        raise row_error(path, line, f"not UTF-8 text (byte {e.object[e.start]:#04x})",
                        "save the file as UTF-8") from None
    if not text.strip():
        raise TaskDataError(f"{what} file {path} is empty; it needs one JSON object per line")
    return text


def parse_json(text: str, path: Path, first_line: int = 1):
    """json.loads that reports a bad document as `path:line: ...`, the line counted in the file.

    Args:
        text: the JSON text.
        path: the file, for the message.
        first_line: the file line on which `text` starts (for one row of a JSONL file).
    """
    try:
        return json.loads(text)  # NaN and Infinity load: the row validators name their field
    except json.JSONDecodeError as e:
        problem = f"not valid JSON ({e.msg} at column {e.colno}"
        problem += ", the row is cut off)" if e.pos >= len(text.rstrip()) else ")"
        raise row_error(path, first_line + e.lineno - 1, problem,
                        "fix or delete that line") from None
    except (ValueError, RecursionError) as e:  # nesting thousands deep, a 5,000-digit int
        raise row_error(path, first_line, f"not usable JSON ({type(e).__name__}: {str(e)[:80]})",
                        "fix or delete that line") from None


def read_jsonl(path: Path, what: str) -> list[tuple[int, object]]:
    """(line number, parsed object) for every non-blank line of a JSONL file.

    Args:
        path: the file.
        what: what the file holds, for the error message (e.g. "GSM8K data").

    Raises:
        TaskDataError: the file is missing, unreadable, empty or not UTF-8, or a line is not
            valid JSON (naming the line: `path:line: ...`).
    """
    text = read_text(path, what)
    return [(i, parse_json(line, path, i)) for i, line in enumerate(text.split("\n"), start=1)
            if line.strip()]


def load_hub(hub_id: str, config: str | None, split: str, fix: str) -> list[dict]:
    """Rows of a Hugging Face hub dataset, or one TaskDataError on one line (offline, gated, an
    unknown config or split): every task with `source: hub` reads the hub through this.

    Args:
        hub_id: the dataset's hub id, e.g. "openai/gsm8k".
        config: its config name, or None.
        split: the hub split to read.
        fix: the task's own way out, a sentence or two, e.g. "Use task.source=local (the shipped
            copy) or set HF_DATASETS_CACHE to a cache that holds it."
    """
    try:
        return datasets.load_dataset(hub_id, config, split=split).to_list()
    except Exception as e:  # noqa: BLE001 - any hub failure gets the same advice
        cause = " ".join(f"{type(e).__name__}: {e}".split())[:200]
        named = f"{hub_id} ({config}, split {split})" if config else f"{hub_id} (split {split})"
        raise TaskDataError(f"could not load {named} from the Hugging Face hub ({cause}). Offline? "
                            f"{fix}") from None


def json_kind(value) -> str:
    """What a parsed JSON value is, in JSON's words, for messages about a row of the wrong kind."""
    kinds = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    return kinds.get(type(value), type(value).__name__)


def check_count(name: str, value) -> None:
    """n_eval / n_train must be None (all rows) or a positive int: -5 would silently drop rows."""
    if value is not None and not (is_int(value) and value > 0):
        raise TaskDataError(f"task.{name}={value!r} is not a row count; use a positive integer, "
                            "or null for all rows")


def is_int(x) -> bool:
    """An int that is not a bool: json's `true` is a Python int, but no data file means 1 by it."""
    return isinstance(x, int) and not isinstance(x, bool)


def is_finite_number(x) -> bool:
    """An int (not bool) or a finite float; math.isfinite would overflow on a 400-digit int."""
    return is_int(x) or (isinstance(x, float) and math.isfinite(x))
