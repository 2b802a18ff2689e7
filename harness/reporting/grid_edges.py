"""Grid points chosen at an edge of their grid, named under grid.md.

Why: a grid whose validation choice sits at its smallest or largest value of a key says the best value may lie
outside the grid, and a two-point grid always chooses an edge; a reader of the RL rows should see that beside
the numbers, not work it out from the labels.
"""
from __future__ import annotations

import ast

import pandas as pd

from harness.reporting.format import md_cell


def _point(value) -> dict:
    """A point's {key: value}: a dict in memory, its repr in a grid.csv read back."""
    if isinstance(value, dict):
        return value
    try:
        parsed = ast.literal_eval(str(value))
    except (ValueError, SyntaxError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def edge_notes(points: pd.DataFrame) -> list[str]:
    """One line per chosen grid point whose value of a numeric key is its grid's smallest or largest (with at
    least two values of that key in the grid, per model)."""
    notes = []
    grids = points[points["grid"].apply(lambda g: isinstance(g, str))]
    for (model, grid), g in grids.groupby(["model", "grid"], sort=False, dropna=False):
        chosen = g[g["chosen"]]
        if chosen.empty:
            continue
        best = _point(chosen.iloc[0]["point"])
        values = {}
        for p in g["point"]:
            for k, v in _point(p).items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    values.setdefault(k, set()).add(v)
        edges = []
        for k, vs in values.items():
            if len(vs) < 2 or k not in best:
                continue
            side = "smallest" if best[k] == min(vs) else "largest" if best[k] == max(vs) else None
            if side:
                edges.append(f"{k.split('.')[-1]}={best[k]:g} (the {side} of {', '.join(f'{v:g}' for v in sorted(vs))})")
        if edges:
            where = f"{md_cell(model)}: " if isinstance(model, str) else ""
            notes.append(f"- {where}{md_cell(grid)} chose {'; '.join(edges)}: at an edge of its grid, so the best value "
                         "may lie outside it" + (" (a two-point grid always chooses an edge)"
                                                 if all(len(v) == 2 for v in values.values() if len(v) > 1) else ""))
    return notes
