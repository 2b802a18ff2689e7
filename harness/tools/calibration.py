"""How often each test the comparisons ship rejects, under the null and under a planted effect.

Simulated experiments at the shapes the committed and GPU experiment files use: seeds x prompts per arm, two
arms (A, B) paired by seed and prompt, 0/1 outcomes (greedy correctness) or continuous ones (rewards). A
prompt has a difficulty shared by every arm and seed (so the arms are positively correlated, as real runs
are); each run (arm, seed) has its own shift, drawn with a between-seed SD `tau` (in points of the run mean:
what a different training seed does); A gets `effect` points more. Each dataset is tested as
harness/reporting/comparisons.py tests it:

- seed_t: Student-t over the per-seed differences of run means (two or more seeds);
- crossed: the crossed bootstrap of seeds and prompts (stats.crossed_bootstrap);
- by_prompt: prompts paired after averaging seeds: exact McNemar on one seed's 0/1 outcomes, else the
  paired bootstrap (stats.paired_bootstrap).

Rejection = two-sided p < 0.05. The bootstraps use a fixed 1,000 resamples here (the report starts at
20,000 and doubles): at a 5% level that moves a rejection rate by far less than the simulation's own error,
which is sqrt(r(1-r)/sims), about 1.5 points at r = 5% and 200 simulations.

    python -m harness.tools.calibration --out results/bench/calibration.json     # about 15 min on one core
    python -m harness.tools.calibration --sims 100 --out /tmp/c.json             # a rougher, faster table
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
# numpy and the stats module load inside the functions that use them: `--help` answers before heavy imports
# (tests/test_help.py)

SEEDS = (1, 3, 5, 8)
PROMPTS = (8, 100, 500)
TAUS = (0.0, 3.0, 6.0)        # between-seed SD of a run's mean, in points
EFFECTS = (0.0, 5.0)          # planted A - B, in points
OUTCOMES = ("binary", "continuous")
B = 1000


def simulate(rng: np.random.Generator, seeds: int, prompts: int, tau: float, effect: float, outcome: str):
    """(A, B): seeds x prompts outcomes of two arms."""
    import numpy as np

    q = 1 / (1 + np.exp(-rng.normal(math.log(0.4 / 0.6), 1.5, size=prompts)))  # prompt difficulty, mean ~0.4
    arms = []
    for shift in (effect / 100, 0.0):
        u = rng.normal(0.0, tau / 100, size=(seeds, 1))                         # each run's own shift
        p = q[None, :] + u + shift
        if outcome == "binary":
            arms.append((rng.random((seeds, prompts)) < np.clip(p, 0, 1)).astype(float))
        else:
            arms.append(p + rng.normal(0.0, 0.2, size=(seeds, prompts)))
    return arms


def tests(a: np.ndarray, b: np.ndarray, rng_seed: int) -> dict[str, float]:
    """Each shipped test's two-sided p on one simulated dataset (NaN where it does not apply)."""
    import numpy as np

    from harness.reporting import stats

    out = {"seed_t": math.nan, "crossed": math.nan}
    d = a - b
    if a.shape[0] >= 2:
        out["seed_t"] = stats.t_test(d.mean(axis=1))
        if float(np.ptp(d)) > 0:
            out["crossed"] = stats.crossed_bootstrap(d, rng_seed, n_boot=B, max_boot=B).p
    ma, mb = a.mean(axis=0), b.mean(axis=0)
    if a.shape[0] == 1 and stats.is_binary(ma, mb):
        _, up, down, _ = stats.discordant(ma, mb)
        out["by_prompt"] = stats.mcnemar_exact(up, down)
    else:
        out["by_prompt"] = stats.paired_bootstrap(ma - mb, rng_seed, n_boot=B, max_boot=B).p if np.ptp(ma - mb) > 0 \
            else 1.0
    return out


def cell(seeds: int, prompts: int, tau: float, effect: float, outcome: str, sims: int, seed: int) -> dict:
    import numpy as np

    from harness.reporting import stats

    rng = np.random.default_rng([seed, seeds, prompts, int(10 * tau), int(10 * effect), OUTCOMES.index(outcome)])
    hits: dict[str, list] = {}
    for i in range(sims):
        a, b = simulate(rng, seeds, prompts, tau, effect, outcome)
        for name, p in tests(a, b, i).items():
            if not math.isnan(p):
                hits.setdefault(name, []).append(p < stats.ALPHA)
    return {"seeds": seeds, "prompts": prompts, "tau": tau, "effect": effect, "outcome": outcome, "sims": sims,
            "reject": {k: round(float(np.mean(v)), 4) for k, v in hits.items()}}


def table(rows: list[dict]) -> str:
    """The false-positive rates (effect 0) and power (planted effect) as one markdown table."""
    lines = ["| outcome | seeds | prompts | seed SD | FPR seed_t | FPR crossed | FPR by_prompt | power seed_t | "
             "power crossed | power by_prompt |", "|" + "---|" * 10]
    key = {(r["outcome"], r["seeds"], r["prompts"], r["tau"], r["effect"]): r["reject"] for r in rows}
    for o, s, p, t in itertools.product(OUTCOMES, SEEDS, PROMPTS, TAUS):
        null, eff = key.get((o, s, p, t, 0.0)), key.get((o, s, p, t, EFFECTS[-1]))
        if null is None:
            continue

        def pct(d, k):
            return "-" if d is None or k not in d else f"{100 * d[k]:.1f}"
        lines.append(f"| {o} | {s} | {p} | {t:g} | " + " | ".join(pct(null, k) for k in ("seed_t", "crossed", "by_prompt"))
                     + " | " + " | ".join(pct(eff, k) for k in ("seed_t", "crossed", "by_prompt")) + " |")
    return "\n".join(lines)


def markdown(result: dict) -> str:
    """The JSON's table with what it is: rejection rates in %, two-sided 5% level."""
    return (f"# Calibration of the comparison tests\n\n`{result['command']}` ({result['sims']} simulated datasets per "
            f"cell; bootstraps at {result['bootstrap_resamples']} resamples). Rejection rate in % at two-sided "
            f"p < {result['alpha']:g}: FPR with no true difference, power with A {result['effect_points']:g} points "
            "above B. Seed SD: the between-run SD of a run's mean, in points. seed_t: Student-t over per-seed "
            "differences; crossed: crossed bootstrap of seeds and prompts; by_prompt: seeds averaged per prompt, "
            "then exact McNemar (one seed, 0/1) or the paired bootstrap. A rate's simulation error is about "
            f"sqrt(r(1 - r) / {result['sims']}).\n\n" + table(result["cells"]) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.tools.calibration", description=__doc__.split("\n")[0])
    ap.add_argument("--sims", type=int, default=200, help="simulated datasets per cell (default 200)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="write the JSON here (results/bench/calibration.json)")
    a = ap.parse_args(argv)
    from harness.reporting import stats

    t0, rows = time.time(), []
    for o, s, p, t, e in itertools.product(OUTCOMES, SEEDS, PROMPTS, TAUS, EFFECTS):
        rows.append(cell(s, p, t, e, o, a.sims, a.seed))
        print(f"{o:10s} seeds {s} prompts {p:3d} tau {t:g} effect {e:g}: {rows[-1]['reject']}", flush=True)
    result = {"command": "python -m harness.tools.calibration " + " ".join(argv or sys.argv[1:]),
              "alpha": stats.ALPHA, "bootstrap_resamples": B, "effect_points": EFFECTS[-1], "sims": a.sims,
              "seconds": round(time.time() - t0, 1), "cells": rows}
    print(table(rows))
    if a.out:
        from harness.core.atomic import write_json_atomic, write_text_atomic
        write_json_atomic(a.out, result)
        write_text_atomic(a.out.with_suffix(".md"), markdown(result))
        print(f"wrote {a.out} and {a.out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
