"""The seed-level test holds its level at the seed count experiments use (harness/tools/calibration.py)."""
import numpy as np

from harness.reporting import stats
from harness.tools.calibration import simulate


def _rate(tau: float, effect: float, sims: int = 2000) -> float:
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(sims):
        a, b = simulate(rng, 3, 100, tau, effect, "binary")
        hits += stats.t_test((a - b).mean(axis=1)) < stats.ALPHA
    return hits / sims


def test_the_seed_level_t_rejects_3_to_7_percent_under_the_null_at_3_seeds():
    for tau in (0.0, 6.0):   # no between-seed variance, and seed noise dominating
        assert 0.03 <= _rate(tau, 0.0) <= 0.07, tau


def test_the_seed_level_t_finds_a_large_planted_effect_without_seed_noise():
    assert _rate(0.0, 15.0, sims=300) > 0.5
