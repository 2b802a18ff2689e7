"""The random-walk null (harness/analysis/null.py): a pure ES random walk, made with methods.es.core's own
update on random z-scores, reads as the null in every figure; a planted signal does not.

    python -m pytest tests/test_analysis_null.py -q
"""
from __future__ import annotations

import math
import random

import pytest
import torch

from harness.analysis.null import MATCH, NO_NORM, NOT_RW, Walk, frac_below, walk_of
from harness.analysis.report import markdown, measure
from harness.analysis.settings import AnalysisConfig
from harness.reporting.stats import range_multiple
from methods.es.core import es_update, zscore

torch.set_num_threads(1)
ALPHA, N, T = 5e-4, 30, 20
SHAPES = {  # 200k coordinates in four groups (norms small, as in a model)
    "model.embed_tokens.weight": (250, 256),        # 64000
    "model.layers.0.self_attn.q_proj.weight": (128, 256),  # 32768
    "model.layers.0.mlp.up_proj.weight": (400, 250),       # 100000
    "model.layers.0.input_layernorm.weight": (3232,),      # 3232
}
CFG = AnalysisConfig(top_k=100, top_fraction=0.01)


@pytest.fixture(scope="module")
def walk():
    """theta0 and the update after T iterations of es_update with z-scores of random rewards."""
    g = torch.Generator().manual_seed(0)
    theta0 = {n: torch.randn(s, generator=g) * 0.05 + (1.0 if "norm" in n else 0.0) for n, s in SHAPES.items()}
    master = [theta0[n].clone() for n in SHAPES]
    rng = random.Random(0)
    for _ in range(T):
        z = zscore([rng.random() for _ in range(N)])
        es_update(master, [rng.getrandbits(31) for _ in range(N)], z, ALPHA)
    delta = {n: (m.double() - theta0[n].double()).float() for n, m in zip(SHAPES, master)}
    return theta0, delta


def _run(theta0, delta, walk_=None, why=""):
    walk_ = walk_ or Walk.zscore(ALPHA, N, T)
    member = (ALPHA / N * 2.0 * math.sqrt(2 / math.pi), "alpha/N x 2 x 0.798")
    out = measure(delta, theta0, CFG, walk_, why, (walk_.s1, "one ES update"), member)
    return {"name": "toy · ES · seed 0", "model": "toy", "method": "es", "label": "ES", "seed": 0, "flops": None,
            "path": "-", "tied": False, "entropy": [], "heldout": {}, **out}


def _md(run):
    return markdown({"records": "sim", "runs": [run], "skipped": [], "not_ok": [], "ratios": {}}, CFG)


def test_pure_random_walk_matches_the_null(walk):
    theta0, delta = walk
    r = _run(theta0, delta)
    nl = r["null"]
    d = sum(t.numel() for t in delta.values())
    s = ALPHA * math.sqrt(T / N)
    assert nl["walk"]["s"] == pytest.approx(s) and nl["walk"]["s1"] == pytest.approx(ALPHA / math.sqrt(N))
    # (a) drift and ||delta||: within 2%, whole and per group
    assert r["drift"]["delta_norm"] == pytest.approx(s * math.sqrt(d), rel=0.02)
    assert nl["delta_norm"]["ratio"] == pytest.approx(1, abs=0.02)
    for g, c in nl["drift"].items():
        assert abs(c["ratio"] - 1) <= c["tol"], g
    # (b) group shares within 3 binomial sd (+1)
    for key in ("top_k", "top_fraction"):
        for g, c in nl[key].items():
            assert abs(c["observed"] - c["null"]) <= 3 * c["sd"] + 1, (key, g, c)
    # (c) fraction below one ES update and one member's step: within 1 point of erf(t / (s sqrt 2))
    for key, c in nl["below"].items():
        assert abs(c["observed"] - frac_below(s, c["threshold"])) < 0.01, key
    assert nl["below"]["one_step"]["null"] == pytest.approx(math.erf(1 / math.sqrt(2 * T)))
    # NOTE-076's threshold, one update's range: c_d x its RMS, c_d = 4.64 at d = 200,000 (reporting/stats.py)
    c = r["sparsity"]["range"] / (ALPHA / math.sqrt(N))
    assert c == pytest.approx(range_multiple(d)) and 4.6 < c < 4.7
    assert nl["below"]["range"]["null"] == pytest.approx(math.erf(c / math.sqrt(2 * T)))  # 70.1% at T = 20
    assert all(nl["verdict"].values())
    md = _md(r)
    assert md.count(MATCH) == 4  # drift, top-k, top fraction, sparsity
    assert "one ES update" in md and "one member's step" in md and "one update's range" in md
    ms = r["localisation"]["max_set"]  # a continuous walk: one coordinate holds the max
    assert ms["size"] == 1 and "## Maximum-|delta| set" in md and f"| {ms['size']} |" in md


def test_planted_signal_departs_from_the_null(walk):
    theta0, delta = walk
    planted = dict(delta)
    name = "model.layers.0.mlp.up_proj.weight"  # half the coordinates: a consistent shift of 2 s
    planted[name] = delta[name] + 2 * ALPHA * math.sqrt(T / N)
    r = _run(theta0, planted)
    nl = r["null"]
    assert nl["drift"]["mlp"]["ratio"] > 2 and nl["delta_norm"]["ratio"] > 1.5
    assert nl["top_k"]["mlp"]["ratio"] > 1.8 and nl["top_k"]["embed"]["ratio"] < 0.2
    assert nl["below"]["one_step"]["observed"] < nl["below"]["one_step"]["null"] - 0.05
    assert not any(nl["verdict"].values())
    md = _md(r)
    assert MATCH not in md and "departs from the random-walk null" in md


def test_no_null_for_adam_and_unlogged_normalisations(walk):
    assert walk_of("grpo", {}, None, []) == (None, NOT_RW)
    for mconf in ({"normalize": "centered_ranks"}, {"normalize": "none", "antithetic": True}):
        assert walk_of("es", {"alpha": 1e-3, "population": 8, **mconf}, None, []) == (None, NO_NORM)
    theta0, delta = walk
    r = _run(theta0, delta)
    r["null"] = {"none": NOT_RW}
    r["method"] = "grpo"
    md = _md(r)
    assert NOT_RW in md and MATCH not in md


def test_walk_constants_from_the_step_log():
    steps = [{"reward_mean": 0.5, "reward_std": 0.2, "extras": {"skipped": False}},
             {"reward_mean": 0.5, "reward_std": 0.0, "extras": {"skipped": True}},
             {"reward_mean": 0.1, "reward_std": 0.3, "extras": {"skipped": False}}]
    w, _ = walk_of("es", {"alpha": 1e-3, "population": 10}, None, steps)
    assert w.t == 2 and w.s == pytest.approx(1e-3 * math.sqrt(2 / 10), rel=1e-6)
    w, _ = walk_of("es", {"alpha": 1e-3, "population": 10, "normalize": "none"}, None, steps)
    assert w.s == pytest.approx(1e-3 / 10 * math.sqrt(10 * (0.04 + 0.25 + 0.09 + 0.01)))
    w, _ = walk_of("es", {"alpha": 1e-3, "population": 10, "antithetic": True}, None, steps)
    assert w.s == pytest.approx(1e-3 * math.sqrt(2 / 9))


def test_antithetic_constant_matches_es_update():
    """E S_t = N^2/(N-1) for mirrored pairs: the per-coordinate variance of one antithetic update."""
    rng, n, var = random.Random(1), 10, []
    x = [torch.zeros(2_000)]
    for _ in range(1000):
        z = zscore([rng.random() for _ in range(n)])
        coefs = [z[2 * i] - z[2 * i + 1] for i in range(n // 2)]
        before = x[0].clone()
        es_update(x, [rng.getrandbits(31) for _ in range(n // 2)], coefs, 1.0, n=n)
        var.append(float((x[0] - before).pow(2).mean()))
    assert sum(var) / len(var) == pytest.approx(1 / (n - 1), rel=0.06)


def test_drift_ratios_pair_cells_and_never_pool_a_grid():
    """By hand: ES seeds 0.10 and 0.14 (mean 0.12) over GRPO lr 1e-6 (0.004) = 30x, over lr 1e-5 (0.012) = 10x;
    a pooled GRPO mean (0.008, 15x) is not reported; base has no family ratio; the placebo is an ES cell."""
    from harness.analysis.report import drift_ratios

    def run(method, label, d):
        return {"model": "m", "method": method, "label": label, "drift": {"whole": d}}
    got = drift_ratios([run("es", "ES", 0.10), run("es", "ES", 0.14), run("grpo", "GRPO lr=1e-6", 0.004),
                        run("grpo", "GRPO lr=1e-5", 0.012), run("base", "Original", 0.0)])
    assert [(p["es"], p["rl"], round(p["ratio"], 6)) for p in got["m"]] == [("ES", "GRPO lr=1e-6", 30.0),
                                                                          ("ES", "GRPO lr=1e-5", 10.0)]
    assert drift_ratios([run("es", "ES", 0.1)]) == {}
