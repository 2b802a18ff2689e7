"""What happens to a training step once the ledger has charged it: `StepStats` and the listeners.

Every method calls `ledger.step(...)` (harness/core/budget.py) once per step; the ledger hands the
resulting `StepStats` to each listener, `listener(ledger, stats)`. Listeners may also define
`restored(ledger)` (a checkpoint was loaded: history is back to an earlier step) and
`close(ledger)` (training is over).

    JsonlLog(run_dir)           run_dir/train_log.jsonl, one StepStats per line
    Progress()                  step lines on stdout: the first, one per 5% of the budget, the last
    Tracker(kind, run_dir)      TensorBoard or W&B, every StepStats against FLOPs
    EvalEvery(fraction, fn, m)  evaluates the model each time the budget crosses a multiple of fraction
                                (the learning curve into ledger.evals; with rows=[...], e.g. token
                                entropy, into that list instead)

`make_ledger(...)` builds a ledger with the listeners a run asks for, in one call.
"""
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Callable

import torch


from harness.core.atomic import write_text_atomic
from harness.core.budget import BudgetError, Ledger, StepStats  # noqa: F401 - StepStats re-exported for listeners
from harness.core.errors import ConfigError
from harness.core.rng import rng_preserved


LOG_NAME = "train_log.jsonl"
LOGGERS = ("none", "tensorboard", "wandb")




class JsonlLog:
    """run_dir/train_log.jsonl: one JSON StepStats per line, appended and flushed per step.

    The first step a process logs rewrites the file from `ledger.history` (empty on a fresh run,
    the checkpoint's steps on a resumed one), so steps logged after the last checkpoint by a killed
    process are dropped instead of repeated.
    """

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOG_NAME
        self.synced = False

    def __call__(self, ledger: Ledger, stats: StepStats) -> None:
        if not self.synced:
            self.restored(ledger)
            return
        with open(self.path, "a") as f:
            f.write(json.dumps(stats.to_dict(), default=float) + "\n")

    def restored(self, ledger: Ledger) -> None:
        lines = "".join(json.dumps(s.to_dict(), default=float) + "\n" for s in ledger.history)
        write_text_atomic(self.path, lines)
        self.synced = True


PROGRESS_EXTRAS = ("loss", "kl", "policy_loss", "value_loss", "update_norm", "skipped")


LINES_PER_RUN = 20  # step lines a run prints: one per 1/20 of the budget, plus the first and the last


class Progress:
    """Step lines on stdout: step, reward, FLOPs and budget share, train time and ETA, key extras.

    One line for the first step, then one each time another 1/`lines` of the budget is spent, and the
    last step's when training ends: a GRPO run of 266 steps printed 266 lines, most of a quickstart's
    log, and now prints about 22. Every step stays in train_log.jsonl (JsonlLog)."""

    def __init__(self, prefix: str = "", lines: int = LINES_PER_RUN):
        self.prefix, self.lines = prefix, lines
        self.shown, self.pending = -1, None  # the last budget slot printed; the last step's line if not printed

    def __call__(self, ledger: Ledger, s: StepStats) -> None:
        extras = " ".join(f"{k} {_fmt(s.extras[k])}" for k in PROGRESS_EXTRAS if s.extras.get(k) is not None)
        std = "" if s.reward_std is None else f" ± {s.reward_std:.3f}"
        of = f"/{int(ledger.limit)}" if ledger.kind == "updates" else ""
        line = (f"{self.prefix}step {s.step:4d}{of} | reward {_fmt(s.reward_mean)}{std} | {extras} | "
                f"{s.flops:.3g} FLOPs, {s.samples} samples ({ledger.fraction:.0%} of the budget) | "
                f"{s.wall_s:.1f} s{eta(s.wall_s, ledger.fraction)}")
        slot = math.floor(ledger.fraction * self.lines + 1e-9)
        if slot <= self.shown:
            self.pending = line
            return
        if self.shown < 0:
            line += f" (a line per {1 / self.lines:.0%} of the budget and the last; every step: {LOG_NAME})"
        self.shown, self.pending = slot, None
        print(line, flush=True)

    def restored(self, ledger: Ledger) -> None:
        self.shown, self.pending = -1, None  # a resumed process says where it starts

    def close(self, ledger: Ledger) -> None:
        if self.pending:
            print(self.pending, flush=True)
            self.pending = None


def eta(elapsed_s: float, fraction: float) -> str:
    """', ETA 12 min' from the time so far and the share of the budget spent (steps cost alike)."""
    if not 0 < fraction < 1:
        return ""
    left = elapsed_s * (1 - fraction) / fraction
    return f", ETA {left / 60:.0f} min" if left >= 90 else f", ETA {left:.0f} s"


def _fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return str(x)
    return f"{x:.3g}" if abs(x) >= 1e-2 or x == 0 else f"{x:.2e}"


class Tracker:
    """Streams every StepStats (and evaluation) to TensorBoard or W&B with FLOPs as the x-axis.

    TensorBoard steps are 64-bit integers and a paper-scale run spends ~1e19 FLOPs, so the
    TensorBoard x-axis is FLOPs / `flops_unit` (default 1e6: MFLOPs, exact enough for the zoo's
    smallest models and room for 9e24 FLOPs). W&B plots against the float `train/flops` itself.
    Files go under run_dir/tensorboard/ledger (TRL's own metrics: run_dir/tensorboard/trl) or
    run_dir/wandb. W&B runs offline unless WANDB_MODE says otherwise, so nothing needs network.
    """

    def __init__(self, kind: str, run_dir: Path, flops_unit: float = 1e6):
        if kind not in LOGGERS[1:]:
            raise ValueError(f"logger={kind!r} is unknown; use one of {', '.join(LOGGERS)}")
        self.kind, self.run_dir, self.unit = kind, Path(run_dir), flops_unit
        self.writer, self.purge_step, self.wandb = None, None, None
        _require(kind)

    def __call__(self, ledger: Ledger, s: StepStats) -> None:
        scalars = {"step": s.step, "flops": s.flops, "samples": s.samples, "reward_mean": s.reward_mean,
                   "reward_std": s.reward_std, "wall_s": s.wall_s, "budget_fraction": ledger.fraction,
                   **_flatten(s.extras)}
        self._log("train", scalars, s.flops)

    def log_eval(self, row: dict) -> None:
        self._log("eval", {k: v for k, v in row.items() if k != "flops"}, row["flops"])

    def restored(self, ledger: Ledger) -> None:
        """Steps past the checkpoint that a killed process already logged are purged (TensorBoard)."""
        self.purge_step = round(ledger.flops / self.unit)

    def close(self, ledger: Ledger) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.wandb is not None:
            self.wandb.finish()

    def _log(self, prefix: str, scalars: dict, flops: float) -> None:
        scalars = {f"{prefix}/{k}": float(v) for k, v in scalars.items() if _is_number(v)}
        if self.kind == "tensorboard":
            writer, x = self._tb(), round(flops / self.unit)
            for tag, v in scalars.items():
                writer.add_scalar(tag, v, x)
            writer.flush()  # a killed run keeps its curves
        else:
            self._wandb().log({**scalars, "train/flops": float(flops)})

    def _tb(self):
        if self.writer is None:
            from torch.utils.tensorboard import SummaryWriter
            self.writer = SummaryWriter(str(self.run_dir / "tensorboard" / "ledger"), purge_step=self.purge_step)
        return self.writer

    def _wandb(self):
        if self.wandb is None:
            import wandb
            if wandb.run is None:
                wandb.init(project=os.environ.get("WANDB_PROJECT", "esbench"), name=self.run_dir.name,
                           dir=str(self.run_dir), mode=os.environ.get("WANDB_MODE", "offline"))
            wandb.define_metric("train/flops")
            for prefix in ("train", "eval"):
                wandb.define_metric(f"{prefix}/*", step_metric="train/flops")
            self.wandb = wandb
        return self.wandb


def _require(kind: str) -> None:
    """Fail at startup, in one line, when the tracker's package is missing (not after an hour of training)."""
    module = "tensorboard" if kind == "tensorboard" else "wandb"
    try:
        __import__(module)
    except ImportError:
        raise ConfigError(f"logger={kind} needs the {module} package: pip install {module}") from None


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v))


def _flatten(extras: dict, prefix: str = "") -> dict:
    """Numbers of `extras`, one level of nested dicts as parent/child (GRPO's FLOPs by part)."""
    out = {}
    for k, v in extras.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}/"))
        elif _is_number(v):
            out[f"{prefix}{k}"] = v
    return out


class EvalEvery:
    """Evaluates the model each time the budget share crosses a multiple of `fraction`, and at the end.

    Runs inside `ledger.step`, i.e. once the step's update is applied (ES: updated, unperturbed
    weights; GRPO/PPO: after the optimizer step). The model is put in eval mode and the RNG
    states are saved and restored around `fn`, so evaluating never changes training (a run with
    and without evaluations trains the same weights). Its time is not training time and its
    FLOPs are not charged; `fn()` may return them as a metric. Each evaluation appends
    {"step", "flops", "samples", "fraction", **fn(), "eval_s"} to `ledger.evals`, or to `rows` when given
    (a second measurement on its own schedule, e.g. token entropy: harness/analysis/entropy.py).
    """

    def __init__(self, fraction: float, fn: Callable[[], dict], model: torch.nn.Module, tracker: Tracker | None = None,
                 rows: list | None = None):
        if not 0 < fraction <= 1:
            raise ValueError(f"eval_every_fraction={fraction} must be in (0, 1], e.g. 0.1 for every 10% of the budget")
        self.fraction, self.fn, self.model, self.tracker = fraction, fn, model, tracker
        self.rows = rows
        self.done = 0  # multiples of `fraction` already evaluated

    def _rows(self, ledger: Ledger) -> list:
        return ledger.evals if self.rows is None else self.rows

    def _crossed(self, ledger: Ledger) -> int:
        return math.floor(ledger.fraction / self.fraction + 1e-9)

    def __call__(self, ledger: Ledger, s: StepStats) -> None:
        k = self._crossed(ledger)
        if k > self.done or (ledger.exhausted and not self._evaluated_at(ledger, s.step)):
            self.done = k
            self.evaluate(ledger)

    def restored(self, ledger: Ledger) -> None:
        self.done = self._crossed(ledger)

    def close(self, ledger: Ledger) -> None:
        """Training stopped (budget spent or a step cap): make sure the final weights are evaluated."""
        if ledger.steps and not self._evaluated_at(ledger, ledger.steps):
            self.evaluate(ledger)

    def _evaluated_at(self, ledger: Ledger, step: int) -> bool:
        rows = self._rows(ledger)
        return bool(rows) and rows[-1]["step"] == step

    def evaluate(self, ledger: Ledger) -> dict:
        was_training, t0 = self.model.training, time.perf_counter()
        self.model.eval()
        try:
            with rng_preserved():
                metrics = self.fn()
        finally:
            self.model.train(was_training)
        row = {"step": ledger.steps, "flops": ledger.flops, "samples": ledger.samples, "fraction": ledger.fraction,
               **metrics, "eval_s": time.perf_counter() - t0}
        self._rows(ledger).append(row)
        if self.tracker is not None:
            self.tracker.log_eval(row)
        return row


def make_ledger(budget_kind: str, limit: float | None, run_dir: Path, logger: str = "none",
                eval_fn: Callable[[], dict] | None = None, eval_every_fraction: float | None = None,
                model: torch.nn.Module | None = None, progress: bool = True) -> Ledger:
    """A ledger with its listeners: the JSONL log, the progress line, the tracker, periodic evaluation.

    Args:
        budget_kind: "flops" or "samples".
        limit: the budget in that unit.
        run_dir: where train_log.jsonl (and tracker files) go.
        logger: "none", "tensorboard" or "wandb".
        eval_fn: returns a dict of metrics for the model as it is (e.g. validation accuracy).
        eval_every_fraction: evaluate each time this share of the budget is spent (and at the end).
        model: the model `eval_fn` evaluates (switched to eval mode around it).
        progress: print step lines (Progress: about 20 per run).
    """
    if limit is None:
        raise BudgetError(f"budget.kind={budget_kind} but budget.{budget_kind} is not set; "
                          f"set it, e.g. budget.{budget_kind}=1e12")
    if logger not in LOGGERS:
        raise ValueError(f"logger={logger!r} is unknown; use one of {', '.join(LOGGERS)}")
    if (eval_fn is None) != (eval_every_fraction is None) or (eval_fn is not None and model is None):
        raise ValueError("periodic evaluation needs eval_fn, eval_every_fraction and model together")
    ledger = Ledger(float(limit), budget_kind, report_to=logger)
    tracker = Tracker(logger, run_dir) if logger != "none" else None
    ledger.listeners = [JsonlLog(run_dir)] + ([Progress()] if progress else []) + ([tracker] if tracker else [])
    if eval_fn is not None:
        ledger.listeners.append(EvalEvery(eval_every_fraction, eval_fn, model, tracker))
    return ledger
