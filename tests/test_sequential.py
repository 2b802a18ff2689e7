"""Tests for methods/sequential.py: one budget split between two stages on one ledger.

    python -m pytest tests/test_sequential.py -q

Fast tests use toy stages that charge the ledger step by step (the budget arithmetic, one close,
the stage-1 checkpoint); the end-to-end GRPO -> ES and ES -> GRPO runs on a tiny model are slow.
"""
from __future__ import annotations

import pytest
import torch
from hydra.utils import instantiate

from harness.core.budget import BudgetError, Ledger
from harness.runner.schema import validate
from methods.es import ES
from methods.grpo import GRPO
from methods.sequential import Sequential, SequentialConfig


class Toy:
    """A stage that adds `delta` to every weight and charges 10 FLOPs and 10 samples per step until the ledger
    stops it (so it runs under any budget kind)."""

    def __init__(self, name, delta):
        self.name, self.delta, self.calls, self.limits = name, delta, 0, []

    def train(self, policy, task, ledger, run_dir):
        self.calls += 1
        self.limits.append(ledger.limit)
        steps = 0
        while not ledger.exhausted:
            with torch.no_grad():
                for p in policy.model.parameters():
                    p.add_(self.delta)
            ledger.step(10.0, 10, 0.5, 0.0, stage=self.name)
            steps += 1
        ledger.close()
        return {"steps": steps, "resumed_from": 0}


class Closes:
    def __init__(self):
        self.n = 0

    def __call__(self, ledger, stats):
        pass

    def close(self, ledger):
        self.n += 1


def toy_sequential(split=0.3, split_by=None):
    a, b = Toy("a", 1.0), Toy("b", 100.0)
    return Sequential(order=["a", "b"], split=split, split_by=split_by, stages={"a": a, "b": b}), a, b


def test_budget_split_one_ledger_one_close(tmp_path, tiny_policy):
    seq, a, b = toy_sequential(0.3)
    ledger, closes = Ledger(limit=100, kind="samples"), Closes()
    ledger.listeners.append(closes)
    out = seq.train(tiny_policy(), None, ledger, tmp_path)
    assert a.limits == [30] and b.limits == [100]  # stage 1 sees split x budget, stage 2 the whole limit
    assert [s.extras["stage"] for s in ledger.history] == ["a"] * 3 + ["b"] * 7  # stage 2 spends the rest
    assert ledger.limit == 100 and ledger.samples == 100 and closes.n == 1
    assert out["switch"]["samples"] == 30 and [s["method"] for s in out["stages"]] == ["a", "b"]


@pytest.mark.parametrize("split, limit, first", [(0.5, 300, 150), (0.3, 10, 3), (0.3, 7, 2), (0.01, 10, 1),
                                                (0.99, 10, 9)])
def test_an_updates_budget_is_split_in_whole_updates(tmp_path, tiny_policy, split, limit, first):
    """NOTE-076 splits the update budget: the first stage gets round(split x updates), at least one each."""
    seq, a, b = toy_sequential(split, split_by="updates")
    ledger = Ledger(limit=limit, kind="updates")
    out = seq.train(tiny_policy(), None, ledger, tmp_path)
    stages = [s.extras["stage"] for s in ledger.history]
    assert stages == ["a"] * first + ["b"] * (limit - first) and a.limits == [first] and ledger.limit == limit
    assert out["switch"]["steps"] == first and out["split_by"] == "updates"
    assert (ledger.flops, ledger.samples) == (10.0 * limit, 10 * limit)   # both still recorded


def test_the_flops_split_is_kept_as_an_option(tmp_path, tiny_policy):
    seq, a, b = toy_sequential(0.3, split_by="flops")
    ledger = Ledger(limit=100.0, kind="flops")
    out = seq.train(tiny_policy(), None, ledger, tmp_path)
    assert a.limits == [30.0] and out["switch"]["flops"] == 30.0 and ledger.flops == 100.0


@pytest.mark.parametrize("split_by, kind, limit, message", [
    ("updates", "flops", 1e12, "method.split_by=updates splits the budget in updates but budget.kind=flops; "
                               "write budget=updates budget.updates=N, or method.split_by=flops"),
    ("flops", "updates", 10, "budget.kind=updates; write budget.kind=flops, or method.split_by=updates"),
    (None, "updates", 1, "budget.updates=1 cannot be split between two stages; give at least 2"),
])
def test_a_split_the_budget_cannot_make_fails_before_training(tmp_path, tiny_policy, split_by, kind, limit, message):
    seq, a, b = toy_sequential(0.5, split_by=split_by)
    with pytest.raises(BudgetError, match=message):
        seq.train(tiny_policy(), None, Ledger(limit=limit, kind=kind), tmp_path)
    assert a.calls == b.calls == 0


def test_grpo_then_es_split_updates_on_a_tiny_model(tmp_path, tiny_policy, toy_task):
    stages = {"grpo": GRPO(prompts_per_step=4, num_generations=4, max_completion_length=8, learning_rate=1e-3,
                           beta=0.0, checkpoint_every=0),
              "es": ES(population=4, prompts_per_iteration=4, sigma=0.1, alpha=0.05, generation_batch_size=4)}
    seq = Sequential(order=["grpo", "es"], split=0.4, split_by="updates", stages=stages)
    ledger = Ledger(limit=5, kind="updates")   # 2 GRPO optimizer steps, then 3 ES iterations
    out = seq.train(tiny_policy(eval_mode=False), toy_task("digits", n_train=32), ledger, tmp_path)
    assert [s["steps"] for s in out["stages"]] == [2, 3] and ledger.steps == 5 and out["switch"]["steps"] == 2
    assert ledger.samples == 2 * 16 + 3 * 16 and ledger.flops > 0


def test_rerun_skips_a_finished_first_stage(tmp_path, tiny_policy):
    pol = tiny_policy()
    before = [p.detach().clone() for p in pol.model.parameters()]
    seq, a, b = toy_sequential(0.3)
    seq.train(pol, None, Ledger(limit=40, kind="samples"), tmp_path)
    assert (tmp_path / "sequential_stage1" / "state.json").is_file()
    rerun, a2, b2 = toy_sequential(0.3)
    pol2 = tiny_policy()
    ledger = Ledger(limit=100, kind="samples")  # a larger budget: the second stage continues
    out = rerun.train(pol2, None, ledger, tmp_path)
    assert a2.calls == 0 and b2.calls == 1 and out["stages"][0]["skipped"]
    assert ledger.samples == 100 and ledger.history[0].extras["stage"] == "a"  # stage-1 history restored
    first = next(pol2.model.parameters())
    torch.testing.assert_close(first, before[0] + 2.0 + 100.0 * 8)  # a: 2 steps (of 0.3 x 40, restored), b: 8
    with pytest.raises(ValueError, match="split=0.3, but this run uses"):
        toy_sequential(0.5)[0].train(tiny_policy(), None, Ledger(limit=100, kind="samples"), tmp_path)


@pytest.mark.parametrize("kw, message", [
    (dict(order=["grpo"]), "two different stages"),
    (dict(order=["es", "es"]), "two different stages"),
    (dict(order=["grpo", "es"], stages={"es": {}}), "names 'grpo' but method.stages has only es"),
    (dict(split=1.0, stages={"grpo": {}, "es": {}}), "split=1.0 must be in"),
    (dict(split_by="steps", stages={"grpo": {}, "es": {}}), "split_by='steps' is unknown"),
])
def test_config_errors_name_the_fix(kw, message):
    with pytest.raises(ValueError, match=message):
        SequentialConfig(**kw)


def test_composes_from_the_method_configs(compose):
    cfg = compose("method=sequential", "model=zoo-100k", "method.order=[es,grpo]", "method.stages.es.sigma=0.003",
                  "method.split=0.25")
    validate(cfg)  # harness/runner/schema.py accepts the composed run config
    seq = instantiate(cfg.method)
    assert [type(m) for m in seq.stages] == [ES, GRPO]
    assert seq.stages[0].config.sigma == 0.003 and seq.config.split == 0.25
    assert seq.label() == "sequential split=0.25"


@pytest.mark.slow
@pytest.mark.parametrize("order", [["grpo", "es"], ["es", "grpo"]])
def test_grpo_and_es_share_one_budget(tmp_path, tiny_policy, toy_task, order):
    stages = {"grpo": GRPO(prompts_per_step=4, num_generations=4, max_completion_length=8, learning_rate=1e-3,
                           beta=0.0, checkpoint_every=0),
              "es": ES(population=4, prompts_per_iteration=4, sigma=0.1, alpha=0.05, generation_batch_size=4)}
    seq = Sequential(order=order, split=0.5, stages=stages)
    pol = tiny_policy()
    before = [p.detach().clone() for p in pol.model.parameters()]
    ledger = Ledger(limit=64, kind="samples")  # 4 GRPO steps or 4 ES iterations of 16 samples
    out = seq.train(pol, toy_task("digits", n_train=32), ledger, tmp_path)
    assert ledger.samples == 64 and out["switch"]["samples"] == 32
    assert [s["method"] for s in out["stages"]] == order and all(s["steps"] > 0 for s in out["stages"])
    assert any(not torch.equal(p, b) for p, b in zip(pol.model.parameters(), before))
