"""The tests behind the paired comparisons (comparisons.py) and their multiplicity control.

One test per comparison row, chosen by the data it pairs:
- 0/1 outcomes per prompt (greedy correctness; any metric whose per-prompt values are all 0 or 1): the exact
  McNemar test (two-sided binomial on the discordant prompts) gives p; the difference's 95% interval is
  Newcombe's paired hybrid score interval (method 10), which keeps its coverage at few discordant prompts;
- other per-prompt values (pass@k from sample counts, rewards, seed-averaged accuracy): the paired percentile
  bootstrap over prompts, its p read off the same resamples, with enough resamples that each bound's
  Monte-Carlo error stays under MC_TARGET;
- per-seed differences of run means: the Student-t interval and its t-test p (two-sided; one-sided where an
  experiment declares a direction for its primary endpoint).
Then Benjamini-Hochberg at Q over every tested row of one findings file. With two or more seeds a side, only
the seed-level row is a test (docs/architecture.md#calibration: the prompt-level rows reject far more than 5%
under the null once seeds vary); the others are printed as descriptive. The distributions and the binomial
and BH procedures are scipy.stats'.

    python -m pytest tests/test_stats.py -q
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

ALPHA = 0.05              # a row's nominal level, two-sided
Q = 0.05                  # Benjamini-Hochberg false discovery rate over a findings file's rows
Z975 = 1.959963984540054
N_BOOT = 20_000           # first resamples; doubled until both bounds' MC error < MC_TARGET (at most MAX_BOOT)
MAX_BOOT = 160_000        # a bound on a step of a discrete bootstrap distribution may never get there: it stops
MC_TARGET = 0.001         # 0.1 point for accuracy-type metrics (fractions), 0.001 in the metric's units otherwise
_CHUNK = 2_000            # resamples drawn at a time (memory: _CHUNK x prompts indices)


def mcnemar_exact(up: int, down: int) -> float:
    """Two-sided exact McNemar p: under no difference each discordant prompt is a fair coin between up and down,
    so min(up, down) is a tail of Binomial(up + down, 1/2), doubled (capped at 1; scipy.stats.binomtest, whose
    two-sided p is this at p = 1/2). 7 up / 1 down: 2 x 9/256."""
    n = up + down
    if n == 0:
        return 1.0
    return float(scipy_stats.binomtest(min(up, down), n, 0.5).pvalue)


def wilson(k: int, n: int, z: float = Z975) -> tuple[float, float]:
    """Wilson score interval for the proportion k/n."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, center - half), min(1.0, center + half)


def newcombe_paired(both: int, up: int, down: int, neither: int, z: float = Z975) -> tuple[float, float, float]:
    """(difference, low, high) of p_A - p_B for paired 0/1 outcomes: Newcombe's hybrid score interval.

    Newcombe RG (1998), "Improved confidence intervals for the difference between binomial proportions based
    on paired data", Statistics in Medicine 17:2635-2650, method 10: each side's Wilson interval, combined
    square-and-add with the estimated correlation phi between the sides, phi continuity-corrected as there
    (ad - bc - n/2 when ad - bc > n/2, 0 when 0 <= ad - bc <= n/2). Also in Fagerland, Lydersen & Laake,
    Statistical Analysis of Contingency Tables (2017), ch. 8. Chosen over the conditional interval (the
    binomial on discordant prompts mapped to the difference), which treats their number as fixed and misses
    the true difference far more often than 5% when most discordant prompts move one way.
    `both`: prompts both sides got right; `up`: A right, B wrong; `down`: A wrong, B right; `neither`.
    """
    n = both + up + down + neither
    if n == 0:
        return math.nan, math.nan, math.nan
    p1, p2 = (both + up) / n, (both + down) / n
    (l1, u1), (l2, u2) = wilson(both + up, n, z), wilson(both + down, n, z)
    margins = (both + up) * (down + neither) * (both + down) * (up + neither)
    cross = both * neither - up * down
    corrected = cross - n / 2 if cross > n / 2 else 0.0 if cross >= 0 else cross
    phi = corrected / math.sqrt(margins) if margins > 0 else 0.0
    low = (p1 - p2) - math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    high = (p1 - p2) + math.sqrt(max(0.0, (p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2))
    return p1 - p2, max(-1.0, low), min(1.0, high)


def is_binary(*columns) -> bool:
    """Every per-prompt value of every column is 0 or 1."""
    return all(np.isin(np.asarray(c, dtype=float), (0.0, 1.0)).all() for c in columns)


def discordant(a, b) -> tuple[int, int, int, int]:
    """(both, up, down, neither) of two 0/1 columns paired by prompt (up: a=1, b=0)."""
    a, b = np.asarray(a, dtype=float) == 1, np.asarray(b, dtype=float) == 1
    return int((a & b).sum()), int((a & ~b).sum()), int((~a & b).sum()), int((~a & ~b).sum())


# ----------------------------------------------------------------------------- Student t


def t_p(t: float, df: int) -> float:
    """Two-sided p of Student's t with df degrees of freedom (scipy.stats.t)."""
    return 1.0 if t == 0 else float(min(1.0, 2 * scipy_stats.t.sf(abs(t), df)))


def t_quantile(q: float, df: int) -> float:
    """The q-quantile of Student's t with df degrees of freedom (0.975: a 95% interval's multiplier)."""
    return float(scipy_stats.t.ppf(q, df))


def t_test(diffs) -> float:
    """Two-sided one-sample t-test p of mean(diffs) = 0 (>= 2 values with some spread); a declared direction's
    one-sided p follows from it (endpoints.one_sided)."""
    d = np.asarray(diffs, dtype=float)
    sd = float(d.std(ddof=1)) if d.size >= 2 else 0.0
    return math.nan if sd == 0 else t_p(float(d.mean()) / (sd / math.sqrt(d.size)), d.size - 1)


# ----------------------------------------------------------------------------- bootstrap


@dataclass(frozen=True)
class Boot:
    """A paired bootstrap's result: mean difference, percentile interval, its p, resamples, bounds' MC error."""
    mean: float
    low: float
    high: float
    p: float
    n_boot: int
    mc_error: float
    p_floor: bool     # no resample fell on the far side of 0: p is the smallest the resamples can give


def _mc_error(means: np.ndarray, alpha: float) -> float:
    """Monte-Carlo standard error of the alpha- and (1 - alpha)-quantiles of B resamples, the larger of the two:
    half the spread between the order statistics one binomial standard deviation of rank either side of
    B*alpha (the distribution-free quantile interval, read at +-1 SE)."""
    s = np.sort(means)
    b = s.size
    k = math.ceil(math.sqrt(b * alpha * (1 - alpha)))
    out = 0.0
    for q in (alpha, 1 - alpha):
        j = b * q
        lo, hi = max(0, math.floor(j) - k), min(b - 1, math.ceil(j) + k)
        out = max(out, (s[hi] - s[lo]) / 2)
    return float(out)


def paired_bootstrap(d, seed: int = 0, level: float = 0.95, n_boot: int = N_BOOT, target: float = MC_TARGET,
                     max_boot: int = MAX_BOOT) -> Boot:
    """Percentile bootstrap of mean(d) over prompts (d: per-prompt differences A - B, resampled by prompt id).

    Starts at n_boot resamples and doubles them until both bounds' Monte-Carlo error is under `target` (or
    max_boot). p inverts the percentile interval (the achieved significance level, Efron & Tibshirani 1993,
    An Introduction to the Bootstrap): twice the smaller share of resamples on either side of 0 (ties half),
    with the +1 of Davison & Hinkley (1997) so that it is never 0; p < ALPHA exactly when 0 is about outside
    the (1 - ALPHA) interval.
    """
    d = np.asarray(d, dtype=float)
    if d.size == 0:
        return Boot(math.nan, math.nan, math.nan, math.nan, 0, math.nan, False)
    rng = np.random.default_rng(seed)
    alpha = (1 - level) / 2
    chunks, drawn, want = [], 0, n_boot
    while True:
        while drawn < want:
            size = min(_CHUNK, want - drawn)
            chunks.append(d[rng.integers(0, d.size, size=(size, d.size))].mean(axis=1))
            drawn += size
        means = np.concatenate(chunks)
        err = _mc_error(means, alpha)
        if err < target or want >= max_boot:
            break
        want *= 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    below, above, ties = int((means < 0).sum()), int((means > 0).sum()), int((means == 0).sum())
    far = min(below, above) + ties / 2
    p = min(1.0, 2 * (far + 1) / (means.size + 1))
    return Boot(float(d.mean()), float(low), float(high), p, int(means.size), err, far == 0)


def crossed_means(d: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Means of d (rows x columns: seeds x prompts, or directions x prompts) under `resamples` crossed
    resamples: rows and columns each drawn with replacement, independently (multinomial weights)."""
    nr, nc = d.shape
    wr = rng.multinomial(nr, np.full(nr, 1 / nr), size=resamples)  # times each row is drawn
    wc = rng.multinomial(nc, np.full(nc, 1 / nc), size=resamples)
    return np.einsum("bi,ij,bj->b", wr, d, wc) / (nr * nc)


def crossed_bootstrap(d, seed: int = 0, level: float = 0.95, n_boot: int = N_BOOT, target: float = MC_TARGET,
                      max_boot: int = MAX_BOOT) -> Boot:
    """Percentile bootstrap of the mean of d (seeds x prompts: per-seed, per-prompt differences A - B),
    seeds and prompts resampled independently: both are samples, of training randomness and of the task.
    A prompt-only bootstrap of seed-averaged columns ignores the seeds' spread; a seed-only t-interval
    ignores the prompts'. Resamples double and p inverts the interval as in paired_bootstrap."""
    d = np.asarray(d, dtype=float)
    if d.ndim != 2 or d.size == 0:
        return Boot(math.nan, math.nan, math.nan, math.nan, 0, math.nan, False)
    rng = np.random.default_rng(seed)
    alpha = (1 - level) / 2
    chunks, drawn, want = [], 0, n_boot
    while True:
        while drawn < want:
            size = min(_CHUNK, want - drawn)
            chunks.append(crossed_means(d, size, rng))
            drawn += size
        means = np.concatenate(chunks)
        err = _mc_error(means, alpha)
        if err < target or want >= max_boot:
            break
        want *= 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    below, above, ties = int((means < 0).sum()), int((means > 0).sum()), int((means == 0).sum())
    far = min(below, above) + ties / 2
    p = min(1.0, 2 * (far + 1) / (means.size + 1))
    return Boot(float(d.mean()), float(low), float(high), p, int(means.size), err, far == 0)


# ----------------------------------------------------------------------------- multiplicity


def benjamini_hochberg(p, q: float = Q) -> tuple[np.ndarray, np.ndarray]:
    """(adjusted p, survives) by the Benjamini-Hochberg step-up procedure at false discovery rate q.

    Benjamini Y, Hochberg Y (1995), JRSS B 57:289-300. With the m p-values sorted, p_(1) <= ... <= p_(m), the
    largest k with p_(k) <= k q / m rejects p_(1..k); the adjusted p of p_(i) is min over j >= i of m p_(j) / j
    (capped at 1), and a row survives exactly when its adjusted p is <= q. NaN entries are not tests: they keep
    NaN and are left out of m.
    """
    p = np.asarray(p, dtype=float)
    adj = np.full(p.shape, np.nan)
    idx = np.flatnonzero(~np.isnan(p))
    if idx.size:
        adj[idx] = scipy_stats.false_discovery_control(p[idx], method="bh")
    return adj, np.where(np.isnan(adj), False, adj <= q)


def range_multiple(d: int) -> float:
    """c_d: the median of the largest of d i.i.d. |Z|, solving P(|Z| < c)^d = 1/2 (0.674 at d = 1): the range
    of one ES update in units of its RMS (harness/analysis/null.py)."""
    from statistics import NormalDist
    return NormalDist().inv_cdf((1 + 0.5 ** (1 / d)) / 2) if d > 0 else 0.0
