"""The method interface, and `base` (no training: the "Original" column).

A method is one module in methods/ plus one YAML in conf/method/ whose `_target_` names its class;
the YAML's other keys are the constructor's keyword arguments (the method's hyperparameters).

`train(policy, task, ledger, run_dir)` trains `policy.model` in place on `task.load("train")` and
returns a small summary dict. It must charge `ledger` after every step with the FLOPs of the
tokens it really processed (harness/flops.py) and the number of completions it scored, and stop
at the first step boundary where `ledger.exhausted` is true. Per-step logs go to
`run_dir/train_log.jsonl` (one JSON object per step) and one progress line per step to stdout.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

from harness.budget import Ledger
from harness.policy import Policy
from tasks.base import Task


class Method(Protocol):
    name: str                    # the method's name in records and tables
    label_keys: tuple[str, ...]  # hyperparameters shown in a run's default label, e.g. ("sigma", "alpha")
    trains: bool                 # False: the untrained reference row (deltas are measured against it)

    def train(self, policy: Policy, task: Task, ledger: Ledger, run_dir: Path) -> dict: ...


class Base:
    """No training: evaluates the model as it is (the paper's "Original")."""

    name = "base"
    label_keys = ()  # the hyperparameters a table label shows
    trains = False

    def train(self, policy: Policy, task: Task, ledger: Ledger, run_dir: Path) -> dict:
        return {"steps": 0}


def log_step(run_dir: Path, row: dict) -> None:
    """Append one step's stats to run_dir/train_log.jsonl (line-buffered, so a crash keeps the log)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "train_log.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")
