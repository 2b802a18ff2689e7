"""Tests for the placebo ES (method.fitness=placebo, methods/es/core.placebo): ES's functional null.

The placebo keeps everything of ES (member seeds, sigma, alpha, N, prompts, budget, the multiset of
rewards) and cuts one link: which reward goes with which direction. So on a problem with a planted
signal ES must climb and the placebo must not, while both take steps of the walk's size.

    python -m pytest tests/test_es_placebo.py -q
"""
from __future__ import annotations

import json
import math
import random
import statistics

import pytest
import torch

from harness.core.steplog import make_ledger
from methods.es import core as es_core
from methods.es.core import es_update, normalize, placebo, update_terms

torch.set_num_threads(1)
D, N, T, SIGMA, ALPHA = 4000, 30, 40, 1e-2, 1e-3


def planted(fitness: str, antithetic: bool = False, seed: int = 0):
    """ES on theta in R^D with fitness <w, theta> (w a fixed unit vector): the exact update rule of
    methods/es/core, members perturbed from the fp32 master. Returns (final <w, theta>, step norms)."""
    g = torch.Generator().manual_seed(1234)
    w = torch.randn(D, generator=g)
    w /= w.norm()
    master = [torch.zeros(D)]
    norms = []
    for it in range(T):
        rng = random.Random(f"planted-{seed}-{it}")
        seeds = [rng.getrandbits(31) for _ in range(N // 2 if antithetic else N)]
        members, signs = es_core.members(seeds, antithetic)
        rewards = [float(w @ (master[0] + sign * SIGMA * es_core.noise(s, 0, master[0])))
                   for s, sign in zip(members, signs)]
        if fitness == "placebo":
            rewards = placebo(rewards, antithetic, random.Random(f"placebo-{seed}-{it}"))
        terms, coefs = update_terms(members, signs, normalize(rewards))
        norms.append(es_update(master, terms, coefs, ALPHA, n=len(members)))
    return float(w @ master[0]), norms


def test_es_climbs_a_planted_signal_and_its_placebo_does_not():
    """With z-scored fitness and a perfect linear signal, ES gains about alpha per step along w
    (alpha/N * sum z_n u_n, u_n = <eps_n, w>, and sum z_n u_n = N * std(u) ~ N); the placebo's gain
    is the walk's, N(0, T * alpha^2 / N)."""
    real = [planted("real", seed=s)[0] for s in range(3)]
    fake = [planted("placebo", seed=s)[0] for s in range(3)]
    walk_sd = ALPHA * math.sqrt(T / N)
    assert min(real) > 0.8 * T * ALPHA                # ~0.97 T alpha: sum z_n u_n = N * corr(z, u)
    assert max(abs(f) for f in fake) < 4 * walk_sd    # the placebo stays within the walk's spread
    assert min(real) > 20 * walk_sd


@pytest.mark.parametrize("antithetic", [False, True])
def test_the_placebos_steps_are_the_walks_size(antithetic):
    """E||step||^2 = (alpha/N)^2 * sum z^2 * D = alpha^2 D / N for z-scores (sum z^2 = N), whatever
    the reward, for full members; antithetic pairs step by (z+ - z-) on one direction."""
    _, norms = planted("placebo", antithetic)
    _, real = planted("real", antithetic)
    if not antithetic:
        walk = ALPHA * math.sqrt(D / N)
        assert statistics.fmean(norms) == pytest.approx(walk, rel=0.02)
        assert statistics.fmean(real) == pytest.approx(walk, rel=0.02)  # ES's norm is the walk's too
    else:  # the same number as ES's on average: a whole pair moves, so (z+ - z-) keeps its law
        assert statistics.fmean(norms) == pytest.approx(statistics.fmean(real), rel=0.1)


def test_placebo_permutes_members_or_whole_mirrored_pairs():
    r = [0.1, 0.9, 0.3, 0.5, 0.2, 0.7]
    p = placebo(r, False, random.Random(0))
    assert sorted(p) == sorted(r) and p != r
    assert placebo(r, False, random.Random(0)) == p  # seeded: the same permutation again
    pairs = placebo(r, True, random.Random(1))
    assert sorted(zip(pairs[::2], pairs[1::2])) == sorted(zip(r[::2], r[1::2]))


def test_fitness_setting_is_checked_and_labelled():
    from methods.es import ES
    with pytest.raises(ValueError, match="method.fitness='fake' is unknown; use one of real, placebo"):
        ES(fitness="fake")
    assert ES(sigma=1e-3, alpha=5e-4).label() == "es sigma=0.001 alpha=0.0005"
    assert ES(sigma=1e-3, alpha=5e-4, fitness="placebo").label() == "es sigma=0.001 alpha=0.0005 fitness=placebo"


def test_placebo_run_scores_what_es_scores_and_updates_elsewhere(tmp_path):
    """Through the real method on a tiny model: iteration 1's members score the same rewards under
    both (same seeds, same start), the updates differ, and the record names the placebo."""
    from tests.test_es_variants import N as POP, P, TASK, make_es, ref_policy, snapshot
    runs = {}
    for fitness in ("real", "placebo"):
        pol = ref_policy()
        ledger = make_ledger("samples", 2 * POP * P, tmp_path / fitness, progress=False)
        out = make_es(fitness=fitness).train(pol, TASK, ledger, tmp_path / fitness)
        steps = [json.loads(x) for x in (tmp_path / fitness / "train_log.jsonl").read_text().splitlines()]
        runs[fitness] = (out, snapshot(pol.model), steps)
    (real, w_real, log_real), (fake, w_fake, log_fake) = runs["real"], runs["placebo"]
    assert real["fitness"] == "real" and fake["fitness"] == "placebo"
    assert real["steps"] == fake["steps"] == 2
    assert any(not torch.equal(a, b) for a, b in zip(w_real, w_fake))
    # the first iteration's rewards were scored before any update: the same; the steps differ
    first = [(s["reward_mean"], s["reward_std"], s["extras"]["reward_max"]) for s in (log_real[0], log_fake[0])]
    assert first[0] == first[1]
    assert log_real[0]["extras"]["update_norm"] != log_fake[0]["extras"]["update_norm"]
