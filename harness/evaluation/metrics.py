"""Evaluation statistics: pass@k, maj@k and bootstrap confidence intervals over prompts.

Pure Python/numpy (no torch) so tables and notebooks can import it cheaply. All randomness
comes from `numpy.random.default_rng(seed)`, so every number here is reproducible.

Test: python -m pytest tests/test_metrics.py -q
"""
from __future__ import annotations

import hashlib
import json
import math

import numpy as np

# Per-prompt scores kept in each metric entry of a record (harness/reporting/comparisons.py pairs them):
#   "prompts": prompt_set_id of the split's evaluated prompts, in order (a prompt's id is its row index
#              within that set);
#   "per_prompt": one value per prompt (greedy_acc 0/1 ints when binary, rewards and maj@k floats rounded to
#              PER_PROMPT_DIGITS), or for pass@k "correct" (correct samples c per prompt, ints) and
#              "n_samples" (n), from which pass_at_k(n, c, k) recomputes each prompt's pass@k exactly.
PER_PROMPT_DIGITS = 4


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimator of Chen et al. 2021 ("Evaluating LLMs trained on code").

    Uses the numerically stable product form 1 - prod_{i=n-c+1}^{n} (1 - k/i), which equals
    1 - C(n-c, k) / C(n, k) without forming huge binomials.

    Args:
        n: completions sampled for the prompt.
        c: how many of them are correct.
        k: the k in pass@k (1 <= k <= n).

    Returns:
        The probability that at least one of k completions drawn without replacement is correct.

    Raises:
        ValueError: if any argument is negative, k < 1, k > n or c > n.
    """
    if n < 0 or c < 0 or k < 1:
        raise ValueError(f"pass_at_k needs n >= 0, c >= 0, k >= 1; got n={n}, c={c}, k={k}")
    if k > n:
        raise ValueError(f"pass_at_k: k={k} > n={n}; sample at least k completions per prompt")
    if c > n:
        raise ValueError(f"pass_at_k: c={c} correct > n={n} sampled; check the counts")
    if n - c < k:  # every k-subset must contain a correct completion
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def _vote(answers: list[str | None], correct: list[bool], idx) -> bool:
    """One majority vote over `answers[idx]` (idx in original order); True if the winner is correct."""
    counts: dict[str, int] = {}  # insertion order = first-seen order, used for tie-breaking
    first: dict[str, int] = {}
    for i in idx:
        a = answers[i]
        if a is None:  # unparseable completions abstain rather than forming a bloc
            continue
        if a not in counts:
            counts[a], first[a] = 0, i
        counts[a] += 1
    if not counts:
        return False
    winner, best = None, -1
    for a, n in counts.items():  # strict '>' keeps the earliest answer on ties
        if n > best:
            winner, best = a, n
    return bool(correct[first[winner]])


def maj_at_k(
    answers: list[str | None], correct: list[bool], k: int, n_subsets: int = 1000, seed: int = 0
) -> float:
    """Majority-vote accuracy (maj@k) for one prompt.

    Votes count only answers that are not None; the most frequent answer wins, ties go to the
    answer seen first (earliest index in the subset order), and if every answer is None the
    vote is wrong. The vote is correct if the first completion carrying the winning answer is
    correct (completions with the same extracted answer should share correctness).

    When len(answers) == k this is one deterministic vote. When len(answers) > k it is the
    expected vote accuracy over random k-subsets, estimated by drawing `n_subsets` random
    k-subsets (without replacement, each preserving the original order) with
    `numpy.random.default_rng(seed)` and averaging the votes.

    Args:
        answers: extracted answer per completion, None where extraction failed.
        correct: whether each completion is correct (aligned with `answers`).
        k: completions per vote.
        n_subsets: random subsets drawn when len(answers) > k.
        seed: seed for the subset draws.

    Returns:
        The vote accuracy in [0, 1].

    Raises:
        ValueError: if k < 1, k > len(answers) or the two lists differ in length.
    """
    n = len(answers)
    if len(correct) != n:
        raise ValueError(f"maj_at_k: {n} answers but {len(correct)} correctness flags")
    if not 1 <= k <= n:
        raise ValueError(f"maj_at_k needs 1 <= k <= len(answers)={n}, got k={k}")
    if n == k:
        return float(_vote(answers, correct, range(n)))
    rng = np.random.default_rng(seed)
    wins = 0
    for _ in range(n_subsets):
        idx = np.sort(rng.choice(n, size=k, replace=False))  # sorted: keep original order
        wins += _vote(answers, correct, idx)
    return wins / n_subsets


def bootstrap_ci(
    values: list[float], n_boot: int = 1000, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean, resampling prompts with replacement.

    Args:
        values: one score per prompt.
        n_boot: bootstrap resamples.
        seed: seed for `numpy.random.default_rng`; the result is deterministic given it.
        level: coverage of the interval, e.g. 0.95.

    Returns:
        (low, high). (mean, mean) for a single value, (nan, nan) for an empty list.
    """
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return (math.nan, math.nan)
    if x.size == 1:
        return (float(x[0]), float(x[0]))
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    return (float(low), float(high))


def summarize(
    per_prompt: dict[str, list[float]], n_boot: int = 1000, seed: int = 0, level: float = 0.95
) -> dict[str, dict]:
    """Mean and bootstrap CI for each metric.

    Args:
        per_prompt: metric name -> one value per prompt (e.g. {"pass@1": [...], "maj@8": [...]}).
        n_boot: bootstrap resamples.
        seed: bootstrap seed (same for every metric).
        level: CI coverage.

    Returns:
        metric name -> {"mean", "ci_low", "ci_high", "n"}; mean is nan when there are no values.
    """
    out = {}
    for name, values in per_prompt.items():
        low, high = bootstrap_ci(values, n_boot=n_boot, seed=seed, level=level)
        mean = float(np.mean(values)) if len(values) else math.nan
        out[name] = {"mean": mean, "ci_low": low, "ci_high": high, "n": len(values)}
    return out


def prompt_set_id(prompts: list[str]) -> str:
    """A stable id of an ordered list of prompt texts (16 hex digits of SHA-256 over their JSON)."""
    return hashlib.sha256(json.dumps(list(prompts), ensure_ascii=False).encode()).hexdigest()[:16]


def attach_per_prompt(metrics: dict[str, dict], per_prompt: dict[str, list[float]], prompts: list[str],
                      counts: list[int] | None = None, n_samples: int = 0) -> dict[str, dict]:
    """Add each metric's per-prompt scores to its summary entry (in place; see the keys above).

    Args:
        metrics: summarize()'s output.
        per_prompt: the per-prompt values summarize() was given.
        prompts: the evaluated prompt texts, in order (only their set id is stored).
        counts: correct samples per prompt; pass@k entries store these instead of pass@k values.
        n_samples: samples per prompt behind `counts`.
    """
    pid = prompt_set_id(prompts)
    for name, entry in metrics.items():
        entry["prompts"] = pid
        if name.startswith("pass@") and counts is not None:
            entry["correct"], entry["n_samples"] = [int(c) for c in counts], int(n_samples)
        elif name == "greedy_acc" and all(v in (0, 1) for v in per_prompt[name]):
            entry["per_prompt"] = [int(v) for v in per_prompt[name]]
        else:
            entry["per_prompt"] = [round(float(v), PER_PROMPT_DIGITS) for v in per_prompt[name]]
    return metrics


def per_prompt_values(entry: dict, metric: str) -> np.ndarray | None:
    """The per-prompt scores of one metric entry of a record; None for records made before they were kept."""
    if "per_prompt" in entry:
        return np.asarray(entry["per_prompt"], dtype=float)
    if "correct" in entry and metric.startswith("pass@"):
        n, k = int(entry["n_samples"]), int(metric[len("pass@"):])
        return np.asarray([pass_at_k(n, int(c), k) for c in entry["correct"]], dtype=float)
    return None
