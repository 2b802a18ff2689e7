"""The comparisons' tests and multiplicity control (harness/reporting/stats.py) against hand-worked values.

    python -m pytest tests/test_stats.py -q
"""
import math

import numpy as np
import pytest

from harness.reporting.aggregate import t975
from harness.reporting.stats import (MC_TARGET, benjamini_hochberg, discordant, is_binary, mcnemar_exact,
                                     newcombe_paired, paired_bootstrap, t_p, t_test, wilson)


@pytest.mark.parametrize("up, down, p", [
    (7, 1, 2 * (1 + 8) / 2 ** 8),      # real_cpu's ES sigma 3e-3: 0.0703
    (6, 0, 2 / 2 ** 6),                # the fewest one-way moves that reject: 0.03125
    (5, 0, 2 / 2 ** 5),                # 0.0625: five of five is not enough
    (3, 1, 2 * (1 + 4) / 2 ** 4),      # 0.625
    (10, 10, 1.0),                     # the doubled tail passes 1: capped
    (0, 0, 1.0),                       # nothing changed: nothing to test
])
def test_mcnemar_exact_is_the_doubled_binomial_tail(up, down, p):
    assert mcnemar_exact(up, down) == pytest.approx(p)
    assert mcnemar_exact(down, up) == pytest.approx(p)
    assert mcnemar_exact(7, 1) == pytest.approx(0.0703, abs=5e-5)


def test_benjamini_hochberg_on_the_papers_example():
    """Benjamini & Hochberg (1995), section 4: 15 p-values; at q = 0.05 the step-up rule rejects the 4 smallest
    (p_(4) = 0.0095 <= 4/15 x 0.05 = 0.0133, and no larger k has p_(k) <= k/15 x 0.05), where Bonferroni
    (0.05/15 = 0.0033) rejects 3."""
    p = [0.0201, 0.0001, 0.0004, 0.0019, 0.0095, 0.0278, 0.0298, 0.0344, 0.0459, 0.3240, 0.4262, 0.5719, 0.6528,
         0.7590, 1.000]                                         # unsorted on purpose
    adj, keep = benjamini_hochberg(p)
    assert sorted(np.asarray(p)[keep]) == [0.0001, 0.0004, 0.0019, 0.0095]
    assert adj[p.index(0.0095)] == pytest.approx(0.0095 * 15 / 4)              # 0.0356
    assert adj[p.index(0.0201)] == pytest.approx(min(0.0201 * 15 / 5, 0.0278 * 15 / 6, 0.0298 * 15 / 7))  # 0.0603


def test_benjamini_hochberg_by_hand():
    """p = 0.01, 0.04, 0.03, 0.20 (m = 4). Sorted: 0.01, 0.03, 0.04, 0.20 against k/4 x 0.05 = 0.0125, 0.025,
    0.0375, 0.05: only 0.01 <= its line, so one survives. Adjusted: m p / k = 0.04, 0.06, 0.0533, 0.20, then the
    running minimum from the largest: 0.04, 0.0533, 0.0533, 0.20. A NaN (a row with no test) is not in m."""
    adj, keep = benjamini_hochberg([0.01, 0.04, 0.03, math.nan, 0.20])
    assert list(keep) == [True, False, False, False, False]
    assert adj[[0, 1, 2, 4]] == pytest.approx([0.04, 0.16 / 3, 0.16 / 3, 0.20]) and math.isnan(adj[3])
    adj, keep = benjamini_hochberg([0.01, 0.02, 0.03, 0.04])        # every p under q: all survive, adj = 0.04
    assert keep.all() and adj == pytest.approx([0.04] * 4)
    assert benjamini_hochberg([])[1].size == 0


def test_student_t_p_against_closed_forms_and_the_t_table():
    for t in (0.3, 1.0, 2.5, 9.0):
        assert t_p(t, 1) == pytest.approx(1 - 2 * math.atan(t) / math.pi, rel=1e-10)      # Cauchy
        assert t_p(t, 2) == pytest.approx(1 - t / math.sqrt(2 + t * t), rel=1e-10)
    for df in range(1, 31):   # aggregate.py's 3-decimal t_{0.975, df}: p = 0.05 up to that rounding
        assert t_p(t975(df), df) == pytest.approx(0.05, abs=2e-4), df
    assert t_p(1.959963984540054, 10 ** 6) == pytest.approx(0.05, abs=1e-5)             # the normal limit
    d = [0.10, 0.135, 0.115]   # t = 11.51 on 2 df
    t = np.mean(d) / (np.std(d, ddof=1) / math.sqrt(3))
    assert t_test(d) == pytest.approx(1 - t / math.sqrt(2 + t * t)) and math.isnan(t_test([0.1, 0.1]))


def test_newcombe_interval_by_hand_and_its_edges():
    """7 up / 1 down among 300 prompts, 36 right on both sides. Wilson 95% for p_A = 43/300 and p_B = 37/300,
    phi from ad - bc = 36 x 256 - 7 x 1 = 9209, above n/2 so corrected to 9059, over sqrt(43 x 257 x 37 x 263)
    = 10370: phi = 0.8736; then L = d - sqrt((p_A - l_A)^2 - 2 phi (p_A - l_A)(u_B - p_B) + (u_B - p_B)^2),
    U likewise."""
    d, lo, hi = newcombe_paired(36, 7, 1, 256)
    (la, ua), (lb, ub) = wilson(43, 300), wilson(37, 300)
    pa, pb = 43 / 300, 37 / 300
    phi = (36 * 256 - 7 - 150) / math.sqrt(43 * 257 * 37 * 263)
    assert phi == pytest.approx(0.8736, abs=1e-4)
    assert lo == pytest.approx(d - math.sqrt((pa - la) ** 2 - 2 * phi * (pa - la) * (ub - pb) + (ub - pb) ** 2))
    assert hi == pytest.approx(d + math.sqrt((pb - lb) ** 2 - 2 * phi * (pb - lb) * (ua - pa) + (ua - pa) ** 2))
    assert d == pytest.approx(0.02) and lo < 0 < hi            # agrees with McNemar's p = 0.07 here
    d, lo, hi = newcombe_paired(0, 0, 0, 50)                  # nothing right, nothing changed
    assert d == 0 and lo <= 0 <= hi
    d, lo, hi = newcombe_paired(0, 20, 0, 0)    # all 20 gained: Wilson 20/20 from 0.839, 0/20 to 0.161, phi 0
    assert d == 1 and hi == 1 and lo == pytest.approx(1 - math.sqrt(2) * (1 - wilson(20, 20)[0]))   # 0.772
    assert is_binary([0, 1, 1], [1, 0, 0]) and not is_binary([0, 0.5], [1, 0])
    assert discordant([1, 1, 0, 0, 1], [1, 0, 1, 0, 0]) == (1, 2, 1, 1)


def test_newcombe_coverage_at_few_discordant_prompts():
    """Coverage of the 95% interval for p_A - p_B by simulation: 300 prompts, the discordant ones expected
    8, 20, 50, three in four of them (or all) up, A's accuracy 50%; 1500 draws each. A larger run (20000 draws
    per cell, the up share 1/2, 3/4, 7/8 and 1, B's accuracy 12% and 50%; MC SE 0.0015) measured 0.950-0.977
    with 8 discordant prompts expected, 0.947-0.959 with 20 and 0.949-0.955 with 50; given exactly that many
    discordant prompts, 0.931-1.000, 0.956-1.000 and 0.933-1.000. The conditional alternative (Clopper-Pearson
    on the discordant prompts, mapped to the difference with their number held fixed) fell to 0.52, 0.45-0.46
    and 0.39-0.40 with every discordant prompt up (4000 draws), because that number is itself random."""
    rng = np.random.default_rng(0)
    n, draws = 300, 1500
    for expected in (8, 20, 50):
        for up_share in (0.75, 1.0):
            pd_ = expected / n
            truth = pd_ * (2 * up_share - 1)
            both = 0.5 - pd_ * up_share
            tables = rng.multinomial(n, [both, pd_ * up_share, pd_ * (1 - up_share), 1 - both - pd_], size=draws)
            hits = sum(lo <= truth <= hi for lo, hi in (newcombe_paired(*t)[1:] for t in tables))
            assert hits / draws >= 0.93, (expected, up_share, hits / draws)


def test_bootstrap_p_matches_its_interval_and_its_mc_error_the_theory():
    rng = np.random.default_rng(5)
    for shift in (0.0, 0.05, 0.12, 0.2):
        d = rng.normal(shift, 1.0, 200)
        r = paired_bootstrap(d)
        assert (r.p < 0.05) == (r.low > 0 or r.high < 0) or min(abs(r.low), abs(r.high)) < 3 * r.mc_error
        assert r.low < r.mean < r.high and r.n_boot >= 20_000
    # the sample quantile's Monte-Carlo SE: sqrt(a(1-a)/B) / density at the quantile; here the bootstrap
    # distribution is about normal with sd s = sd(d)/sqrt(n)
    d = rng.normal(0, 1.0, 400)
    r = paired_bootstrap(d, target=1.0)                         # no doubling: B = 20000
    s = d.std() / math.sqrt(d.size)
    theory = math.sqrt(0.025 * 0.975 / r.n_boot) / (math.exp(-1.96 ** 2 / 2) / math.sqrt(2 * math.pi)) * s
    assert r.n_boot == 20_000 and r.mc_error == pytest.approx(theory, rel=0.35)
    wide = rng.normal(0, 0.8, 100)                # s = 0.08: MC error ~0.0015 at 20000, needs 40000-80000
    r = paired_bootstrap(wide)
    assert r.n_boot > 20_000 and r.mc_error < MC_TARGET
    floor = paired_bootstrap(np.full(30, 0.1) + rng.normal(0, 0.001, 30))
    assert floor.p_floor and floor.p == pytest.approx(2 / (floor.n_boot + 1))
