"""The one TrainerCallback GRPO and PPO share: charge the ledger per optimizer step, stop, checkpoint.

TRL trainers report a step in two events whose order differs: GRPOTrainer (the HF Trainer loop)
calls `on_step_end`, then logs the step's metrics (`on_log`); PPOTrainer logs first, then calls
`on_step_end`. The callback pairs the two for the same `global_step` and calls `ledger.step`
once both are in, so every StepStats carries the real cost (from the method's `cost` function,
which counts tokens) and TRL's own metrics (from `metrics`). A step whose log never comes (a
logging interval > 1, the end of training) is still charged, without metrics.

The stop rule (harness/core/budget.py): the step that spends the budget is charged pro rata, and its update
scaled to match. The step's cost is known once its completions are generated and scored, before its optimizer
runs: `on_pre_optimizer_step` (the HF Trainer loop calls it after gradient clipping, right before
`optimizer.step()`; PPOTrainer never does, so methods/ppo.py calls it from a pre-step hook on the optimizer)
prices the step there, asks `ledger.fraction_of` for the share f of it the budget has left and, when f < 1,
multiplies every parameter group's learning rate by f for the step's optimizer step(s) (AdamW's change of the
weights, weight decay included, is proportional to it; the moments are updated as usual, and no step follows);
the rates are restored after the optimizer step (`on_optimizer_step`, or at `on_step_end` for PPOTrainer, whose
constant schedule has reset them by then) and the step is charged with `fraction=f`. A trainer that never calls
the hook is priced at `on_step_end` and charged whole (the old rule: it overshoots by part of a step).

Stopping: at the step boundary where the ledger is exhausted the callback sets
`control.should_training_stop`; PPOTrainer never reads it, so with `raise_when_spent` it raises
`BudgetSpent` instead, which the method catches (the update is complete at that point).

Data parallelism (accelerate launch, torchrun): every rank runs this callback. The methods' cost
functions gather every rank's token counts first (harness.core.distributed.gather_ints), so each rank
charges the same global step; `_commit` then checks that all ranks hold the same totals (a rank
that diverged would stop at another step and hang the others in a collective) and only rank 0
writes checkpoint ledger files.

Checkpoints (every `checkpoint_every` ledger steps, never once the budget is spent: a finished
run's weights are its result, not a restart point): the callback calls `checkpoint(control,
state)`. GRPO's asks TRL to save (`control.should_save`) and `on_save` then writes the ledger's
state beside TRL's files, atomically and last, so a checkpoint folder counts as complete only
once ledger.json is in it; older checkpoint folders are removed after that, never before.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Callable

import torch
from transformers import TrainerCallback

from harness.core.budget import Ledger
from harness.core.distributed import is_main_process, world_size
from harness.core.atomic import write_text_atomic

LEDGER_FILE = "ledger.json"
_CKPT = re.compile(r"^checkpoint-(\d+)$")

# cost(args, state) -> (flops, samples, extras); metrics(logs) -> {"reward_mean", "reward_std", **extras}
Cost = Callable[..., tuple[float, int, dict]]
Metrics = Callable[[dict], dict]


class BudgetSpent(Exception):
    """Raised at an update boundary once the ledger is exhausted, for trainers that ignore should_training_stop."""


class LedgerCallback(TrainerCallback):
    """Charges `ledger` once per optimizer step (see the module docstring)."""

    def __init__(self, ledger: Ledger, cost: Cost, metrics: Metrics, *, checkpoint_every: int,
                 checkpoint: Callable | None = None, raise_when_spent: bool = False):
        self.ledger, self.cost, self.metrics = ledger, cost, metrics
        self.checkpoint_every, self.checkpoint, self.raise_when_spent = checkpoint_every, checkpoint, raise_when_spent
        self._charge: tuple[int, tuple, float] | None = None  # (global_step, cost, f) awaiting the step's log
        self._logs: tuple[int, dict] | None = None  # (global_step, logs) awaiting the step's cost
        self._priced: tuple[tuple, float] | None = None  # (cost, f) of the step whose optimizer is about to run
        self._rates: tuple[object, list] | None = None  # (optimizer, its groups' learning rates) while scaled by f

    def on_train_begin(self, args, state, control, **kwargs):
        self.ledger.start_clock()

    def on_pre_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
        """Price the step before its (first) optimizer step; its last step's learning rate x f (module docstring)."""
        if self._priced is not None:  # a later optimizer step of the same update (PPO's epochs and minibatches)
            return
        if self._charge is not None:  # the previous step's log never came: charge it first, so f sees it
            self._commit(state, control, {})
        cost = self.cost(args, state)
        fraction = self.ledger.fraction_of(cost[0], cost[1])
        self._priced = (cost, fraction)
        if fraction < 1.0 and optimizer is not None:
            self._rates = (optimizer, [g["lr"] for g in optimizer.param_groups])
            for group in optimizer.param_groups:
                group["lr"] = group["lr"] * fraction

    def on_optimizer_step(self, args, state, control, **kwargs):
        self._restore_rates()

    def on_step_end(self, args, state, control, **kwargs):
        self._restore_rates()
        if self._charge is not None:  # the previous step's log never came: charge it without metrics
            self._commit(state, control, {})
        # priced before its optimizer step (f applied), or here by a trainer without that hook (charged whole)
        cost, fraction = self._priced if self._priced is not None else (self.cost(args, state), 1.0)
        self._priced = None
        self._charge = (state.global_step, cost, fraction)
        self._commit_if_complete(state, control)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "train_runtime" in logs:  # the end-of-training summary, not a step
            return
        self._logs = (state.global_step, logs)
        self._commit_if_complete(state, control)

    def on_train_end(self, args, state, control, **kwargs):
        if self._charge is not None:  # a step whose log never came
            self._commit(state, control, {})

    def on_save(self, args, state, control, **kwargs):
        """TRL wrote checkpoint-<global_step>; add the ledger state (marks it complete), drop older ones."""
        if not is_main_process():  # rank 0 writes the ledger and removes old checkpoints
            return
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        write_text_atomic(folder / LEDGER_FILE, json.dumps({"ledger": self.ledger.state_dict()}) + "\n")
        for old in checkpoints(Path(args.output_dir)):
            if old != folder:
                shutil.rmtree(old, ignore_errors=True)

    def _commit_if_complete(self, state, control) -> None:
        if self._charge is not None and self._logs is not None and self._logs[0] == self._charge[0]:
            self._commit(state, control, self._logs[1])

    def _restore_rates(self) -> None:
        if self._rates is not None:
            optimizer, rates = self._rates
            for group, lr in zip(optimizer.param_groups, rates):
                group["lr"] = lr
            self._rates = None

    def _commit(self, state, control, logs: dict) -> None:
        (flops, samples, extras), fraction = self._charge[1], self._charge[2]
        self._charge, self._logs = None, None
        fields = {**extras, **(self.metrics(logs) if logs else {})}
        reward_mean, reward_std = fields.pop("reward_mean", None), fields.pop("reward_std", None)
        self.ledger.step(flops, samples, reward_mean, reward_std, executed_flops=fields.pop("executed_flops", None),
                         fraction=fraction, **fields)
        check_ranks_agree(self.ledger)
        if self.ledger.exhausted:
            control.should_training_stop = True
            if self.raise_when_spent:
                raise BudgetSpent
        elif self.checkpoint_every and self.checkpoint and self.ledger.steps % self.checkpoint_every == 0:
            self.checkpoint(control, state)


def check_ranks_agree(ledger: Ledger) -> None:
    """Under data parallelism, raise unless every rank holds the same totals (so all stop at the same step)."""
    if world_size() == 1 or not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return
    mine = (ledger.steps, ledger.flops, ledger.samples)
    every: list = [None] * world_size()
    torch.distributed.all_gather_object(every, mine)
    if any(t != mine for t in every):
        raise RuntimeError(f"ranks disagree on the ledger (steps, flops, samples): {every}; the cost function "
                           "must charge the gathered counts of every rank")


def checkpoints(output_dir: Path) -> list[Path]:
    """TRL's checkpoint-<step> folders under output_dir, oldest first."""
    if not output_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in output_dir.iterdir() if (m := _CKPT.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found)]


def last_complete_checkpoint(output_dir: Path) -> Path | None:
    """The newest checkpoint folder holding ledger.json (one without it was cut short by a kill)."""
    done = [p for p in checkpoints(output_dir) if (p / LEDGER_FILE).is_file()]
    return done[-1] if done else None


def restore_ledger(ledger: Ledger, checkpoint: Path) -> None:
    ledger.load_state_dict(json.loads((checkpoint / LEDGER_FILE).read_text())["ledger"])


def report_to(ledger: Ledger) -> list[str]:
    """TRL's `report_to`: the ledger's tracker, so TRL's native metrics land beside the ledger's.

    W&B is kept offline unless WANDB_MODE says otherwise, so no run needs network.
    """
    if ledger.report_to == "wandb":
        os.environ.setdefault("WANDB_MODE", "offline")
        os.environ.setdefault("WANDB_PROJECT", "esbench")
    return [] if ledger.report_to == "none" else [ledger.report_to]


@contextlib.contextmanager
def tensorboard_dir(run_dir: Path):
    """TRL's TensorBoard callback reads its folder from TENSORBOARD_LOGGING_DIR when the trainer is built."""
    old = os.environ.get("TENSORBOARD_LOGGING_DIR")
    os.environ["TENSORBOARD_LOGGING_DIR"] = str(Path(run_dir) / "tensorboard" / "trl")
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TENSORBOARD_LOGGING_DIR", None)
        else:
            os.environ["TENSORBOARD_LOGGING_DIR"] = old
