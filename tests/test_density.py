"""Tests for harness/tools/density.py: the interval and noise-level arithmetic against hand values, sigma=0
finds nothing, and a tiny end-to-end run writes its three files.

    python -m pytest tests/test_density.py -q
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from harness.tools import density

torch.set_num_threads(1)


def test_wilson_matches_hand_values():
    lo, hi = density.wilson(5, 10)  # textbook: 0.2366-0.7634
    assert (lo, hi) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4))
    lo, hi = density.wilson(0, 4)  # upper = z^2 / (n + z^2) when k = 0
    z2 = 1.959963984540054 ** 2
    assert lo == 0.0 and hi == pytest.approx(z2 / (4 + z2))
    assert density.wilson(4, 4) == (pytest.approx(1 - z2 / (4 + z2)), 1.0)


def test_paired_se_is_the_standard_error_of_the_mean():
    rng = np.random.default_rng(0)
    d = np.array([1.0, 0.0, 0.0, -1.0, 0.5, 0.0, 0.0, 0.0] * 8)
    analytic = d.std() / np.sqrt(len(d))  # the bootstrap SE of a mean converges to std / sqrt(n)
    assert density.paired_se(d, 4000, rng) == pytest.approx(analytic, rel=0.05)
    assert density.paired_se(np.zeros(16), 100, rng) == 0.0
    assert density.paired_se(np.full(16, 0.25), 100, rng) == pytest.approx(0.0, abs=1e-12)


def test_classify_and_summarize():
    assert density.classify(0.3, 0.1) == 1 and density.classify(0.2, 0.1) == 0  # > 2 SE, not >=
    assert density.classify(-0.25, 0.1) == -1 and density.classify(0.0, 0.0) == 0
    assert density.classify(0.01, 0.0) == 1  # every prompt moved the same way: no noise, a real gain
    s = density.summarize([0.1, -0.2, 0.0, 0.3], [1, -1, 0, 1])
    assert (s["improve"], s["harm"], s["improve_frac"]) == (2, 1, 0.5)
    assert s["improve_ci"] == list(density.wilson(2, 4)) and s["delta_mean"] == pytest.approx(0.05)
    assert s["delta_quantiles"]["q50"] == pytest.approx(0.05) and s["delta_max"] == 0.3


def test_arguments_are_key_value_and_checked():
    cfg = density.parse_args(["model=zoo-1m", "sigmas=[1e-3,3e-2]", "n=8", "noise_rank=2"])
    assert cfg.models == ["zoo-1m"] and cfg.sigmas == [1e-3, 3e-2] and cfg.n == 8 and cfg.noise_rank == 2
    with pytest.raises(density.DensityError, match="unknown key 'sigma'"):
        density.parse_args(["sigma=1e-3"])
    with pytest.raises(density.DensityError, match="not key=value"):
        density.parse_args(["--model", "zoo-1m"])
    with pytest.raises(density.DensityError, match="must be >= 0"):
        density.parse_args(["sigmas=[-1e-3]"])


def test_tiny_end_to_end_and_sigma_zero_finds_nothing(tmp_path):
    cfg = density.parse_args(["model=zoo-100k", "sigmas=[0,3e-2]", "n=4", "prompts=8", f"out={tmp_path}",
                              "bootstrap=200"])
    result, out = density.run(cfg, "test")
    assert {p.name for p in out.iterdir()} >= {"density.json", "density.md", "density.png"}
    m = json.loads((out / "density.json").read_text())["models"][0]
    zero, big = m["sigmas"]["0"], m["sigmas"]["0.03"]
    assert zero["improve"] == 0 and zero["harm"] == 0 and zero["deltas"] == [0.0] * 4 and zero["ses"] == [0.0] * 4
    assert big["n"] == 4 and len(big["deltas"]) == 4 and 0 <= big["improve_frac"] <= 1
    assert "| zoo-100k |" in (out / "density.md").read_text()


def test_declared_sigma_rule():
    """Most improving among sigmas harming <= 25%; ties (none improving too) to the larger sigma."""
    from harness.tools.density import declared_sigma

    def row(sigma, improve, harm, n=64):
        return {"sigma": sigma, "improve": improve, "harm_frac": harm / n}
    # the old ladder-750k row: nothing improves, 1e-2 harms 39/64: the largest safe sigma, 3e-3
    assert declared_sigma({"a": row(1e-3, 0, 0), "b": row(3e-3, 0, 6), "c": row(1e-2, 0, 39)}) == 3e-3
    # improving directions win over size, but only among safe sigmas
    assert declared_sigma({"a": row(1e-3, 2, 0), "b": row(3e-3, 1, 3), "c": row(1e-2, 9, 30)}) == 1e-3
    assert declared_sigma({"a": row(1e-3, 0, 20), "b": row(3e-3, 0, 40)}) == 1e-3  # all harmful: the smallest
