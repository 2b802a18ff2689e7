"""budget.kind=updates (harness/core/budget.py): a run stops after exactly K updates, FLOPs and samples
still recorded; bad input fails in one line that names the fix.

    python -m pytest tests/test_budget_updates.py -q

The ES and GRPO runs are 2-3 steps of a tiny random zoo-100k-shaped model (tests/conftest.py).
"""
from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from harness.core.budget import BudgetError, Ledger, method_problem, split_problem, unreachable
from harness.core.steplog import make_ledger
from harness.runner.schema import ConfigError, validate


def test_the_ledger_counts_steps_and_still_records_flops_and_samples():
    ledger = Ledger(limit=3, kind="updates")
    for _ in range(3):
        assert not ledger.exhausted
        ledger.step(flops=1e9, samples=16)
    assert ledger.exhausted and ledger.spent == ledger.steps == 3 and ledger.fraction == 1.0
    assert (ledger.flops, ledger.samples) == (3e9, 48)
    ledger.check_step_fits(1e30, "ES iteration")   # one step is one update, whatever it costs in FLOPs
    again = Ledger(limit=3, kind="updates")
    again.load_state_dict(ledger.state_dict())
    assert again.exhausted and again.flops == 3e9
    with pytest.raises(BudgetError, match="budget is in updates but this run's is in flops"):
        Ledger(limit=1e12).load_state_dict(ledger.state_dict())


@pytest.mark.parametrize("limit, message", [
    (0, "budget limit must be > 0, got 0; set budget.updates"),
    (-5, "budget limit must be > 0"),
    (2.5, "budget.updates=2.5 is not a whole number of updates; write e.g. budget.updates=300"),
])
def test_a_ledger_refuses_an_impossible_updates_budget(limit, message):
    with pytest.raises(BudgetError, match=message):
        Ledger(limit=limit, kind="updates")


def test_a_step_cap_below_the_updates_budget_warns_with_one_update_per_step():
    line = unreachable("updates", 500, 300, "method.max_iterations", most_per_step=6000.0)
    assert line.startswith("budget.updates=500 cannot be spent: method.max_iterations=300 steps buy at most 300 updates")
    assert unreachable("updates", 300, 300, "method.max_iterations", most_per_step=1e12) is None


@pytest.mark.parametrize("overrides, message", [
    (["method=es", "budget=updates", "budget.updates=0"], "budget.updates=0 is not a positive whole number"),
    (["method=es", "budget=updates", "budget.updates=-3"], "budget.updates=-3 is not a positive whole number"),
    (["method=es", "budget=updates", "budget.updates=2.5"], "budget.updates=2.5 is not a positive whole number"),
    (["method=es", "budget.kind=updates"], "budget.updates=None .*write e.g. budget=updates budget.updates=300"),
    (["method=es", "budget.kind=steps"], "budget.kind='steps' is unknown; use budget.kind=flops, samples or updates"),
    (["method=sequential", "method.split_by=updates"], "method.split_by=updates splits the budget in updates but "
                                                      "budget.kind=flops; write budget=updates budget.updates=N"),
])
def test_bad_updates_configs_fail_at_load_naming_the_fix(compose, overrides, message):
    with pytest.raises(ConfigError, match=message):
        validate(compose(*overrides))


def test_updates_configs_that_work_validate(compose):
    for overrides in (["method=es"], ["method=grpo"], ["method=ppo"], ["method=base"],
                      ["method=sequential", "method.split_by=updates"], ["method=sequential"]):
        validate(compose("budget=updates", "budget.updates=7", *overrides))
    validate(compose("method=sequential", "method.split_by=flops"))   # the FLOPs split, kept as an option


def test_a_method_that_cannot_count_updates_is_refused():
    plugin = OmegaConf.create({"_target_": "my_plugin.Anneal"})
    line = method_problem("updates", plugin)
    assert line.startswith("budget.kind=updates: my_plugin.Anneal has no known update count")
    assert line.endswith("use budget.kind=flops or budget.kind=samples")
    assert method_problem("flops", plugin) is None
    seq = OmegaConf.create({"_target_": "methods.sequential.Sequential", "order": ["grpo", "x"], "split_by": None,
                            "stages": {"grpo": {"_target_": "methods.grpo.GRPO"}, "x": plugin}})
    assert method_problem("updates", seq).startswith("method.stages.x: budget.kind=updates: my_plugin.Anneal")
    assert split_problem(None, "flops") is None and split_problem("updates", "updates") is None
    assert "unknown" in split_problem("steps", "updates")


def _log(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "train_log.jsonl").read_text().splitlines()]


def test_es_stops_after_exactly_k_updates(tmp_path, tiny_policy, toy_task):
    from methods.es import ES

    ledger = make_ledger("updates", 3, tmp_path, progress=False)
    out = ES(population=4, prompts_per_iteration=4, sigma=0.1, alpha=0.05, generation_batch_size=4).train(
        tiny_policy(), toy_task("digits", n_train=16), ledger, tmp_path)
    assert out["steps"] == ledger.steps == 3 and ledger.spent == 3
    assert ledger.samples == 3 * 4 * 4 and ledger.flops > 0   # recorded, not matched
    assert [r["step"] for r in _log(tmp_path)] == [1, 2, 3]


def test_grpo_stops_after_exactly_k_optimizer_steps(tmp_path, tiny_policy, toy_task):
    from methods.grpo import GRPO

    ledger = make_ledger("updates", 2, tmp_path, progress=False)
    out = GRPO(prompts_per_step=4, num_generations=4, max_completion_length=8, learning_rate=1e-3, beta=0.0,
               checkpoint_every=0).train(tiny_policy(eval_mode=False), toy_task("digits", n_train=32), ledger, tmp_path)
    assert out["steps"] == ledger.steps == 2 and ledger.spent == 2
    assert ledger.samples == 2 * 16 and ledger.flops > 0


def test_an_updates_budget_is_priced_by_the_completions_its_updates_score(compose):
    from harness.runner.pricing import update_samples

    assert update_samples(compose("method=es", "method.population=30", "method.prompts_per_iteration=200").method) == 6000
    assert update_samples(compose("method=grpo").method) == 8 * 8
    seq = compose("method=sequential", "method.split=0.25", "method.stages.es.population=10",
                  "method.stages.es.prompts_per_iteration=10")
    assert update_samples(seq.method) == pytest.approx(0.25 * 64 + 0.75 * 100)
