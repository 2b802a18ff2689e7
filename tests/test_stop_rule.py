"""The stop rule, the same for every method (harness/core/budget.py): the step that spends the budget is
charged pro rata, f = the share of its cost the budget had left, and its update is scaled by f.

    python -m pytest tests/test_stop_rule.py -q

Each method runs twice on the tiny zoo model: once in whole steps (an updates budget, the old rule), once
under a FLOPs budget that ends halfway through the last step. Runs are deterministic, so the steps before the
last are identical, and the last one's weight change must be f times the whole step's from the same
weights: a method that charged f but applied the whole update (or the reverse) fails here.
"""
from __future__ import annotations

import json

import pytest
import torch

from harness.core.budget import Ledger
from harness.core.chartok import build_char_tokenizer
from harness.core.steplog import make_ledger

torch.set_num_threads(1)


# ---- the ledger ----
def test_a_step_that_fits_is_whole_and_the_last_is_charged_pro_rata():
    ledger = Ledger(limit=10.0)
    assert ledger.fraction_of(4.0, 8) == 1.0
    ledger.step(4.0, 8)
    ledger.step(4.0, 8, executed_flops=5.0)
    f = ledger.fraction_of(4.0, 8)
    assert f == pytest.approx(0.5) and not ledger.exhausted
    stats = ledger.step(4.0, 8, executed_flops=5.0, fraction=f)
    assert ledger.flops == ledger.limit and ledger.exhausted and ledger.steps == 3
    assert ledger.samples == 24  # a FLOPs budget: every completion scored is counted
    assert ledger.executed_flops == 10.0  # what ran: the whole last step
    assert ledger.last_step_fraction == f and stats.extras["charged_fraction"] == f
    again = Ledger(limit=10.0)
    again.load_state_dict(ledger.state_dict())  # checkpoints keep f
    assert again.last_step_fraction == f and again.exhausted
    old = {k: v for k, v in ledger.state_dict().items() if k != "last_step_fraction"}
    again.load_state_dict(old)  # a checkpoint written before the rule: whole steps
    assert again.last_step_fraction == 1.0


def test_a_samples_budget_charges_the_samples_left_and_updates_are_whole():
    ledger = Ledger(limit=20, kind="samples")
    ledger.step(1e9, 16)
    f = ledger.fraction_of(1e9, 16)
    assert f == 0.25
    ledger.step(1e9, 16, fraction=f)
    assert ledger.samples == 20 and isinstance(ledger.samples, int) and ledger.flops == 1.25e9
    updates = Ledger(limit=2, kind="updates")
    updates.step(1e30, 10**6)
    assert updates.fraction_of(1e30, 10**6) == 1.0  # the limit is whole steps


def test_an_exact_fit_in_float_sums_is_whole_and_spends_the_budget():
    costs = [0.1e12, 0.2e12, 0.3e12]
    ledger = Ledger(limit=sum(reversed(costs)))  # summed in another order: may differ in the last bit
    for c in costs:
        assert ledger.fraction_of(c, 1) == 1.0
        ledger.step(c, 1)
    assert ledger.exhausted and ledger.last_step_fraction == 1.0


def test_a_fraction_the_ledger_did_not_give_is_refused():
    ledger = Ledger(limit=10.0)
    ledger.step(8.0, 1)
    with pytest.raises(ValueError, match="pass the fraction ledger.fraction_of"):
        ledger.step(4.0, 1, fraction=0.3)
    ledger.step(4.0, 1, fraction=0.5)
    with pytest.raises(ValueError, match="a method stops once ledger.exhausted"):
        ledger.fraction_of(4.0, 1)


def midway(history) -> float:
    """A FLOPs limit halfway through the last step of a run whose ledger history this is."""
    return history[-2].flops + 0.5 * (history[-1].flops - history[-2].flops)


def assert_pro_rata(ledger: Ledger, whole: Ledger, steps: int) -> float:
    """`ledger` ran the same steps as `whole`, its last at f of its cost; returns f."""
    f = ledger.last_step_fraction
    assert ledger.steps == steps and 0.45 < f < 0.55
    assert abs(ledger.flops / ledger.limit - 1) < 1e-9
    step_cost = whole.history[steps - 1].flops - whole.history[steps - 2].flops
    assert f == pytest.approx((ledger.limit - whole.history[steps - 2].flops) / step_cost, rel=1e-12)
    assert ledger.executed_flops == pytest.approx(whole.executed_flops, rel=1e-12)  # the whole last step ran
    assert ledger.history[-1].extras["charged_fraction"] == f
    return f


def change(after: dict, before: dict) -> torch.Tensor:
    return torch.cat([(after[n] - before[n]).flatten() for n in before])


def weights(model) -> dict:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def snapshots(ledger: Ledger, model) -> list[dict]:
    """The model's weights after every step (a listener: the ledger calls it once the step's update is in)."""
    out: list[dict] = []
    ledger.listeners.append(lambda _ledger, _stats: out.append(weights(model)))
    return out


def assert_scaled(last: dict, before: dict, whole: dict, f: float) -> None:
    """The last step moved the weights f times as far as the whole step did from the same weights."""
    ours, full = change(last, before), change(whole, before)
    assert full.norm() > 0
    assert (ours - f * full).norm() / (f * full).norm() < 1e-3, "the last update is not scaled by f"


# ---- ES ----
@pytest.fixture(scope="module")
def es_runs(tmp_path_factory, tiny_policy, toy_task):
    """ES in 3 whole iterations, then under a FLOPs budget ending halfway through the third."""
    from methods.es import loop as es
    task = toy_task("chars", max_new_tokens=8, n_train=64)
    make = lambda: es.ES(population=4, prompts_per_iteration=8, sigma=0.1, alpha=0.05,  # noqa: E731
                         generation_batch_size=8, checkpoint_every=1)
    tmp = tmp_path_factory.mktemp("es")
    whole = Ledger(limit=3, kind="updates")
    policy = tiny_policy()
    after = snapshots(whole, policy.model)
    make().train(policy, task, whole, tmp / "whole")
    ledger = Ledger(limit=midway(whole.history))
    policy = tiny_policy()
    make().train(policy, task, ledger, tmp / "partial")
    return make, task, tmp, whole, after, ledger, weights(policy.model)


def test_es_charges_its_last_iteration_pro_rata_and_steps_alpha_x_f(es_runs):
    _, _, _, whole, after, ledger, final = es_runs
    f = assert_pro_rata(ledger, whole, 3)
    sums = [s.extras["master_checksum"] for s in ledger.history]
    assert sums[:2] == [s.extras["master_checksum"] for s in whole.history[:2]]  # the old rule up to the last step
    assert sums[2] != whole.history[2].extras["master_checksum"]
    assert ledger.history[-1].extras["update_norm"] == pytest.approx(f * whole.history[-1].extras["update_norm"],
                                                                     rel=1e-5)
    assert_scaled(final, after[1], after[2], f)


def test_es_resumed_after_its_last_checkpoint_keeps_f(es_runs, tiny_policy):
    make, task, tmp, _, _, ledger, _ = es_runs
    state = json.loads((tmp / "partial" / "es_checkpoint" / "state.json").read_text())
    assert state["ledger"]["last_step_fraction"] == ledger.last_step_fraction
    again = make_ledger("flops", ledger.limit, tmp / "partial", progress=False)
    out = make().train(tiny_policy(), task, again, tmp / "partial")
    assert out["resumed_from"] == 3 and again.steps == 3
    assert again.last_step_fraction == ledger.last_step_fraction and again.flops == ledger.flops


def test_es_exact_fit_budget_is_whole_steps(es_runs, tiny_policy):
    make, task, tmp, whole, _, _, _ = es_runs
    ledger = Ledger(limit=whole.history[-1].flops)
    make().train(tiny_policy(), task, ledger, tmp / "exact")
    assert ledger.steps == 3 and ledger.last_step_fraction == 1.0 and ledger.exhausted
    assert ledger.history[-1].extras["master_checksum"] == whole.history[-1].extras["master_checksum"]


# ---- GRPO and RLOO (the TRL online adapter: Dr. GRPO, DAPO and GSPO are GRPO's trainer with other options) ----
@pytest.mark.parametrize("name", ["grpo", "rloo"])
def test_trl_online_methods_run_their_last_step_at_lr_x_f(name, tmp_path, tiny_policy, toy_task):
    from methods.grpo import GRPO
    from methods.rloo import RLOO
    method = {"grpo": GRPO, "rloo": RLOO}[name]
    task = toy_task("digits", n_train=64)
    hp = dict(prompts_per_step=4, num_generations=4, max_completion_length=8, learning_rate=1e-3, beta=0.0,
              checkpoint_every=0, max_steps=2)
    whole = Ledger(limit=2, kind="updates")
    policy = tiny_policy(eval_mode=False)
    after = snapshots(whole, policy.model)
    method(**hp).train(policy, task, whole, tmp_path / "whole")
    ledger = Ledger(limit=midway(whole.history))
    policy = tiny_policy(eval_mode=False)
    method(**hp).train(policy, task, ledger, tmp_path / "partial")
    f = assert_pro_rata(ledger, whole, 2)
    assert ledger.history[-1].extras["lr"] == hp["learning_rate"]  # restored after the step
    assert_scaled(weights(policy.model), after[0], after[1], f)


# ---- PPO (its own loop: the callback is called from a pre-step hook on the optimizer) ----
def test_ppo_runs_its_last_update_at_lr_x_f(tmp_path, tiny_policy):
    from methods.ppo import PPO
    from tasks.countdown import Countdown
    task = Countdown(n_train=16, max_new_tokens=8)
    tok = build_char_tokenizer()
    hp = dict(prompts_per_step=4, learning_rate=1e-3, num_ppo_epochs=1, num_mini_batches=1)
    whole = make_ledger("updates", 2, tmp_path / "whole", progress=False)
    policy = tiny_policy(tok, eval_mode=False)
    after = snapshots(whole, policy.model)
    PPO(**hp).train(policy, task, whole, tmp_path / "whole")
    ledger = Ledger(limit=midway(whole.history))
    policy = tiny_policy(tok, eval_mode=False)
    PPO(**hp).train(policy, task, ledger, tmp_path / "partial")
    f = assert_pro_rata(ledger, whole, 2)
    assert_scaled(weights(policy.model), after[0], after[1], f)
