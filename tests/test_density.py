"""Tests for harness/tools/density.py: the sign test, its minimum detectable effect and the intervals against
hand values, the up/down/unchanged counts on a hand-built cell, declared_sigma's rule, its refusal without
power and its notes, and a tiny end-to-end run whose density.json recomputes its own counts.

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


def test_sign_test_matches_hand_values():
    # 1 win, 8 losses: m = 9 changed prompts, two-sided 2 x (C(9,0) + C(9,1)) / 2^9 = 20/512
    assert density.sign_test(1, 8) == 20 / 512 == density.sign_test(8, 1)
    assert density.sign_test(0, 6) == 2 / 64 < 0.05 < density.sign_test(0, 5) == 2 / 32  # 6 one way: the least
    assert density.sign_test(3, 3) == 1.0 and density.sign_test(0, 0) == 1.0  # nothing changed: no evidence
    assert density.MIN_CHANGED == 6 and density.critical_wins(5) is None
    # m = 10: P(X >= 9) = 11/1024 -> p = 0.0215 rejects; P(X >= 8) = 56/1024 -> p = 0.109 does not
    assert density.critical_wins(10) == 9


def test_mde_matches_hand_values():
    # m = 6: only 6 of 6 rejects, so 80% power needs q^6 = 0.8; net change = 6 (2q - 1) = 5.56 prompts
    q = 0.8 ** (1 / 6)
    assert density.mde(6) == pytest.approx(6 * (2 * q - 1), abs=1e-9)
    # m = 10: rejects from 9 wins, so q^10 + 10 q^9 (1 - q) = 0.8 at the MDE's win share
    q = (1 + density.mde(10) / 10) / 2
    assert q ** 10 + 10 * q ** 9 * (1 - q) == pytest.approx(0.8, abs=1e-9)
    assert density.mde(5) is None and density.mde(0) is None  # no split of 5 prompts reaches p < 0.05


def test_crossed_bootstrap_resamples_prompts_too():
    rng = np.random.default_rng(0)
    assert density.crossed_bootstrap(np.zeros((8, 16)), 200, rng) == (0.0, 0.0)
    assert density.crossed_bootstrap(np.full((8, 16), -1.0), 200, rng) == (-1.0, -1.0)
    # the same 2 of 64 prompts lost in every direction (ladder-40k at 3e-2): a resample misses both with
    # probability (62/64)^64 = 0.13 > 0.025, so the interval reaches 0: not detected
    d = np.zeros((64, 64))
    d[:, :2] = -1.0
    lo, hi = density.crossed_bootstrap(d, 2000, rng)
    assert lo < -0.03 and hi == 0.0
    d[:, :12] = -1.0  # 12 of 64 lost everywhere: detected
    assert density.crossed_bootstrap(d, 2000, rng)[1] < 0


def test_summarize_counts_signs_and_tests():
    base = np.array([1, 1, 1, 1, 1, 1, 0, 0, 0, 0], dtype=float)
    rewards = np.array([
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0],  # loses all 6: down, and worse (p = 2/64)
        [1, 1, 1, 1, 1, 0, 1, 0, 0, 0],  # one lost, one gained: net 0, unchanged
        [1, 1, 1, 1, 1, 1, 1, 1, 0, 0],  # +2: up, not detected (p = 0.5)
        base.tolist(),                   # identical: unchanged
    ])
    c = density.summarize(base, rewards, 100, np.random.default_rng(0))
    assert (c["up"], c["down"], c["unchanged"], c["better"], c["worse"]) == (1, 1, 2, 0, 1)
    assert c["wins"] == [0, 1, 2, 0] and c["losses"] == [6, 1, 0, 0]
    assert c["mean_change"] == pytest.approx((-6 + 0 + 2 + 0) / 40) and c["worse_ci"] == list(density.wilson(1, 4))
    assert c["changed_median"] == 2 and c["mde_prompts"] is None and c["mde_points"] is None  # median of 6,2,2,0


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
    assert (zero["better"], zero["worse"], zero["unchanged"], zero["mean_change_ci"]) == (0, 0, 4, [0.0, 0.0])
    assert big["n"] == 4 and len(big["rewards"]) == 4 and big["up"] + big["down"] + big["unchanged"] == 4
    assert all(type(big[k]) is int for k in ("up", "down", "unchanged", "better", "worse", "changed_median"))
    # the file holds every outcome: its counts recompute from the stored per-prompt rewards
    base = density.decode(m["base_rewards"])
    d = np.stack([density.decode(r) for r in big["rewards"]]) - base
    assert big["wins"] == (d > 0).sum(axis=1).tolist() and big["losses"] == (d < 0).sum(axis=1).tolist()
    assert m["can_lose"] == int((base > 0).sum()) and "sigma" in m["declared"]
    assert "| zoo-100k |" in (out / "density.md").read_text()


def row(sigma, better, worse, n=64):
    return {"sigma": sigma, "better": better, "worse": worse, "n": n}


def model(*cells, can_lose=14, can_gain=50):
    return {"prompts": 64, "can_lose": can_lose, "can_gain": can_gain, "sigmas": {f"{c['sigma']:g}": c for c in cells}}


def test_declared_sigma_rule():
    """Most better among sigmas worse in <= 25% of directions; ties (none better too) to the larger sigma."""
    d = density.declared_sigma(model(row(1e-3, 0, 0), row(3e-3, 0, 6), row(1e-2, 0, 39)))
    assert d["sigma"] == 3e-3 and d["reason"] == "0 better, 6/64 worse"
    # better directions win over size, but only among safe sigmas
    assert density.declared_sigma(model(row(1e-3, 2, 0), row(3e-3, 1, 3), row(1e-2, 9, 30)))["sigma"] == 1e-3
    d = density.declared_sigma(model(row(1e-3, 0, 20), row(3e-3, 0, 40)))  # every sigma harms too many: refused
    assert d["sigma"] is None and "harms more than 25%" in d["reason"]


def test_declared_sigma_passes_over_a_sigma_that_costs_points_on_average():
    # the rerun's ladder-300k: 1e-2 sits on the 25% cut and its mean change is -8.6 [-16.9, -1.5] points
    cells = [row(1e-3, 0, 0), row(3e-3, 0, 0), {**row(1e-2, 0, 16), "mean_change_ci": [-0.169, -0.015]}]
    assert density.declared_sigma(model(*cells))["sigma"] == 3e-3
    cells[2]["mean_change_ci"] = [-0.141, 0.0]   # ladder-750k's: touches zero, not detected
    assert density.declared_sigma(model(*cells))["sigma"] == 1e-2


def test_declared_sigma_refuses_a_model_without_power():
    # ladder-40k answers 2 of 64: no direction can test worse, so its zero counts are blindness, not safety
    d = density.declared_sigma(model(row(1e-2, 0, 0), row(3e-2, 0, 0), can_lose=2))
    assert d["sigma"] is None and d["reason"].startswith("harm undetectable: 2 of 64 prompts")
    assert "p = 0.5" in d["reason"]
    assert density.declared_sigma(model(row(1e-2, 0, 0), can_lose=6))["sigma"] == 1e-2  # 6 is enough
    assert density.declared_sigma(model(row(1e-2, 0, 0), can_gain=5))["sigma"] is None


def test_declared_sigma_notes_a_choice_one_direction_from_flipping():
    # the old ladder-750k row: 1e-2 exactly on the 25% cut (16 of 64); one more worse direction moves the choice
    d = density.declared_sigma(model(row(1e-3, 0, 1), row(3e-3, 0, 6), row(1e-2, 0, 16), row(3e-2, 0, 64)))
    assert d["sigma"] == 1e-2 and "one more worse direction at 0.01 would declare 0.003" in d["notes"]
    # far from every cut and ahead by two better directions: no note
    d = density.declared_sigma(model(row(1e-3, 0, 0), row(3e-3, 3, 2), row(1e-2, 0, 40)))
    assert d["sigma"] == 3e-3 and d["notes"] == []


def test_plot_accepts_a_wilson_bound_a_rounding_error_above_zero(tmp_path):
    """Wilson's lower bound for 0 of 24 came out 1.4e-17 on SmolLM2: the figure must still draw."""
    import json

    from harness.tools.density import plot
    cell = {"sigma": 1e-3, "n": 24, "better": 0, "worse": 0, "mean_change": 0.001,
            "mean_change_ci": [-0.01, 0.01], "worse_ci": [1.3877787807814457e-17, 0.138]}
    result = {"models": [{"model": "m", "prompts": 64, "can_lose": 10, "can_gain": 54, "sigmas": {"0.001": cell}}]}
    plot(json.loads(json.dumps(result)), tmp_path / "density.png")
    assert (tmp_path / "density.png").stat().st_size > 0
