"""Tests for harness/reporting/placebo.py: a placebo cell is paired with its twin by overrides.

    python -m pytest tests/test_placebo_pairs.py -q
"""
from __future__ import annotations

import pandas as pd

from harness.core.records import Manifest, PlannedRun
from harness.reporting.placebo import KIND, placebo_pairs

CELLS = {  # label -> overrides, deliberately labelled so that no label pattern could pair them
    "base": ["method=base"],
    "alpha": ["method=es", "method.sigma=0.01"],
    "beta": ["method=es", "method.sigma=0.01", "method.fitness=placebo"],
    "gamma": ["method=es", "method.sigma=0.001"],
    "delta": ["method=es", "method.sigma=0.001", "method.fitness=placebo"],
    "orphan": ["method=es", "method.sigma=0.1", "method.fitness=placebo"],  # its twin never planned
}


def manifest(seeds=(0, 1)) -> Manifest:
    runs = [PlannedRun(index=i, model=None, seed=s, cell=c, column=c, label=c, grid=None,
                       overrides=[*o, f"seed={s}"], method=o[0].split("=")[1])
            for i, (c, o, s) in enumerate((c, o, s) for c, o in CELLS.items() for s in seeds)]
    return Manifest(group="g", runs=runs)


def main(status=None) -> pd.DataFrame:
    status = status or {}
    return pd.DataFrame([{"model": "m", "cell": c, "label": c, "status": status.get(c, "ok")} for c in CELLS])


def test_each_placebo_is_paired_with_the_cell_it_differs_from_by_fitness_only():
    got = [(k, a["cell"], b["cell"]) for k, a, b in placebo_pairs(main(), manifest())]
    assert got == [(KIND, "alpha", "beta"), (KIND, "gamma", "delta")]


def test_a_failed_twin_gives_no_pair_and_no_manifest_gives_none():
    got = [(a["cell"], b["cell"]) for _, a, b in placebo_pairs(main({"alpha": "failed"}), manifest())]
    assert got == [("gamma", "delta")]
    assert placebo_pairs(main(), None) == []
