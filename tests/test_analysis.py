"""Tests for harness/analysis/: drift, localisation, sparsity endpoints, entropy closed form, bad input.

    python -m pytest tests/test_analysis.py -q
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from harness.analysis.drift import drift
from harness.analysis.entropy import sample_entropy, token_entropies
from harness.analysis.localisation import localisation
from harness.analysis.report import analyse
from harness.analysis.settings import AnalysisConfig
from harness.analysis.sparsity import apply_threshold, fraction_below
from harness.analysis.update import UpdateError, base_hash, deltas, load_update, named_params, save_update
from harness.evaluation.evaluate import EvalConfig, evaluate
from harness.core.policy import load_policy
from harness.core.records import read_record
from harness.core.paths import CONF_DIR
from harness.runner.run import run_one
from tasks.countdown import Countdown

torch.set_num_threads(1)
GREEDY = EvalConfig(n_samples=2, pass_ks=[1], maj_ks=[], n_prompts=12, n_boot=50, n_examples=0)


def base():
    return load_policy("zoo-100k", device="cpu")


def theta(model):
    return {n: p.detach().clone() for n, p in named_params(model)}


def test_untrained_drift_is_exactly_zero(tmp_path):
    policy = base()
    save_update(tmp_path, policy.model)
    final = load_update(tmp_path, {"path": "update.safetensors"}, "r")
    d = drift(deltas(final, base().model), theta(policy.model))
    assert d["whole"] == 0.0 and all(g["drift"] == 0.0 for g in d["groups"].values())
    assert localisation(deltas(final, policy.model))["top_k_counts"] == {}  # no update, no "largest update"


def test_hand_made_delta_lands_in_its_group_and_rank():
    model = base().model
    delta = {n: torch.zeros_like(p) for n, p in named_params(model)}
    delta["model.layers.0.input_layernorm.weight"][3] = -0.5
    delta["model.layers.1.self_attn.k_proj.bias"][1] = 0.3
    delta["model.embed_tokens.weight"][5, 2] = 0.9
    delta["model.layers.0.mlp.up_proj.weight"].fill_(1e-4)
    loc = localisation(delta, top_k=3, top_fraction=1e-5)
    assert [(t["rank"], t["group"], t["param"]) for t in loc["top"][:3]] == [
        (1, "embed", "model.embed_tokens.weight"), (2, "norm", "model.layers.0.input_layernorm.weight"),
        (3, "attn_bias", "model.layers.1.self_attn.k_proj.bias")]
    assert loc["top"][0]["index"] == 5 * model.config.hidden_size + 2
    assert loc["top_k_counts"] == {"embed": 1, "attn_bias": 1, "norm": 1}
    assert loc["max_abs"]["mlp"] == pytest.approx(1e-4) and loc["max_abs"]["attn_q"] == 0
    d = drift(delta, theta(model))
    assert d["groups"]["attn_q"]["drift"] == 0 and d["groups"]["norm"]["drift"] > 0
    assert "lm_head" not in d["groups"]  # tied: the head is the embedding, counted once


def test_max_set_counts_every_coordinate_tied_at_the_max():
    delta = {"model.layers.0.input_layernorm.weight": torch.tensor([0.5, -0.5, 0.1, 0.0]),
             "model.layers.0.self_attn.q_proj.bias": torch.tensor([-0.5, 0.2]),
             "model.layers.0.mlp.up_proj.weight": torch.tensor([[0.5, 0.0], [0.49, 0.0]])}
    loc = localisation(delta, top_k=2, top_fraction=0.1)
    assert loc["max_set"] == {"max_abs": 0.5, "size": 4, "by_group": {"norm": 2, "attn_bias": 1, "mlp": 1}}
    assert sum(loc["top_k_counts"].values()) == 2  # the top-2 cut falls inside the 4-way tie; the set does not
    assert loc["group_share"] == {"attn_bias": 0.2, "mlp": 0.4, "norm": 0.4}
    zero = {n: torch.zeros_like(d) for n, d in delta.items()}
    assert localisation(zero)["max_set"] == {"max_abs": 0.0, "size": 0, "by_group": {}}


def test_bf16_stored_weights_give_exact_deltas_and_ties(tmp_path):
    """A run kept in bf16 (numerics=inplace) stores bf16 weights: deltas are exact, so ties are whole."""
    step = 2.0 ** -7  # one bf16 ulp just above 1.0 (two just below)
    policy, trained = (load_policy("zoo-100k", "bfloat16", device="cpu") for _ in range(2))
    base_p, new_p = dict(named_params(policy.model)), dict(named_params(trained.model))
    with torch.no_grad():
        for name, idx, sign in (("model.layers.0.input_layernorm.weight", [0, 1, 2], 1),
                                ("model.norm.weight", [5], -1), ("model.layers.1.self_attn.k_proj.bias", [3], 1)):
            base_p[name][idx] = 1.0
            new_p[name][idx] = 1.0 + sign * step
        new_p["model.layers.0.mlp.up_proj.weight"][0, 0] += 2.0 ** -12  # smaller: outside the set
    save_update(tmp_path, trained.model)
    final = load_update(tmp_path, {"path": "update.safetensors"}, "r")
    assert final["model.norm.weight"].dtype == torch.bfloat16
    loc = localisation(deltas(final, policy.model))
    assert loc["max_set"] == {"max_abs": step, "size": 5, "by_group": {"norm": 4, "attn_bias": 1}}
    assert loc["max_abs"]["mlp"] > 0 and loc["n_nonzero"] == 6


class DenseCountdown(Countdown):
    """Countdown with a dense toy reward, so ES members score differently and every iteration updates."""

    def reward(self, completions, **kwargs):
        return [sum(ord(ch) % 7 for ch in c) / (6 * max(len(c), 1)) for c in completions]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny ES run on zoo-100k through run_one (the path every experiment takes)."""
    run_dir = tmp_path_factory.mktemp("es")
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[
            "model=zoo-100k", "method=es", f"task._target_={__name__}.DenseCountdown", "method.population=4", "method.prompts_per_iteration=8",
            "method.sigma=0.05", "method.alpha=0.05", "budget=tiny", "budget.flops=2e8", "device=cpu",
            "eval.n_prompts=4", "eval.n_samples=2", "eval.pass_ks=[1]", "eval.maj_ks=[]",
            "analysis.entropy_prompts=4", "analysis.entropy_samples=1", "analysis.entropy_every_flops_fraction=0.5"])
    rec = run_one(cfg, run_dir)
    return run_dir, rec


@pytest.mark.slow
def test_run_stores_update_hash_and_entropy(trained):
    run_dir, rec = trained
    assert rec.status == "ok" and (run_dir / "update.safetensors").is_file()
    assert rec.update["base_sha256"] == base_hash(base().model)
    assert rec.entropy and all(r["entropy"] > 0 and "flops" in r for r in rec.entropy)


@pytest.mark.slow
def test_threshold_zero_is_trained_model_and_inf_is_base(trained):
    run_dir, rec = trained
    policy, ref = base(), base()
    theta0 = theta(policy.model)
    final = load_update(run_dir, rec.update, rec.label)
    delta = deltas(final, policy.model)
    task = DenseCountdown(source="zoo")
    apply_threshold(policy.model, theta0, final, delta, 0.0)
    assert all(torch.equal(p, final[n]) for n, p in named_params(policy.model))
    at0 = evaluate(policy, task, "test", GREEDY).metrics
    trained_policy = base()
    with torch.no_grad():
        for n, p in named_params(trained_policy.model):
            p.copy_(final[n])
    assert at0 == evaluate(trained_policy, task, "test", GREEDY).metrics
    apply_threshold(policy.model, theta0, final, delta, math.inf)
    assert evaluate(policy, task, "test", GREEDY).metrics == evaluate(ref, task, "test", GREEDY).metrics
    assert fraction_below(delta, math.inf) == 1.0 and fraction_below(delta, 0.0) == 0.0
    assert sum(int((d != 0).sum()) for d in delta.values()) > 0.9 * sum(d.numel() for d in delta.values())


class ConstantHead(torch.nn.Module):
    """Logits = a fixed vector at every position: the next-token distribution is known in closed form."""

    def __init__(self, logits: torch.Tensor):
        super().__init__()
        self.logits = torch.nn.Parameter(logits)

    def forward(self, input_ids, attention_mask=None):
        return type("Out", (), {"logits": self.logits.expand(*input_ids.shape, -1)})


@pytest.mark.parametrize("temperature", [1.0, 0.5, 3.0])
def test_entropy_equals_closed_form(temperature):
    logits = torch.tensor([2.0, 0.0, -1.0, 0.5, 0.5])
    p = torch.softmax(logits / temperature, -1)
    closed = float(-(p * p.log()).sum())
    ents = token_entropies(ConstantHead(logits), [[1, 2], [3]], [[4, 0, 1], [2]], pad_id=0, temperature=temperature)
    assert len(ents) == 4 and all(e == pytest.approx(closed, rel=1e-6) for e in ents)


def test_entropy_of_uniform_head_is_log_vocab():
    policy = base()
    with torch.no_grad():
        policy.model.model.norm.weight.zero_()  # hidden states 0 -> logits 0 -> uniform over the vocabulary
    out = sample_entropy(policy, ["1 2 3 -> 6"], n=2, max_new_tokens=4)
    assert out["entropy"] == pytest.approx(math.log(policy.model.config.vocab_size), rel=1e-6)


@pytest.mark.slow
def test_bad_input_is_one_line_and_failed_runs_are_listed(trained, tmp_path):
    run_dir, rec = trained
    d = rec.to_dict()
    with pytest.raises(UpdateError, match="no stored update; rerun it with analysis.store_update=true"):
        load_update(run_dir, {}, "myrun")
    # a second run claiming another base, a third that failed: both listed, the good one analysed
    import shutil, json
    for name, change in (("ok", {}), ("otherbase", {"update": {**d["update"], "base_sha256": "0" * 64}}),
                         ("failed", {"status": "failed", "error": "RuntimeError: boom"})):
        dst = tmp_path / name
        shutil.copytree(run_dir, dst)
        (dst / "record.json").write_text(json.dumps({**d, **change, "label": name}))
    s = analyse(tmp_path, tmp_path, AnalysisConfig(sparsity_prompts=0))
    assert [r["label"] for r in s["runs"]] == ["ok"]
    assert any("otherbase" in x and "not the ones it trained from" in x for x in s["skipped"])
    assert any("failed" in x and "FAILED" in x for x in s["not_ok"])
    md = (tmp_path / "analysis.md").read_text()
    assert "otherbase" in md and "FAILED" in md
    assert all((tmp_path / f).is_file() for f in ("drift.png", "localisation.png", "entropy.png"))


def test_a_tables_folder_is_analysed_from_the_records_it_names_never_another_run(tmp_path):
    """versions.json names the experiment (group, stamp) that made a tables folder; a newer local run of the
    same group is not it, and records that are not here are an error that says so."""
    import json

    from harness.analysis.report import resolve
    from harness.analysis.update import UpdateError
    runs, tables = tmp_path / "runs", tmp_path / "results" / "quickstart"
    tables.mkdir(parents=True)
    for stamp in ("qs-r11", "20991231-000000"):  # the named run, and a newer one
        (runs / "quickstart" / stamp).mkdir(parents=True)
        (runs / "quickstart" / stamp / "experiment.json").write_text("{}")
    with pytest.raises(UpdateError, match="does not name the experiment"):
        resolve(tables, runs)  # no versions.json (or one written before it named its records)
    (tables / "versions.json").write_text(json.dumps({"runs": 11, "records": {"group": "quickstart", "stamp": "qs-r11"}}))
    assert resolve(tables, runs)[0] == runs / "quickstart" / "qs-r11"
    (tables / "versions.json").write_text(json.dumps({"records": {"group": "quickstart", "stamp": "qs-r12"}}))
    with pytest.raises(UpdateError, match="which is not here.*stamp=qs-r12"):
        resolve(tables, runs)
