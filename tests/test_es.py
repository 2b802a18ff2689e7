"""Tests for methods/es/loop.py: the ES update, exact restore, independent noise, budget, resume.

    python -m pytest tests/test_es.py -q
"""
from __future__ import annotations

import pytest
import torch

import json

from harness.core.budget import BudgetError, Ledger
from harness.core.chartok import build_char_tokenizer
from harness.core.policy import Policy
from harness.core.steplog import make_ledger
from harness.tools.zoo import ZOO, make_model
from methods.es import loop as es
from tasks.countdown import Countdown

torch.set_num_threads(1)
N, P = 4, 8  # population, prompts per iteration


def tiny_policy() -> Policy:
    tok = build_char_tokenizer()
    tok.padding_side = "left"
    model = make_model(ZOO["zoo-100k"], len(tok), tok.eos_token_id, tok.pad_token_id).eval()
    return Policy(model, tok, "test")


def params_of(model) -> list[torch.Tensor]:
    return [p for _, p in model.named_parameters()]


def snapshot(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in params_of(model)]


def make_es(**kw) -> es.ES:
    # a random model needs large noise before its greedy outputs (and so the rewards) differ
    args = dict(population=N, prompts_per_iteration=P, sigma=0.1, alpha=0.05, generation_batch_size=P)
    return es.ES(**(args | kw))


class CharCountdown(Countdown):
    """Countdown prompts with a dense toy reward, so a random model's members score differently."""

    def reward(self, completions, **kwargs):
        return [sum(ord(ch) % 7 for ch in c) / (6 * max(len(c), 1)) for c in completions]


TASK = CharCountdown(source="zoo", template="compact", max_new_tokens=8, n_train=64)


def test_update_matches_formula():
    torch.manual_seed(0)
    master = [torch.randn(5, 3), torch.randn(7), torch.randn(5, 3)]
    before = [m.clone() for m in master]
    seeds, z, alpha = [11, 22, 33], [1.2, -0.3, -0.9], 5e-4
    norm = es.es_update(master, seeds, z, alpha, buf=torch.empty(15))
    total_sq = 0.0
    for i, (m, b) in enumerate(zip(master, before)):
        expected = torch.zeros_like(b)
        for s, zn in zip(seeds, z):
            g = torch.Generator().manual_seed(es.noise_seed(s, i))
            expected += zn * torch.randn(b.shape, generator=g)
        expected *= alpha / len(seeds)
        torch.testing.assert_close(m - b, expected, rtol=1e-4, atol=1e-7)
        total_sq += float(expected.pow(2).sum())
    assert norm == pytest.approx(total_sq ** 0.5, rel=1e-4)


def test_perturb_restore_is_bit_exact():
    policy = tiny_policy()
    params, before = params_of(policy.model), snapshot(policy.model)
    master = [p.detach().float().clone() for p in params]
    es.perturb(params, master, member_seed=1234, sigma=1e-3)
    assert all(not torch.equal(p, b) for p, b in zip(params, before))  # every tensor moved, norms and embeddings too
    es.restore(params, master)
    assert all(torch.equal(p, b) for p, b in zip(params, before))


def test_noise_independent_per_tensor():
    like = torch.empty(16, 16)
    a, b = es.noise(7, 0, like), es.noise(7, 1, like)
    assert not torch.equal(a, b)
    assert torch.equal(a, es.noise(7, 0, like, out=torch.empty(300)))  # buffer reuse gives the same noise
    assert not torch.equal(a, es.noise(8, 0, like))


def logged(limit, run_dir) -> Ledger:
    return make_ledger("samples", limit, run_dir, progress=False)


def test_two_iterations_change_all_params_and_charge_ledger(tmp_path):
    policy = tiny_policy()
    before = snapshot(policy.model)
    ledger = logged(2 * N * P, tmp_path)
    out = make_es().train(policy, TASK, ledger, tmp_path)
    assert out["steps"] == 2 and ledger.steps == 2
    assert ledger.flops > 0 and ledger.samples == 2 * N * P
    changed = [not torch.equal(p, b) for p, b in zip(params_of(policy.model), before)]
    assert all(changed), f"{changed.count(False)} tensors unchanged"
    rows = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and rows[-1]["samples"] == 2 * N * P
    assert rows[0]["extras"]["sigma"] == 0.1 and rows[0]["reward_mean"] is not None
    # a budget of one iteration stops after one
    ledger = Ledger(limit=N * P, kind="samples")
    assert make_es().train(tiny_policy(), TASK, ledger, tmp_path / "one")["steps"] == 1
    with pytest.raises(BudgetError, match="raise budget"):
        make_es().train(tiny_policy(), TASK, Ledger(limit=N * P - 1, kind="samples"), tmp_path / "none")


def test_resume_is_bit_identical(tmp_path):
    full = tiny_policy()
    make_es(checkpoint_every=1).train(full, TASK, Ledger(limit=3 * N * P, kind="samples"), tmp_path / "full")
    part = tiny_policy()
    make_es(checkpoint_every=1).train(part, TASK, Ledger(limit=2 * N * P, kind="samples"), tmp_path / "part")
    resumed, ledger = tiny_policy(), logged(3 * N * P, tmp_path / "part")
    out = make_es(checkpoint_every=1).train(resumed, TASK, ledger, tmp_path / "part")
    assert out["resumed_from"] == 2 and out["steps"] == 3 and ledger.samples == 3 * N * P
    assert all(torch.equal(a, b) for a, b in zip(params_of(full.model), params_of(resumed.model)))
    assert not any((tmp_path / "part").glob("es_checkpoint.*"))  # no temp or old dirs left behind
    rows = [json.loads(line) for line in (tmp_path / "part" / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]  # the restored history, then the new step


def test_leftovers_of_a_killed_save_do_not_block_saving(tmp_path):
    """A kill between the swaps of a save leaves es_checkpoint.old (and .tmp) behind; later saves must work."""
    make_es(checkpoint_every=1).train(tiny_policy(), TASK, Ledger(limit=N * P, kind="samples"), tmp_path)
    ckpt = tmp_path / "es_checkpoint"
    for leftover in ("es_checkpoint.old", "es_checkpoint.tmp"):
        (tmp_path / leftover).mkdir()
        (tmp_path / leftover / "junk").write_text("from a killed save")
    out = make_es(checkpoint_every=1).train(tiny_policy(), TASK, Ledger(limit=2 * N * P, kind="samples"), tmp_path)
    assert out["resumed_from"] == 1 and out["steps"] == 2
    assert json.loads((ckpt / "state.json").read_text())["iteration"] == 2
    # killed after es_checkpoint -> .old but before .tmp -> es_checkpoint: resume from .old
    ckpt.rename(tmp_path / "es_checkpoint.old")
    out = make_es(checkpoint_every=1).train(tiny_policy(), TASK, Ledger(limit=3 * N * P, kind="samples"), tmp_path)
    assert out["resumed_from"] == 2 and out["steps"] == 3 and not (tmp_path / "es_checkpoint.old").exists()


def test_method_is_data_and_rejects_unknown_keys():
    assert (es.ES.name, es.ES.label_keys, es.ES.trains) == ("es", ("sigma", "alpha"), True)
    with pytest.raises(TypeError, match="no hyperparameter 'sigmaa'; valid: population, sigma"):
        es.ES(sigmaa=1e-3)


def test_identical_rewards_skip_update(tmp_path, monkeypatch):
    policy = tiny_policy()
    before = snapshot(policy.model)
    monkeypatch.setattr(TASK, "reward", lambda completions, **_: [0.5] * len(completions))
    make_es().train(policy, TASK, logged(N * P, tmp_path), tmp_path)
    assert all(torch.equal(p, b) for p, b in zip(params_of(policy.model), before))
    assert '"skipped": true' in (tmp_path / "train_log.jsonl").read_text()


def test_config_errors_name_the_fix():
    with pytest.raises(ValueError, match="population"):
        es.ESConfig(population=1)
    with pytest.raises(ValueError, match="sigma"):
        es.ESConfig(sigma=0)
    with pytest.raises(ValueError, match="alpha_per_sigma"):
        es.ESConfig(alpha_per_sigma=0)


def test_alpha_per_sigma_ties_the_step_to_the_noise():
    assert es.ESConfig(sigma=1e-3, alpha=5e-4).alpha == 5e-4  # null: alpha as given
    tied = es.ESConfig(sigma=3e-3, alpha=5e-4, alpha_per_sigma=0.5)
    assert tied.alpha == pytest.approx(1.5e-3)
