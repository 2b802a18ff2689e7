"""`sequential`: one budget split between two methods run one after the other (GRPO then ES, or
ES then GRPO) on the same model and the same ledger.

NOTE-076 reads GRPO and ES as buying opposite ends of the pass@1/pass@k trade-off (claim C9, weak:
"sequential GRPO->ES buys both ends of the trade-off", as docs/claims.md words it) and splits the update
budget between the two stages; running both under one budget is the direct test. `method.order:
[grpo, es]` names the stages, `method.split` is the first stage's share of the budget, and each
stage's hyperparameters are its own method's config (conf/method/sequential.yaml pulls
conf/method/grpo.yaml and es.yaml under `method.stages`, so `method.stages.es.sigma=3e-3` overrides one).

The split is in the budget's unit. Under budget.kind=updates (conf/budget/updates.yaml) it splits
updates, as the note does: of budget.updates=300 at split 0.5, 150 GRPO optimizer steps, then 150 ES
iterations (the first stage's share rounded to a whole update, at least one for each stage). Under a
FLOPs (or samples) budget it splits FLOPs (samples), the option kept from before. `method.split_by`
states which one an experiment means (updates | flops | samples); null takes the budget's, and one
that differs from budget.kind is refused in one line (harness/core/budget.py split_problem).

Budget: the first stage runs with the ledger's limit temporarily lowered to its share, so it stops
exactly there (the usual ledger rule, harness/core/budget.py: its last step charged, and its update scaled,
pro rata). The second stage runs with the full
limit, i.e. on whatever budget remains. Both stages charge the one ledger, so FLOPs, samples, the
train log and learning curves run continuously across the switch; listeners are closed once, at the end.

Resume: when the first stage ends, its weights and the ledger state are saved atomically to
run_dir/sequential_stage1; a rerun finds them and skips straight to the second stage, which then
resumes from its own checkpoint (es_checkpoint or trl/) if it wrote one. GRPO's KL reference in the
second stage is the model it starts from (the ES-trained one).

    python -m harness method=sequential budget=updates budget.updates=300 method.order=[es,grpo] method.split=0.3
    python -m harness method=sequential method.split_by=flops          # split the default FLOPs budget
    python -m pytest tests/test_sequential.py -q
"""
from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from harness.core.atomic import write_text_atomic
from harness.core.budget import BudgetError, Ledger, split_problem
from harness.core.policy import Policy
from methods.base import ConfiguredMethod, fsync_file, latest_dir, save_dir_atomic
from methods.sequential_config import SEQUENTIAL_FACTS, SequentialConfig, stage_samples  # noqa: F401 - light
from tasks.base import Task

STAGE1 = "sequential_stage1"


def build_stage(name: str, spec):
    """A stage's method: kept as is when already built (Hydra instantiates nested _target_s), else built."""
    if hasattr(spec, "train"):
        return spec
    if hasattr(spec, "_metadata"):
        from omegaconf import OmegaConf
        spec = OmegaConf.to_container(spec, resolve=True)
    if not isinstance(spec, dict) or "_target_" not in spec:
        raise ValueError(f"method.stages.{name} must be a method config with _target_ (e.g. conf/method/{name}.yaml)")
    from hydra.utils import instantiate
    return instantiate(spec)


@contextmanager
def stage_budget(ledger: Ledger, limit: float):
    """The ledger with a lower limit (for the first stage)."""
    full = ledger.limit
    ledger.limit = limit
    try:
        yield ledger
    finally:
        ledger.limit = full


@contextmanager
def deferred_close(ledger: Ledger):
    """Stages' ledger.close() does nothing; the caller closes once after the last stage (one final
    evaluation, one tracker flush), even when a stage returns early without closing."""
    ledger.close = lambda: None
    try:
        yield ledger
    finally:
        del ledger.close  # the class's close again


class Sequential(ConfiguredMethod):
    """Stage 1 on split x budget, then stage 2 on the rest (see the module docstring)."""

    name = "sequential"
    label_keys = ("split",)
    trains = True
    config_class = SequentialConfig
    facts = SEQUENTIAL_FACTS  # methods/sequential_config.py: read there without torch

    def __init__(self, **hparams):
        super().__init__(**hparams)
        self.stages = [build_stage(n, self.config.stages[n]) for n in self.config.order]
        self.config.stages = {}  # built: the methods hold them (records keep the composed config)

    @property
    def weights_in_driver(self) -> bool:
        return all(getattr(m, "weights_in_driver", True) for m in self.stages)

    def train(self, policy: Policy, task: Task, ledger: Ledger, run_dir: Path) -> dict:
        c, run_dir = self.config, Path(run_dir)
        first, second = self.stages
        line = split_problem(c.split_by, ledger.kind)
        if line:
            raise BudgetError(line)
        summaries = []
        with deferred_close(ledger):
            if self._load_stage1(policy, ledger, run_dir):
                summaries.append({"method": first.name, "skipped": "finished in an earlier run"})
            else:
                with stage_budget(ledger, self.first_share(ledger)):
                    summaries.append({"method": first.name, **first.train(policy, task, ledger, run_dir)})
                self._save_stage1(policy, ledger, run_dir)
            switch = {"flops": ledger.flops, "samples": ledger.samples, "steps": ledger.steps}
            summaries.append({"method": second.name, **second.train(policy, task, ledger, run_dir)})
        ledger.close()
        return {"steps": ledger.steps, "resumed_from": summaries[0].get("resumed_from", 0), "flops": ledger.flops,
                "samples": ledger.samples, "wall_s": ledger.wall_s, "order": list(c.order), "split": c.split,
                "split_by": ledger.kind, "switch": switch, "stages": summaries}

    def first_share(self, ledger: Ledger) -> float:
        """The first stage's limit: split x the budget; whole updates under an updates budget (an update is
        never split, so the ledger would stop at the first boundary past 0.3 x 218 = 65.4: silently 66)."""
        share = self.config.split * ledger.limit
        if ledger.kind != "updates":
            return share
        if ledger.limit < 2:
            raise BudgetError(f"budget.updates={ledger.limit:g} cannot be split between two stages; "
                              "give at least 2 updates")
        return float(min(max(round(share), 1), ledger.limit - 1))

    # ---- the stage-1 checkpoint: weights + ledger, swapped in atomically ----
    def _save_stage1(self, policy: Policy, ledger: Ledger, run_dir: Path) -> None:
        state = {"order": list(self.config.order), "split": self.config.split, "ledger": ledger.state_dict()}

        def write(tmp: Path) -> None:
            save_file({n: p.detach().cpu().contiguous() for n, p in policy.model.named_parameters()},
                      str(tmp / "model.safetensors"))
            fsync_file(tmp / "model.safetensors")
            write_text_atomic(tmp / "state.json", json.dumps(state) + "\n")  # last: marks it complete

        save_dir_atomic(run_dir / STAGE1, write)

    @torch.no_grad()
    def _load_stage1(self, policy: Policy, ledger: Ledger, run_dir: Path) -> bool:
        path = latest_dir(run_dir / STAGE1, "state.json")
        if path is None:
            return False
        state = json.loads((path / "state.json").read_text())
        if state["order"] != list(self.config.order) or state["split"] != self.config.split:
            raise ValueError(f"{path} was written with order={state['order']} split={state['split']}, but this run "
                             f"uses order={self.config.order} split={self.config.split}; use those or a fresh run_dir")
        weights = load_file(str(path / "model.safetensors"))
        for n, p in policy.model.named_parameters():
            p.copy_(weights[n])
        ledger.load_state_dict(state["ledger"])
        print(f"sequential: first stage ({self.config.order[0]}) finished before; resuming at the second", flush=True)
        return True
