"""The task interface every task module implements.

A task is one module in tasks/ plus one YAML file in conf/task/ whose `_target_` names the class.
There is no registry: `_target_` is the registration.

    python -m pytest tests/test_tasks.py
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol, runtime_checkable

import datasets

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


class TaskDataError(ValueError):
    """A data file is missing or a row is malformed; the message names the file, row and fix."""


def read_jsonl(path: Path, what: str) -> list[tuple[int, object]]:
    """(line number, parsed object) for every non-blank line of a JSONL file.

    Args:
        path: the file.
        what: what the file holds, for the error message (e.g. "GSM8K data").

    Raises:
        TaskDataError: the file is missing, or a line is not valid JSON (naming the line).
    """
    if not path.is_file():
        raise TaskDataError(f"{what} file {path} not found; check task.path or reinstall esbench")
    rows = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rows.append((i, json.loads(line)))
            except json.JSONDecodeError as e:
                raise TaskDataError(f"{path}: line {i} is not valid JSON ({e}); fix or delete that line") from None
    return rows
