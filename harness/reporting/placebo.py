"""ES beside its placebo: which rows of an experiment are a placebo ES and which ES row is its twin.

A placebo cell (method.fitness=placebo: methods/es/core.placebo) is ES with the reward-direction
link cut; its twin is the cell of the same model whose overrides are the placebo's without
`method.fitness=placebo`: the same sigma, alpha, N, prompts and budget. The pairing is read from the
cells' declared overrides in the experiment's manifest, never from labels, so renaming a cell
cannot change which rows are compared.

    python -m pytest tests/test_placebo_pairs.py -q
"""
from __future__ import annotations

import pandas as pd

from harness.core.records import Manifest

PLACEBO = "method.fitness=placebo"
KIND = "ES vs placebo"


def _cell_overrides(manifest: Manifest | None) -> dict[str, frozenset]:
    """Cell -> its overrides without the seed (every seed of a cell shares them)."""
    out: dict[str, frozenset] = {}
    for run in (manifest.runs if manifest else []):
        if run.grid or run.point:  # grid points are RL's; a placebo is a fixed cell
            continue
        out.setdefault(run.cell, frozenset(o for o in run.overrides if not o.startswith("seed=")))
    return out


def placebo_pairs(main: pd.DataFrame, manifest: Manifest | None) -> list[tuple[str, pd.Series, pd.Series]]:
    """(KIND, ES row, placebo row) per placebo cell whose twin ran, per model, successful rows only."""
    overrides = _cell_overrides(manifest)
    ok = main[main["status"] == "ok"]
    out = []
    for model in dict.fromkeys(ok["model"]):
        rows = {r["cell"]: r for _, r in ok[ok["model"] == model].iterrows()}
        for cell, row in rows.items():
            mine = overrides.get(cell)
            if mine is None or PLACEBO not in mine:
                continue
            twin = next((c for c, o in overrides.items() if o == mine - {PLACEBO} and c in rows), None)
            if twin is not None:
                out.append((KIND, rows[twin], row))
    return out
