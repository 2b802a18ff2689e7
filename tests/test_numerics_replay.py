"""Tests for harness/tools/numerics_replay.py on the zoo-100k model (a random Qwen2, q/k/v biases).

    python -m pytest tests/test_numerics_replay.py -q
"""
from __future__ import annotations

import json

import pytest
import torch

from harness.tools import numerics_replay as nr

torch.set_num_threads(1)


def test_replay_writes_json_and_markdown_with_each_arithmetic(tmp_path):
    out = tmp_path / "replay.json"
    res = nr.main(["zoo-100k", "--iterations", "2", "--population", "4", "--sigma", "1e-3", "--alpha", "5e-4",
                   "--arith", "exact,inplace-bf16,inplace-fp32", "--seeding", "per_tensor_same", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["command"].startswith("python -m harness.tools.numerics_replay zoo-100k")
    assert saved["torch"] == torch.__version__ and saved["git_sha"]
    assert [r["arith"] for r in saved["arithmetics"]] == ["exact", "inplace-bf16", "inplace-fp32"]
    by = {r["arith"]: r for r in res["arithmetics"]}
    for r in by.values():
        assert sum(r["top100_by_group"].values()) == nr.TOP
        assert r["max_set_size"] == sum(r["max_set_by_group"].values()) >= 1
        assert 0 <= r["unchanged_share"] < 1 and r["max_abs_delta"] > 0 and len(r["iterations"]) == 2
        assert sum(r["ulp_histogram"].values()) == r["coordinates"] == saved["params"]
    assert by["exact"]["iterations"][0]["restore_not_exact_share"] == 0
    assert by["inplace-bf16"]["iterations"][0]["restore_not_exact_share"] > 0
    assert by["inplace-bf16"]["dtype"] == "bfloat16" and by["exact"]["dtype"] == "float32"
    md = out.with_suffix(".md").read_text()
    assert "| inplace-bf16 | bfloat16 |" in md and "top-100 by group" in md


def test_localise_counts_ties_at_the_max_by_group():
    names = ["model.layers.0.self_attn.q_proj.bias", "model.layers.0.mlp.up_proj.weight"]
    initial = [torch.zeros(4), torch.zeros(3, 2)]
    final = [torch.tensor([0.5, 0.5, 0.1, 0.0]), torch.tensor([[0.5, 0.0], [0.2, 0.0], [0.0, 0.0]])]
    loc = nr.localise(names, initial, final, tied=False)
    assert loc["max_abs_delta"] == 0.5 and loc["max_set_size"] == 3
    assert loc["max_set_by_group"] == {"attn_bias": 2, "mlp": 1}
    assert sum(loc["top100_by_group"].values()) == 10  # fewer coordinates than 100: all of them


def test_bad_arithmetic_fails_in_one_line():
    with pytest.raises(nr.ReplayError, match="use exact, exact-<dtype> or inplace-<dtype>"):
        nr.parse_arith("inplace")
    with pytest.raises(nr.ReplayError, match="--arith 'exact-int8'"):
        nr.parse_arith("exact-int8")
