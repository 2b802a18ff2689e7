"""Tests for the ES variants (methods/es/core.py, methods/es/loop.py, methods/es/lora.py): each switch keeps
full ES's guarantees (noise from seeds, exact restore, update formula, bit-identical resume, the
population path agrees), the default stays bit-identical to ES before the variants, bad settings
fail in one line.

    python -m pytest tests/test_es_variants.py -q
"""
from __future__ import annotations

import importlib.util
import math

import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen2Config

from harness.core.budget import Ledger
from harness.core.chartok import build_char_tokenizer
from harness.core.policy import Policy
from methods.es import core as es_core, loop as es
from methods.es.core import master_checksum

torch.set_num_threads(1)
N, P = 4, 8  # population, prompts per iteration
NO_PEFT = None if importlib.util.find_spec("peft") else 'needs peft: pip install -e ".[peft]"'


class Rows:
    def __init__(self, d):
        self.d = d

    def to_dict(self):
        return dict(self.d)


class ToyTask:
    """Sixteen fixed prompts and a dense character reward: self-contained, so the checksums below do
    not move when the shipped data or zoo models are rebuilt."""

    max_new_tokens = 8

    def load(self, split):
        return Rows({"prompt": [f"{i} {i + 3} {2 * i}>{i + 7}:" for i in range(16)], "target": list(range(16))})

    def reward(self, completions, **kw):
        return [sum(ord(ch) % 7 for ch in c) / (6 * max(len(c), 1)) for c in completions]


TASK = ToyTask()


def ref_policy(tied: bool = True) -> Policy:
    """A tiny random Qwen2 (seeded): the model the pre-variant checksums were measured on."""
    tok = build_char_tokenizer()
    tok.padding_side = "left"
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=64, max_position_embeddings=128,
                      tie_word_embeddings=tied, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                      bos_token_id=None)
    torch.manual_seed(0)
    return Policy(AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval(), tok, "ref")


def make_es(**kw) -> es.ES:
    args = dict(population=N, prompts_per_iteration=P, sigma=0.1, alpha=0.05, generation_batch_size=P, seed=3)
    return es.ES(**(args | kw))


def checksum(model) -> str:
    return master_checksum([p.detach() for p in model.parameters()])


def snapshot(model) -> list[torch.Tensor]:
    return [p.detach().clone() for _, p in model.named_parameters()]


def names_of(model) -> list[str]:
    return [n for n, _ in model.named_parameters()]


# ---- the default is the ES from before the variants ----
# measured with the unmodified methods/es/loop.py (commit 05d6ab3) on ref_policy() + ToyTask, 3 iterations
PRE_VARIANT = {True: "47bee6e3c1e828da", False: "098e037735f50494"}


@pytest.mark.parametrize("fixed", [True, False])
def test_default_is_bit_identical_to_es_before_the_variants(tmp_path, fixed):
    pol = ref_policy()
    out = make_es(fixed_batch=fixed).train(pol, TASK, Ledger(limit=3 * N * P, kind="samples"), tmp_path)
    assert out["steps"] == 3 and out["skipped_updates"] == 0
    assert checksum(pol.model) == PRE_VARIANT[fixed]


# ---- noise ----
def test_low_rank_noise_is_a_b_transpose_over_sqrt_r():
    like, r = torch.empty(6, 5), 2
    eps = es_core.noise(9, 3, like, rank=r)
    g = torch.Generator().manual_seed(es_core.noise_seed(9, 3))
    a, b = torch.randn(6, r, generator=g), torch.randn(5, r, generator=g)
    torch.testing.assert_close(eps, a @ b.T / math.sqrt(r))
    assert torch.linalg.matrix_rank(eps) == r
    assert torch.equal(eps, es_core.noise(9, 3, like, out=torch.empty(40), rank=r))  # buffer reuse: same noise
    vec = torch.empty(7)
    assert torch.equal(es_core.noise(9, 3, vec, rank=r), es_core.noise(9, 3, vec))  # vectors stay full-rank
    big = torch.stack([es_core.noise(s, 0, torch.empty(64, 64), rank=4) for s in range(20)])
    assert big.var().item() == pytest.approx(1.0, rel=0.1)  # entries keep unit variance


def test_update_matches_formula_with_subset_and_rank():
    torch.manual_seed(0)
    master = [torch.randn(5, 3), torch.randn(7), torch.randn(4, 6)]
    before = [m.clone() for m in master]
    spec = es_core.NoiseSpec(indices=(0, 1), rank=2)
    seeds, z, alpha = [11, 22], [1.5, -0.5], 1e-2
    es.es_update(master, seeds, z, alpha, torch.empty(30), spec, n=4)
    for i in (0, 1):
        expected = sum(zn * es_core.noise(s, i, before[i], rank=2) for s, zn in zip(seeds, z)) * alpha / 4
        torch.testing.assert_close(master[i] - before[i], expected, rtol=1e-4, atol=1e-7)
    assert torch.equal(master[2], before[2])  # not selected: untouched


@pytest.mark.parametrize("spec", [es_core.NoiseSpec((1, 4), None), es_core.NoiseSpec(None, 2),
                                  es_core.NoiseSpec((0, 2, 3), 1)])
def test_perturb_touches_only_the_selection_restore_is_exact_and_mirror_is_exact(spec):
    pol = ref_policy()
    params, before = [p for _, p in pol.model.named_parameters()], snapshot(pol.model)
    master = [p.detach().float().clone() for p in params]
    chosen = set(spec.selected(len(params)))
    es.perturb(params, master, 1234, 1e-2, None, spec)
    plus = [p.detach().clone() - m for p, m in zip(params, master)]
    assert [not torch.equal(p, b) for p, b in zip(params, before)] == [i in chosen for i in range(len(params))]
    es.restore(params, master, spec)
    assert all(torch.equal(p, b) for p, b in zip(params, before))
    es.perturb(params, master, 1234, -1e-2, None, spec)  # the antithetic twin: same seed, -sigma
    for i in chosen:  # exactly master -/+ sigma * the same eps
        eps = es.noise(1234, i, master[i], rank=spec.rank)
        assert torch.equal(params[i], torch.add(master[i], eps, alpha=-1e-2))
        torch.testing.assert_close(plus[i], 1e-2 * eps)
    es.restore(params, master)
    assert all(torch.equal(p, b) for p, b in zip(params, before))


def test_tied_embedding_is_perturbed_once():
    pol = ref_policy(tied=True)
    assert "lm_head.weight" not in names_of(pol.model)  # the tied tensor is one tensor
    params = [p for _, p in pol.model.named_parameters()]
    master = [p.detach().float().clone() for p in params]
    i = names_of(pol.model).index("model.embed_tokens.weight")
    es.perturb(params, master, 5, 1e-2)
    assert pol.model.lm_head.weight.data_ptr() == params[i].data_ptr()
    expected = torch.add(master[i], es.noise(5, i, master[i]), alpha=1e-2)
    assert torch.equal(pol.model.lm_head.weight, expected)  # sigma * eps once, not twice


# ---- parameter selection ----
def test_params_selection():
    names = names_of(ref_policy().model)
    pick = lambda spec: [names[i] for i in es_core.select_params(names, spec)]  # noqa: E731
    assert es_core.select_params(names, "all") is None
    assert pick("norms") and all("norm" in n for n in pick("norms"))
    assert "model.norm.weight" in pick("norms")
    na = pick("norms+attention")
    assert set(pick("norms")) < set(na) and any("self_attn.q_proj" in n for n in na)
    assert not any("mlp" in n or "embed" in n for n in na)
    last = pick("last_layer")
    assert last[-1] == "model.norm.weight" and all(".1." in n for n in last[:-1]) and len(last) > 5
    assert pick(r"mlp\.down_proj") == ["model.layers.0.mlp.down_proj.weight", "model.layers.1.mlp.down_proj.weight"]
    with pytest.raises(es_core.VariantError, match=r"matches no parameter; the model's parameter groups: "
                                                   r"model.embed_tokens.weight, model.layers.\*.self_attn"):
        es_core.select_params(names, "lm_head")


def test_bad_settings_fail_in_one_line():
    names, shapes = ["a.weight", "b.weight"], [(8, 3), (3,)]
    with pytest.raises(es_core.VariantError, match=r"noise_rank=4 exceeds the smaller side of a.weight \(8, 3\)"):
        es_core.noise_spec(names, shapes, "all", 4)
    assert es_core.noise_spec(names, shapes, "all", 3).rank == 3
    with pytest.raises(es_core.VariantError, match="even population.*use 6"):
        es.ESConfig(population=5, antithetic=True)
    with pytest.raises(es_core.VariantError, match="normalize='rank'"):
        es.ESConfig(normalize="rank")
    with pytest.raises(es_core.VariantError, match="peft=lora runs only in place"):
        es.ESConfig(peft="lora", engine="vllm")
    with pytest.raises(es_core.VariantError, match="noise_rank=0"):
        es.ESConfig(noise_rank=0)
    with pytest.raises(es_core.VariantError, match="matches no parameter"):  # before any work or file
        make_es(params="nomatch").train(ref_policy(), TASK, Ledger(limit=N * P, kind="samples"), "/nonexistent/x")


# ---- normalisations and antithetic members ----
def test_normalisations():
    assert es_core.centered_ranks([3.0, 1.0, 2.0]) == [0.5, -0.5, 0.0]
    assert es_core.centered_ranks([1.0, 2.0, 2.0, 0.0]) == pytest.approx([-1 / 6, 1 / 3, 1 / 3, -0.5])  # ties share
    assert es_core.normalize([0.2, 0.4], "none") == [0.2, 0.4]
    assert es_core.normalize([0.2, 0.4], "zscore") == es_core.zscore([0.2, 0.4])
    assert all(es_core.normalize([0.3] * 3, h) is None for h in es_core.NORMALIZE)  # no signal: skip


def test_antithetic_members_and_update_terms():
    seeds, signs = es_core.members([7, 9], antithetic=True)
    assert (seeds, signs) == ([7, 7, 9, 9], [1.0, -1.0, 1.0, -1.0])
    assert es_core.update_terms(seeds, signs, [1.0, -1.0, 0.5, 0.25]) == ([7, 9], [2.0, 0.25])
    assert es_core.members([7, 9], False) == ([7, 9], [1.0, 1.0])
    cfg = make_es(antithetic=True).config
    pair_seeds, _ = make_es(antithetic=True)._iteration_rng(0, 16)
    assert len(pair_seeds) == cfg.population // 2


# ---- training: each variant trains, touches only its tensors, and resumes bit-identically ----
VARIANTS = {
    "norms": dict(params="norms", sigma=2.0),  # a random model barely reacts to its norms
    "last_layer": dict(params="last_layer"),
    "low_rank": dict(noise_rank=2),
    "antithetic": dict(antithetic=True),
    "centered_ranks": dict(normalize="centered_ranks"),
    "none": dict(normalize="none"),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_variant_trains_and_resumes_bit_identically(tmp_path, variant):
    kw = {"checkpoint_every": 1, "sigma": 0.5, "alpha": 0.2} | VARIANTS[variant]  # subsets need a larger sigma
    full = ref_policy()
    before = snapshot(full.model)
    ledger = Ledger(limit=3 * N * P, kind="samples")
    out = make_es(**kw).train(full, TASK, ledger, tmp_path / "full")
    assert out["steps"] == 3 and ledger.samples == 3 * N * P and out["skipped_updates"] < 3
    spec = es_core.noise_spec(names_of(full.model), [tuple(p.shape) for p in before], kw.get("params", "all"))
    chosen = set(spec.selected(len(before)))
    changed = [not torch.equal(p, b) for p, b in zip(snapshot(full.model), before)]
    assert changed == [i in chosen for i in range(len(before))]
    make_es(**kw).train(ref_policy(), TASK, Ledger(limit=2 * N * P, kind="samples"), tmp_path / "part")
    resumed = ref_policy()
    out = make_es(**kw).train(resumed, TASK, Ledger(limit=3 * N * P, kind="samples"), tmp_path / "part")
    assert out["resumed_from"] == 2 and out["steps"] == 3
    assert checksum(resumed.model) == checksum(full.model)
    with pytest.raises(ValueError, match="use the same method settings"):  # a different variant refuses to resume
        make_es(**(kw | {"antithetic": not kw.get("antithetic", False)})).train(
            ref_policy(), TASK, Ledger(limit=4 * N * P, kind="samples"), tmp_path / "part")


def test_old_checkpoint_without_variant_keys_resumes(tmp_path):
    import json
    make_es(checkpoint_every=1).train(ref_policy(), TASK, Ledger(limit=N * P, kind="samples"), tmp_path)
    state_path = tmp_path / "es_checkpoint" / "state.json"
    state = json.loads(state_path.read_text())
    for k in es_core.VARIANT_DEFAULTS:
        state["config"].pop(k)
    state_path.write_text(json.dumps(state))
    out = make_es(checkpoint_every=1).train(ref_policy(), TASK, Ledger(limit=2 * N * P, kind="samples"), tmp_path)
    assert out["resumed_from"] == 1 and out["steps"] == 2


# ---- LoRA ----
@pytest.mark.skipif(NO_PEFT is not None, reason=NO_PEFT or "")
def test_lora_trains_adapters_merges_and_resumes(tmp_path):
    kw = dict(peft="lora", lora={"r": 2, "alpha": 4, "target_modules": ["q_proj", "v_proj"]}, checkpoint_every=1)
    full = ref_policy()
    before = dict(zip(names_of(full.model), snapshot(full.model)))
    out = make_es(**kw).train(full, TASK, Ledger(limit=3 * N * P, kind="samples"), tmp_path / "full")
    assert out["steps"] == 3 and out["peft"] == "lora" and out["adapter_params"] > 0
    after = dict(zip(names_of(full.model), snapshot(full.model)))
    assert set(after) == set(before)  # merged and unloaded: a plain model again, no lora_ tensors
    changed = {n for n in after if not torch.equal(after[n], before[n])}
    assert changed and all(("q_proj.weight" in n or "v_proj.weight" in n) for n in changed)
    make_es(**kw).train(ref_policy(), TASK, Ledger(limit=2 * N * P, kind="samples"), tmp_path / "part")
    resumed = ref_policy()
    out = make_es(**kw).train(resumed, TASK, Ledger(limit=3 * N * P, kind="samples"), tmp_path / "part")
    assert out["resumed_from"] == 2 and checksum(resumed.model) == checksum(full.model)
