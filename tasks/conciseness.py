"""Conciseness: answer in as many characters as a short reference answer (the ES paper's 2nd task).

Qiu et al. 2025 (arXiv 2509.24372) fine-tune for conciseness with a length-only reward: minus the
absolute difference in characters between the completion and a short target answer. Correctness
is not rewarded, which is the point of the task: it probes how each method trades reward against
drift from the base model (watch KL and `is_correct` next to reward). Their Table 2 reports the
reward normalised so that -2000 maps to 0 and 0 (exact length) maps to 1:
`normalised_reward(r) = 1 + r / 2000` (linear, not clipped: more than 2,000 characters off is < 0).

Data: tasks/data/conciseness/prompts.jsonl, a prompt set written for this project (not the paper's
data; released with the project's code): two training prompts, two validation prompts and eight
held-out test prompts, each with a short target answer, rows {"split", "prompt", "target"}.
Validation = the rows with split "validation", never a training or test prompt (a prompt in two
splits is refused). Before task version 2, validation was the two training prompts; a `path` file
without validation rows still loads train and test, and load("validation") names the missing rows.
Every row of the file is checked when the task is built, before any model loads: a malformed row
is a TaskDataError naming `file:line`, the field and the fix.

Scoring: reward = -|len(completion.strip()) - len(target)|; `extract_answer` is the stripped
completion; `is_correct` is a case-insensitive exact match with the target (a strict accuracy
that reward alone does not optimise).

    python -m pytest tests/test_task_conciseness.py -q
"""
from __future__ import annotations

from pathlib import Path

import datasets

from tasks.base import (DATA_DIR, TaskDataError, check_count, json_kind, read_jsonl, row_error,
                        user_path)

PAPER_REWARD_FLOOR = -2000.0  # maps to 0 in the paper's Table 2
DEFAULT_FILE = DATA_DIR / "conciseness" / "prompts.jsonl"


def normalised_reward(r: float) -> float:
    """The paper's Table 2 scale: -2000 -> 0, 0 -> 1.

    >>> normalised_reward(-2000), normalised_reward(0.0), normalised_reward(-50)
    (0.0, 1.0, 0.975)
    """
    return 1.0 + r / -PAPER_REWARD_FLOOR


class Conciseness:
    """The conciseness task (see the module docstring).

    Args:
        version: bump when scores change.
        n_eval: use at most this many test/validation prompts (None = all).
        max_new_tokens: completion length for evaluation and training.
        path: a jsonl file of {"split": "train"|"validation"|"test", "prompt", "target"}, instead
            of the shipped set.
        normalise: report (and train on) the paper's Table 2 scale, 1 + r/2000, instead of r.
            The map is affine with a positive slope, so ES's z-scores and GRPO's group-normalised
            advantages are unchanged by it.

    Raises:
        TaskDataError: a bad setting, a missing file or a malformed row (named `file:line` with
            the fix), from the constructor: every row is checked there, before any model loads.
    """

    name = "conciseness"
    normalised_reward = staticmethod(normalised_reward)

    def __init__(self, version: int = 1, n_eval: int | None = None, max_new_tokens: int = 128,
                 path: str | None = None, normalise: bool = False):
        check_count("n_eval", n_eval)
        self.version, self.n_eval, self.max_new_tokens = version, n_eval, max_new_tokens
        self.path, self.normalise = path, normalise
        self._path = user_path(path, "a conciseness prompt file") if path else DEFAULT_FILE
        self._rows = _read_rows(self._path)  # every row, checked now (before any model loads)

    def load(self, split: str) -> datasets.Dataset:
        """Rows with `prompt` and `target` of the rows with that split (module docstring)."""
        if split not in ("train", "validation", "test"):
            raise TaskDataError(f"split {split!r} is unknown; use train, validation or test")
        rows = [{"prompt": r["prompt"], "target": r["target"]} for r in self._rows if r["split"] == split]
        if not rows:
            raise TaskDataError(f"{self._path}: no rows with split={split!r}; add at least one"
                                + (" (a prompt that is in neither train nor test)" if split == "validation" else ""))
        if split != "train" and self.n_eval:
            rows = rows[:self.n_eval]
        return datasets.Dataset.from_list(rows)

    def gold_completion(self, target: str, **_) -> str:
        return target

    def extract_answer(self, text: str) -> str | None:
        """The stripped completion, or None when it is empty."""
        return text.strip() or None

    def is_correct(self, completion: str, target: str, **_) -> bool:
        """Case-insensitive exact match of the stripped completion with `target`."""
        return completion.strip().casefold() == target.strip().casefold()

    def reward(self, completions: list[str], target: list[str], **kwargs) -> list[float]:
        """TRL-style reward: minus the character-length difference from the target answer.

        >>> Conciseness().reward(["Jupiter", "The largest planet is, of course, Jupiter!", ""],
        ...                      target=["Jupiter"] * 3)
        [0.0, -35.0, -7.0]
        """
        pairs = zip(completions, target, strict=True)
        raw = [0.0 - abs(len(c.strip()) - len(t)) for c, t in pairs]  # 0.0 - 0 is 0.0, not -0.0
        return [normalised_reward(r) for r in raw] if self.normalise else raw


def _read_rows(path: Path) -> list[dict]:
    """Validated rows {"split", "prompt", "target"}; a bad one is named `path:line`."""
    fix = 'each row needs "split" ("train", "validation" or "test") and string "prompt" and "target"'
    rows, first = [], {}
    for i, r in read_jsonl(path, "conciseness prompt"):
        if not isinstance(r, dict):
            raise row_error(path, i, f"the row is {json_kind(r)}, not an object", fix)
        if r.get("split") not in ("train", "validation", "test"):
            raise row_error(path, i, f"field `split` is {_describe(r, 'split')}", fix)
        for field in ("prompt", "target"):
            if not isinstance(r.get(field), str):
                raise row_error(path, i, f"field `{field}` is {_describe(r, field)}", fix)
        split, line = first.setdefault(r["prompt"], (r["split"], i))
        if split != r["split"]:  # splits must be disjoint: a selection or test prompt seen in training leaks
            raise row_error(path, i, f"the prompt is also a {split} prompt (line {line})",
                            "a prompt belongs to one split only; delete or reword one of them")
        rows.append(r)
    return rows


def _describe(row: dict, field: str) -> str:
    if field not in row:
        return "missing"
    text = repr(row[field])
    return text if len(text) <= 40 else text[:37] + "..."
