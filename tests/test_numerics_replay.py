"""Tests for harness/tools/numerics_replay.py on the zoo-100k model (a random Qwen2, q/k/v biases).

    python -m pytest tests/test_numerics_replay.py -q
"""
from __future__ import annotations

import json
import math

import pytest
import torch

from harness.tools import numerics_replay as nr

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    out = tmp_path_factory.mktemp("replay") / "replay.json"
    res = nr.main(["zoo-100k", "--iterations", "2", "--population", "4", "--sigma", "1e-3", "--alpha", "5e-4",
                   "--arith", "exact,inplace-bf16,inplace-fp32@per_tensor_same", "--seeding", "iid,per_tensor_same",
                   "--out", str(out)])
    return out, res


def test_replay_writes_json_and_markdown_with_each_row(replayed):
    out, res = replayed
    saved = json.loads(out.read_text())
    assert saved["command"].startswith("python -m harness.tools.numerics_replay zoo-100k")
    assert saved["torch"] == torch.__version__ and saved["git_sha"]
    assert [(r["arith"], r["seeding"]) for r in saved["arithmetics"]] == [
        ("exact", "iid"), ("exact", "per_tensor_same"), ("inplace-bf16", "iid"), ("inplace-bf16", "per_tensor_same"),
        ("inplace-fp32", "per_tensor_same")]
    by = {(r["arith"], r["seeding"]): r for r in res["arithmetics"]}
    for r in by.values():
        assert sum(r["top100_by_group"].values()) == nr.TOP
        assert r["max_set_size"] == sum(r["max_set_by_group"].values()) >= 1
        assert 0 <= r["unchanged_share"] < 1 and r["max_abs_delta"] > 0 and len(r["iterations"]) == 2
        assert sum(r["ulp_histogram"].values()) == r["coordinates"] == saved["params"]
        assert r["drift"]["whole"] > 0 and [x["multiple"] for x in r["sparsity"]["rows"]] == nr.MULTIPLES
        assert sum(r["group_share"].values()) == pytest.approx(1)
    assert by["exact", "iid"]["iterations"][0]["restore_not_exact_share"] == 0
    assert by["inplace-bf16", "iid"]["iterations"][0]["restore_not_exact_share"] > 0
    assert by["inplace-bf16", "iid"]["dtype"] == "bfloat16" and by["exact", "iid"]["dtype"] == "float32"
    md = out.with_suffix(".md").read_text()
    assert "| inplace-bf16 | iid | bfloat16 |" in md and "top 100 by group" in md and "IS the random walk" in md
    assert "(exact " in md and "(walk " in md and "Parameter shares:" in md


def test_exact_replay_is_the_random_walk_null(replayed):
    """With random fitness and iid noise the exact replay reads as the analysis's closed-form walk."""
    ex = {(r["arith"], r["seeding"]): r for r in replayed[1]["arithmetics"]}["exact", "iid"]
    assert ex["drift"]["whole"] == pytest.approx(ex["drift"]["walk_null"], rel=0.03)
    one = ex["sparsity"]["rows"][0]
    assert one["threshold"] == pytest.approx(5e-4 / math.sqrt(4))
    assert one["walk_null"] == pytest.approx(math.erf(1 / math.sqrt(2 * 2)))
    assert abs(one["fraction_below"] - one["walk_null"]) < 0.01


def test_null_of_an_inplace_row_is_the_exact_row_of_its_seeding(replayed):
    rows = replayed[1]["arithmetics"]
    by = {(r["arith"], r["seeding"]): r for r in rows}
    assert nr.null_of(rows, by["inplace-bf16", "per_tensor_same"]) is by["exact", "per_tensor_same"]
    assert nr.null_of(rows, by["exact", "iid"]) is None


def test_localise_counts_ties_at_the_max_by_group_against_its_share():
    delta = {"model.layers.0.self_attn.q_proj.bias": torch.tensor([0.5, 0.5, 0.1, 0.0]),
             "model.layers.0.mlp.up_proj.weight": torch.tensor([[0.5, 0.0], [0.2, 0.0], [0.0, 0.0]])}
    loc = nr.localise(delta, tied=False)
    assert loc["max_abs_delta"] == 0.5 and loc["max_set_size"] == 3
    assert loc["max_set_by_group"] == {"attn_bias": 2, "mlp": 1}
    assert loc["group_share"] == {"attn_bias": 0.4, "mlp": 0.6}
    assert loc["max_set_vs_share"]["attn_bias"] == pytest.approx(2 / (3 * 0.4))
    assert sum(loc["top100_by_group"].values()) == 5  # fewer than 100 nonzero: every nonzero one
    assert loc["coordinates_at_cut_value"] == 0  # the 100th value is a zero update: no tie to report


def test_rows_cross_arithmetics_with_seedings_unless_pinned():
    assert nr.parse_rows("exact,inplace-bf16@per_tensor_offset,exact@iid", "iid,per_tensor_same") == [
        ("exact", "iid"), ("exact", "per_tensor_same"), ("inplace-bf16", "per_tensor_offset")]
    with pytest.raises(nr.ReplayError, match="seeding 'shared'"):
        nr.parse_rows("exact@shared", "iid")


def test_bad_arithmetic_fails_in_one_line():
    with pytest.raises(nr.ReplayError, match="use exact, exact-<dtype> or inplace-<dtype>"):
        nr.parse_arith("inplace")
    with pytest.raises(nr.ReplayError, match="--arith 'exact-int8'"):
        nr.parse_arith("exact-int8")


def test_weight_magnitudes_by_group_and_bf16_ulp():
    """bf16 carries 8 significant bits: the ulp is 2^-7 in [1, 2) and 2^-9 in [1/4, 1/2); per-group
    medians and cut shares are those of the weights themselves."""
    from harness.tools.weight_magnitudes import bf16_ulp, magnitudes

    assert bf16_ulp(1.0) == bf16_ulp(1.5) == 2 ** -7 and bf16_ulp(-0.3) == 2 ** -9

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = torch.nn.Module()
            self.mlp.up_proj = torch.nn.Linear(2, 2, bias=False)
            self.input_layernorm = torch.nn.Module()
            self.input_layernorm.weight = torch.nn.Parameter(torch.tensor([1.0, 2.0, 0.25]))

    block = Block()
    with torch.no_grad():
        block.mlp.up_proj.weight.copy_(torch.tensor([[0.1, -0.2], [0.6, -0.05]]))
    wrap = torch.nn.Module()
    wrap.layers = torch.nn.ModuleList([block])
    m = magnitudes(wrap)
    assert set(m) == {"mlp", "norm"}
    assert m["norm"]["params"] == 3 and m["norm"]["median_abs"] == 1.0 and m["norm"]["max_abs"] == 2.0
    assert m["norm"]["share_ge_1"] == 2 / 3 and m["mlp"]["share_ge_0.125"] == 0.5
