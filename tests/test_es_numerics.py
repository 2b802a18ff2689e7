"""Tests for ES numerics as a variable (methods/es/numerics.py, methods/es/core.py seeding, methods/es/loop.py):
numerics=inplace is the reference code's arithmetic element for element (bf16, fp16, fp32; every
seeding), exact with another seeding is the fp32 master with that seeding, per_tensor_same repeats
noise across same-shaped tensors, the numerics record sees inexact restores under bf16 inplace and
none under exact, and bad settings fail in one line. `exact`'s bit-identity with ES before is pinned by
tests/test_es_variants.py::test_default_is_bit_identical_to_es_before_the_variants.

    python -m pytest tests/test_es_numerics.py -q
"""
from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen2Config

from harness.core.budget import Ledger
from harness.core.chartok import build_char_tokenizer
from harness.core.policy import Policy
from methods.es import core as es_core, loop as es
from methods.es.numerics import BINS, InplaceWeights
from methods.es.weights import HFWeights
from methods.es.workers import WorkerError

torch.set_num_threads(1)
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
N, P = 4, 8


def tiny_model(dtype=torch.float32):
    """A seeded random Qwen2 (q/k/v biases, tied head, same-shaped tensors) in `dtype`."""
    tok = build_char_tokenizer()
    tok.padding_side = "left"
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=64, max_position_embeddings=128,
                      tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                      bos_token_id=None)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).to(dtype).eval(), tok


# ---- the reference code's loop, written out by hand (es_fine-tuning_countdown.py) ----
def ref_seed(seed: int, k: int, seeding: str) -> int:
    return {"iid": es_core.noise_seed(seed, k), "per_tensor_offset": seed + k, "per_tensor_same": seed}[seeding]


def ref_noise(param, seed, k, seeding):
    gen = torch.Generator(device=param.device)
    gen.manual_seed(int(ref_seed(seed, k, seeding)))
    return torch.randn(param.shape, generator=gen, device=param.device, dtype=param.dtype)


@torch.no_grad()
def ref_iteration(model, seeds, sigma, alpha, seeding, fitness, chosen=None):
    """Perturb, evaluate, restore each member; z-score; update: the reference's operations in order."""
    named = list(model.named_parameters())
    chosen = set(range(len(named)) if chosen is None else chosen)
    rewards = []
    for s in seeds:
        for k, (_, param) in enumerate(named):
            if k in chosen:
                param.data.add_(sigma * ref_noise(param, s, k, seeding))
        rewards.append(fitness(model))
        for k, (_, param) in enumerate(named):
            if k in chosen:
                param.data.add_(-sigma * ref_noise(param, s, k, seeding))
    z = es_core.zscore(rewards)
    for k, (_, param) in enumerate(named):
        if k not in chosen:
            continue
        update = torch.zeros_like(param)
        for s, zn in zip(seeds, z):
            noise = ref_noise(param, s, k, seeding)
            noise.mul_(float(zn))
            update.add_(noise)
        update.div_(len(seeds))
        param.data.add_(alpha * update)
    return rewards


@torch.no_grad()
def adapter_iteration(w, model, seeds, sigma, alpha, fitness):
    rewards = []
    for s in seeds:
        w.perturb(s, sigma)
        rewards.append(fitness(model))
        w.restore()
    w.update(seeds, es_core.zscore(rewards), alpha)
    return rewards


@torch.no_grad()
def fitness(model) -> float:
    """A deterministic score of the current weights (stands in for generation + reward)."""
    ids = torch.arange(2, 14).reshape(2, 6)
    return float(model(ids).logits.float().mean())


def bits_equal(a, b) -> bool:
    return all(torch.equal(x.view(torch.int16 if x.element_size() == 2 else torch.int32),
                           y.view(torch.int16 if y.element_size() == 2 else torch.int32)) for x, y in zip(a, b))


def snapshot(model):
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("seeding", es_core.SEEDINGS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_inplace_is_the_reference_arithmetic_element_for_element(dtype, seeding):
    ours, _ = tiny_model(dtype)
    ref, _ = tiny_model(dtype)
    w = InplaceWeights(list(ours.named_parameters()), record=False)
    w.set_noise(es_core.NoiseSpec(seeding=seeding))
    w.init_master()
    start = snapshot(ours)
    for it in range(2):
        seeds = [101 + 7 * it + j for j in range(N)]
        r_ours = adapter_iteration(w, ours, seeds, 1e-3, 5e-2, fitness)
        r_ref = ref_iteration(ref, seeds, 1e-3, 5e-2, seeding, fitness)
        assert r_ours == r_ref
        assert bits_equal(snapshot(ours), snapshot(ref))
    assert not bits_equal(snapshot(ours), start)  # the update moved something


def test_inplace_subset_and_antithetic_follow_the_same_arithmetic():
    ours, _ = tiny_model(torch.bfloat16)
    ref, _ = tiny_model(torch.bfloat16)
    chosen = (1, 4, 5)
    w = InplaceWeights(list(ours.named_parameters()), record=True)
    w.set_noise(es_core.NoiseSpec(chosen))
    w.init_master()
    w.perturb(9, -1e-2)  # an antithetic mirror: the same seed at -sigma
    w.restore()
    named = list(ref.named_parameters())
    with torch.no_grad():
        for k in chosen:
            named[k][1].add_(-1e-2 * ref_noise(named[k][1], 9, k, "iid"))
        for k in chosen:
            named[k][1].add_(1e-2 * ref_noise(named[k][1], 9, k, "iid"))
    assert bits_equal(snapshot(ours), snapshot(ref))
    w.update([9, 11], [2.0, -0.5], 5e-2, n=4)  # a folded pair and a plain term, n = the population
    with torch.no_grad():
        for k in chosen:
            p = named[k][1]
            update = torch.zeros_like(p)
            for s, zn in ((9, 2.0), (11, -0.5)):
                update.add_(ref_noise(p, s, k, "iid").mul_(zn))
            p.add_(5e-2 * update.div_(4))
    assert bits_equal(snapshot(ours), snapshot(ref))


@pytest.mark.parametrize("seeding", ["per_tensor_offset", "per_tensor_same"])
def test_exact_with_another_seeding_is_the_fp32_master_with_those_seeds(seeding):
    model, _ = tiny_model()
    params = list(model.parameters())
    master = [p.detach().clone() for p in params]
    w = HFWeights(list(model.named_parameters()))
    w.set_noise(es_core.NoiseSpec(seeding=seeding))
    w.init_master()
    w.perturb(77, 1e-2)
    for k, (p, m) in enumerate(zip(params, master)):
        g = torch.Generator().manual_seed(ref_seed(77, k, seeding))
        assert torch.equal(p, torch.add(m, torch.randn(m.shape, generator=g), alpha=1e-2))  # as es_core.perturb
    w.restore()
    assert bits_equal(params, master)  # exact restore whatever the seeding
    w.update([77, 78], [1.0, -1.0], 1e-2)
    for k, (p, m) in enumerate(zip(params, master)):
        e = [torch.randn(m.shape, generator=torch.Generator().manual_seed(ref_seed(s, k, seeding))) for s in (77, 78)]
        torch.testing.assert_close(p, m + 1e-2 / 2 * (e[0] - e[1]), rtol=0, atol=1e-7)


def test_per_tensor_same_repeats_noise_across_same_shaped_tensors_iid_does_not():
    model, _ = tiny_model(torch.bfloat16)
    named = list(model.named_parameters())
    shape = {}
    pair = None
    for k, (_, p) in enumerate(named):
        if tuple(p.shape) in shape:
            pair = (shape[tuple(p.shape)], k)
            break
        shape[tuple(p.shape)] = k
    i, j = pair
    like = named[i][1]
    for dtype in (torch.float32, torch.bfloat16):
        same = [es_core.noise(5, k, like, seeding="per_tensor_same", dtype=dtype) for k in (i, j)]
        iid = [es_core.noise(5, k, like, seeding="iid", dtype=dtype) for k in (i, j)]
        off = [es_core.noise(5, k, like, seeding="per_tensor_offset", dtype=dtype) for k in (i, j)]
        assert torch.equal(*same) and not torch.equal(*iid) and not torch.equal(*off)
    assert torch.equal(es_core.noise(5, i, like), es_core.noise(5, i, like, seeding="iid"))  # the default stream


# ---- the numerics record, through the ES loop ----
class Rows:
    def __init__(self, d):
        self.d = d

    def to_dict(self):
        return dict(self.d)


class ToyTask:
    max_new_tokens = 6

    def load(self, split):
        return Rows({"prompt": [f"{i} {i + 3} {2 * i}>{i + 7}:" for i in range(16)], "target": list(range(16))})

    def reward(self, completions, **kw):
        return [sum(ord(ch) % 7 for ch in c) / (6 * max(len(c), 1)) for c in completions]


def train(tmp_path, dtype, steps=2, **kw):
    model, tok = tiny_model(dtype)
    pol = Policy(model, tok, "ref")
    ledger = Ledger(limit=steps * N * P, kind="samples")
    args = dict(population=N, prompts_per_iteration=P, sigma=0.05, alpha=0.02, generation_batch_size=P, seed=3)
    out = es.ES(**(args | kw)).train(pol, ToyTask(), ledger, tmp_path)
    return out, ledger, pol


def test_record_sees_inexact_restore_under_bf16_inplace_and_none_under_exact(tmp_path):
    out, ledger, _ = train(tmp_path / "inplace", torch.bfloat16, numerics="inplace")
    rec = [s.extras["numerics"] for s in ledger.history]
    assert all(r["restore_not_exact_share"] > 0 and r["restore_rms"] > 0 and r["restore_max_abs"] > 0 for r in rec)
    assert all(0 < r["changed_share"] <= 1 for r in rec)
    summary = out["numerics"]
    assert summary["numerics"] == "inplace" and summary["dtype"] == "bfloat16" and summary["noise_seeding"] == "iid"
    assert list(summary["ulp_histogram"]) == list(BINS)
    assert sum(summary["ulp_histogram"].values()) == summary["coordinates"]
    assert summary["ulp_histogram"]["0"] == round((1 - summary["changed_share"]) * summary["coordinates"])
    assert summary["max_abs_delta"] > 0 and summary["max_abs_delta_ties"] >= 1

    out, ledger, _ = train(tmp_path / "exact", torch.bfloat16, numerics_record=True)
    rec = [s.extras["numerics"] for s in ledger.history]
    assert all(r["restore_not_exact_share"] == 0 and r["restore_rms"] == 0 for r in rec)
    assert out["numerics"]["numerics"] == "exact" and sum(out["numerics"]["ulp_histogram"].values()) > 0
    out, ledger, _ = train(tmp_path / "plain", torch.float32, steps=1)  # the default: no record, no extras
    assert "numerics" not in ledger.history[0].extras and out["numerics"]["record"] is False



def test_analysis_reads_the_numerics_record_into_its_section(tmp_path):
    """harness/analysis/numerics.py: the record's numbers reach analysis.md unchanged (means and maxima
    over iterations by hand), and a run without the record has no row."""
    from dataclasses import asdict

    from harness.analysis.numerics import numerics_of, section
    from harness.core.records import Record

    out, ledger, _ = train(tmp_path / "inplace", torch.bfloat16, numerics="inplace")
    rec = Record(train=out, steps=[asdict(s) for s in ledger.history])
    got = numerics_of(rec)
    per = [s.extras["numerics"] for s in ledger.history]
    assert got["iterations"] == 2 and got["dtype"] == "bfloat16" and got["seeding"] == "iid"
    assert got["restore_not_exact_share"] == pytest.approx(sum(r["restore_not_exact_share"] for r in per) / 2)
    assert got["restore_rms_max"] == max(r["restore_rms"] for r in per)
    assert got["max_abs_delta_ties"] == out["numerics"]["max_abs_delta_ties"]
    md = "\n".join(section([{"name": "es/seed0", "numerics": got}]))
    zero = out["numerics"]["ulp_histogram"]["0"] / out["numerics"]["coordinates"]
    assert "| es/seed0 | inplace bfloat16 iid |" in md and f"{100 * zero:.1f}%" in md
    plain, ledger, _ = train(tmp_path / "plain", torch.float32, steps=1)
    assert numerics_of(Record(train=plain, steps=[asdict(s) for s in ledger.history])) is None
    assert section([{"name": "x", "numerics": None}]) == []

def test_inplace_fp32_trains_and_resumes_bit_identically(tmp_path):
    _, _, full = train(tmp_path / "full", torch.float32, numerics="inplace", noise_seeding="per_tensor_same",
                       checkpoint_every=1)
    train(tmp_path / "part", torch.float32, steps=1, numerics="inplace", noise_seeding="per_tensor_same",
          checkpoint_every=1)
    out, _, resumed = train(tmp_path / "part", torch.float32, numerics="inplace", noise_seeding="per_tensor_same",
                            checkpoint_every=1)
    assert out["resumed_from"] == 1 and out["numerics"]["dtype"] == "float32"
    assert out["numerics"]["since_iteration"] == 1
    assert bits_equal(snapshot(resumed.model), snapshot(full.model))


def test_checksum_sees_one_ulp_and_a_divergence_names_rounding():
    model, _ = tiny_model(torch.bfloat16)
    w = InplaceWeights(list(model.named_parameters()))
    w.init_master()
    before = w.checksum()
    with torch.no_grad():
        p = w.params[3].view(-1)
        p[0] = torch.nextafter(p[0], torch.tensor(float("inf"), dtype=p.dtype))
    assert w.checksum() != before
    with pytest.raises(WorkerError, match="rounding diverged"):
        es.ES(numerics="inplace")._agree(["a", "b"], 3)


def test_bad_settings_fail_in_one_line():
    cases = [(dict(numerics="bf16"), "numerics='bf16' is unknown; use one of exact, inplace"),
             (dict(noise_seeding="same"), "noise_seeding='same' is unknown"),
             (dict(numerics="inplace", engine="vllm"), "not supported on engine=vllm; use engine=hf"),
             (dict(numerics="inplace", noise_rank=2), "drop method.noise_rank"),
             (dict(numerics="inplace", peft="lora"), "drop method.peft"),
             (dict(numerics_record=True, engine="vllm"), "numerics_record=true is measured on engine=hf only")]
    for kw, msg in cases:
        with pytest.raises(es_core.VariantError, match=msg.replace("(", r"\(").replace(")", r"\)")) as e:
            es.ESConfig(**kw)
        assert "\n" not in str(e.value)
    assert es.ESConfig().numerics_record is False and es.ESConfig(numerics="inplace").numerics_record is True
