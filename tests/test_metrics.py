"""Hand-worked checks of pass@k, maj@k and the bootstrap CI.

Run: python -m pytest tests/test_metrics.py -q
"""
import itertools
import math

import numpy as np
import pytest

from harness.evaluation.metrics import bootstrap_ci, maj_at_k, pass_at_k, summarize


def test_pass_at_k_all_subsets_hit():
    # 5 samples, 3 correct: any 4 of them must include a correct one.
    assert pass_at_k(5, 3, 4) == 1.0


def test_pass_at_k_matches_binomial_form():
    expected = 1 - math.comb(187, 10) / math.comb(200, 10)
    assert abs(pass_at_k(200, 13, 10) - expected) < 1e-12


@pytest.mark.parametrize("n,k", [(1, 1), (10, 3), (16, 16)])
def test_pass_at_k_edges(n, k):
    assert pass_at_k(n, 0, k) == 0.0
    assert pass_at_k(n, n, 1) == 1.0


@pytest.mark.parametrize("n,c", [(1, 0), (7, 3), (16, 9), (16, 16)])
def test_pass_at_1_is_fraction_correct(n, c):
    assert abs(pass_at_k(n, c, 1) - c / n) < 1e-12


@pytest.mark.parametrize("n,c,k", [(3, 1, 4), (3, 4, 1), (-1, 0, 1), (3, -1, 1), (3, 1, 0)])
def test_pass_at_k_rejects_bad_counts(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_maj_tie_goes_to_first_seen():
    # "7" and "3" both have two votes; "7" appears first, and it is the correct one.
    answers = ["7", "3", "3", "7"]
    assert maj_at_k(answers, [True, False, False, True], k=4) == 1.0
    # Same votes, first-seen answer now wrong.
    assert maj_at_k(["3", "7", "7", "3"], [False, True, True, False], k=4) == 0.0


def test_maj_none_never_wins():
    assert maj_at_k([None, None, "3"], [False, False, True], k=3) == 1.0


def test_maj_all_none_is_wrong():
    assert maj_at_k([None, None, None], [False, False, False], k=3) == 0.0


def test_maj_rejects_k_above_n():
    with pytest.raises(ValueError):
        maj_at_k(["1", "2"], [True, False], k=3)


def test_maj_subsets_match_exhaustive_average():
    answers = ["5", "3", None, "5", "3", "3", "8"]
    correct = [a == "5" for a in answers]
    k = 3
    # Exact expectation: every ordered k-subset is equally likely.
    exact = np.mean(
        [maj_at_k([answers[i] for i in s], [correct[i] for i in s], k=k)
         for s in itertools.combinations(range(len(answers)), k)]
    )
    est = maj_at_k(answers, correct, k=k, n_subsets=2000, seed=0)
    assert abs(est - exact) < 0.03
    assert est == maj_at_k(answers, correct, k=k, n_subsets=2000, seed=0)  # deterministic


def test_bootstrap_ci_contains_mean_and_is_deterministic():
    rng = np.random.default_rng(1)
    values = rng.binomial(1, 0.4, size=200).astype(float).tolist()
    low, high = bootstrap_ci(values, seed=3)
    assert low < np.mean(values) < high
    assert (low, high) == bootstrap_ci(values, seed=3)


def test_bootstrap_ci_degenerate_inputs():
    assert bootstrap_ci([0.25]) == (0.25, 0.25)
    assert all(math.isnan(x) for x in bootstrap_ci([]))


def test_summarize_fields():
    out = summarize({"pass@1": [0.0, 1.0, 1.0, 0.0], "empty": []})
    assert out["pass@1"]["mean"] == 0.5 and out["pass@1"]["n"] == 4
    assert out["pass@1"]["ci_low"] <= 0.5 <= out["pass@1"]["ci_high"]
    assert math.isnan(out["empty"]["mean"]) and out["empty"]["n"] == 0
