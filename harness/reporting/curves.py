"""Learning curves: train reward and validation accuracy against FLOPs spent, every method on one FLOPs axis.

One column per model. The train reward (the population's mean for ES, the group's for GRPO, the
rollouts' for PPO; a trailing mean over a tenth of the run's steps) gets one panel per batch kind
(aggregate.train_batch): a reward on one fixed batch, the same prompts every step (ES as in the paper),
rises as the model fits those prompts and is not the quantity a reward on rolling batches (new prompts
every step: GRPO, PPO) is, so the two never share an axis. The bottom panel is validation greedy
accuracy measured at fixed fractions of the budget (`eval.every_flops_fraction`; without it there is
no such panel). One line per main row (each grid's chosen point only, its legend saying so), the mean
over seeds, with a 95% band: Student-t over seeds with two or more, a Wilson interval over the point's
prompts with one seed when its points record how many (`prompts`); a legend line names the rows with
no band. The untrained base sits at 0 FLOPs with a level line at its validation score, drawn last; a
legend line says so when the records hold no such score. Each row keeps one colour, marker and dash
in every panel, so rows with equal values all show.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from harness.core.atomic import save_figure_atomic
from harness.reporting.aggregate import t975
from harness.reporting.stats import wilson
from harness.reporting.style import BAND_ALPHA, BASE, legend_below, looks, new_figure, note_entry, styled

VAL_METRIC = "greedy_acc"
SMOOTH_SHARE = 10  # the train panel shows a trailing mean over 1/10 of each run's steps


def rolling_mean(y: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over `window` points (fewer at the start): per-step rewards of a 64-completion
    GRPO step swing by +-0.2, which hides the trend the figure is for."""
    if window <= 1:
        return y
    c = np.cumsum(np.insert(y, 0, 0.0))
    idx = np.arange(1, len(y) + 1)
    lo = np.maximum(idx - window, 0)
    return (c[idx] - c[lo]) / (idx - lo)


def _series(c: list[dict], key: str, smooth: int) -> np.ndarray | None:
    """[[flops, value, prompts]] of one seed, sorted by FLOPs and smoothed; prompts is nan when unrecorded."""
    pts = [(float(p["flops"]), float(p[key]), float(p.get("prompts") or math.nan))
           for p in c if p.get(key) is not None and p.get("flops") is not None]
    if not pts:
        return None
    a = np.array(sorted(pts))
    a[:, 1] = rolling_mean(a[:, 1], -(-len(a) // smooth) if smooth > 1 else 1)  # ceil(len / smooth)
    return a


def _wilson_band(a: np.ndarray, scale: float):
    """95% Wilson band of one seed's accuracies over each point's prompts; flat (no band) when unrecorded."""
    y = scale * a[:, 1]
    if np.isnan(a[:, 2]).any():
        return y, y
    bounds = [wilson(round(p * n), int(n)) for p, n in zip(a[:, 1], a[:, 2])]
    return np.array([scale * b[0] for b in bounds]), np.array([scale * b[1] for b in bounds])


def seed_band(curves: list[list[dict]], key: str, scale: float = 1.0, smooth: int = 1):
    """(x, mean, lo, hi) of `key` against cumulative FLOPs: the mean over seeds and its 95% interval.

    Seeds log at slightly different FLOPs (steps differ in token counts), so each is interpolated
    onto one grid of their shared x-range before the Student-t interval over seeds (the tables' rule
    for a mean over seeds). One seed: a Wilson interval when each point records its `prompts`
    (an accuracy), else lo = hi = the curve. None when no seed logged `key`.
    """
    series = [a for a in (_series(c, key, smooth) for c in curves) if a is not None]
    if not series:
        return None
    if len(series) == 1:
        x, y = series[0][:, 0], scale * series[0][:, 1]
        lo, hi = _wilson_band(series[0], scale) if smooth == 1 else (y, y)
        return x, y, lo, hi
    lo_x, hi_x = max(s[0, 0] for s in series), min(s[-1, 0] for s in series)
    n = max(len(s) for s in series)
    x = np.linspace(lo_x, hi_x, n) if hi_x > lo_x else np.array([lo_x])
    ys = np.stack([scale * np.interp(x, s[:, 0], s[:, 1]) for s in series])
    mean, half = ys.mean(0), t975(len(series) - 1) * ys.std(0, ddof=1) / math.sqrt(len(series))
    return x, mean, mean - half, mean + half


BATCH_TITLES = {  # a train panel's title per batch kind (aggregate.train_batch)
    "fixed": "train reward on one fixed batch (the same prompts every step)",
    "rolling": "train reward on rolling batches (new prompts every step)",
    "mixed": "train reward, stages on fixed and on rolling batches",
    None: "train reward (batch kind not in the records)",
}


def _name(row: pd.Series) -> str:
    """The row's label as the table prints it: a grid's chosen point says so ("(best of 4 on validation)")."""
    return str(row["label"])


def _has_curves(main: pd.DataFrame, column: str) -> bool:
    return column in main and bool(main[column].apply(lambda c: isinstance(c, list) and bool(c)).any())


def _curves(r: pd.Series, column: str) -> list:
    c = r.get(column)
    return c if isinstance(c, list) else []


def batch_of(r: pd.Series) -> str | None:
    """The batch kind its train reward was measured on, from its steps' tag; None for records read
    before the tag (or rows whose seeds disagree, which one label cannot hold)."""
    kinds = {s.get("batch") for c in _curves(r, "train_curves") for s in c if isinstance(s, dict)}
    return kinds.pop() if len(kinds) == 1 else None


def band_of(curves: list[list[dict]], key: str) -> str | None:
    """What seed_band's 95% band is for these curves: "seeds" (Student-t over two or more), "N prompts"
    (a Wilson interval, one seed whose every point records its prompt count), or None (no band)."""
    series = [[p for p in c if p.get(key) is not None and p.get("flops") is not None] for c in curves]
    series = [c for c in series if c]
    if len(series) >= 2:
        return "seeds"
    counts = {p.get("prompts") for p in series[0]} if series else {None}
    return None if None in counts or not all(counts) else "/".join(f"{n:g}" for n in sorted(counts)) + " prompts"


def _base_val(r: pd.Series) -> float | None:
    v = r.get("val")
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def _draw_line(ax, r, look: dict, panel: tuple) -> float:
    """One trained row's mean line and its 95% band (where seed_band has one) in one panel; returns the
    largest FLOPs drawn (0 when the row has no curve here)."""
    col, key, scale, smooth = panel[1:]
    band = seed_band(_curves(r, col), key, scale, smooth)
    if band is None:
        return 0.0
    x, mean, lo, hi = band
    # a train curve has hundreds of points: a marker on a tenth of them names the row without hiding it
    ax.plot(x, mean, lw=1.4, ms=5, markevery=max(1, len(x) // 10), label=_name(r), **look)
    if (hi > lo).any():
        ax.fill_between(x, lo, hi, color=look["color"], alpha=BAND_ALPHA, lw=0)
    return float(x.max())


def _draw_base(val_ax, bases: list) -> bool:
    """The untrained rows at 0 FLOPs on the validation panel, with a level line; False when none has a score."""
    drawn = False
    for r in bases:
        v = _base_val(r)
        if val_ax is None or v is None:
            continue
        val_ax.axhline(100 * v, color=BASE["color"], ls=":", lw=1.2, zorder=BASE["zorder"])
        val_ax.plot([0.0], [100 * v], label=f"{_name(r)} (untrained, at 0 FLOPs; dotted: its level)",
                    **{**BASE, "ls": "none"})
        drawn = True
    return drawn


def _panels(trained: list) -> list[tuple]:
    """(batch kind or "val", curves column, key, scale, smoothing) per panel row: one train panel per batch
    kind the rows have, then validation when any row measured it (no empty panel)."""
    kinds = list(dict.fromkeys(batch_of(r) for r in trained if _curves(r, "train_curves")))
    panels = [(k, "train_curves", "reward_mean", 1.0, SMOOTH_SHARE) for k in kinds]
    if any(_curves(r, "val_curves") for r in trained):
        panels.append(("val", "val_curves", VAL_METRIC, 100.0, 1))
    return panels


def _val_label(bands: set) -> str:
    """The validation axis label: which 95% band its lines carry, one short line per kind."""
    named = ["[95% band: t over seeds]" if b == "seeds" else f"[95% band: Wilson, {b}]" for b in sorted(bands - {None})]
    return "\n".join([f"validation {VAL_METRIC} (%)", *named])


def _train_label(bands: set) -> str:
    return "\n".join(["train reward", f"(trailing mean, 1/{SMOOTH_SHARE} of the steps)",
                      *(["[95% band: t over seeds]"] if "seeds" in bands else [])])


@styled
def curves_figure(main: pd.DataFrame, title: str = ""):
    """The learning-curves figure; None when no row has a curve yet."""
    if main.empty or not _has_curves(main, "train_curves"):
        return None
    ok = main[main["status"] == "ok"]
    trains = ok["trains"].astype(bool) if "trains" in ok else pd.Series(True, index=ok.index)
    trained = [r for _, r in ok[trains].iterrows()]
    # a model none of whose rows has a curve gets no column: an empty panel reads as a result
    models = [m for m in dict.fromkeys(main["model"]) if any(
        _curves(r, "train_curves") or _curves(r, "val_curves") for r in trained if r["model"] == m)]
    panels = _panels(trained)
    if not panels or not models:  # curves only on rows that did not succeed
        return None
    fig, axes = new_figure(len(panels), len(models), 5.4 * len(models), 2.9 * len(panels) + 1.6, sharex="col")
    palette = looks(_name(r) for r in trained)
    missing_base, unbanded = [], []
    for j, model in enumerate(models):
        column = [axes[i][j] for i in range(len(panels))]
        rows = [r for r in trained if r["model"] == model]
        right = 0.0
        for ax, panel in zip(column, panels):
            drawn = [r for r in rows if panel[0] == "val" or batch_of(r) == panel[0]]
            right = max([right, *(_draw_line(ax, r, palette[_name(r)], panel) for r in drawn)])
            bands = {band_of(_curves(r, panel[1]), panel[2]) for r in drawn if _curves(r, panel[1])}
            if panel[0] == "val":
                ax.set_ylabel(_val_label(bands))
                ax.set_title("validation, greedy decoding, the same prompts at every point")
                unbanded += [_name(r) for r in drawn if _curves(r, panel[1])
                             and band_of(_curves(r, panel[1]), panel[2]) is None]
            else:
                ax.set_ylabel(_train_label(bands))
                ax.set_title(BATCH_TITLES[panel[0]])
        bases = [r for _, r in ok[~trains].iterrows() if r["model"] == model]
        val_ax = column[-1] if panels[-1][0] == "val" else None
        if bases and val_ax is not None and not _draw_base(val_ax, bases):
            missing_base.append(str(model))
        column[0].set_title(f"{model}\n{column[0].get_title()}")
        column[-1].set_xlabel("training FLOPs")
        column[0].set_xlim(-0.04 * right, 1.04 * right if right else 1.0)  # 0 FLOPs (the base) inside the frame
        for ax in column:
            ax.grid(alpha=0.3)
    fig.suptitle(title or "learning curves")
    extra = [note_entry(f"base: no validation score in the records ({', '.join(missing_base)}), "
                        "so no point at 0 FLOPs")] if missing_base else []
    if unbanded:  # one seed and no prompt count: no interval can be drawn, and the reader is told which
        names = "every row" if len(set(unbanded)) == len({_name(r) for r in trained if _curves(r, "val_curves")}) \
            else ", ".join(dict.fromkeys(unbanded))
        extra.append(note_entry(f"no validation band for {names}: one seed, prompt count not in the records"))
    legend_below(fig, axes.flat, extra, max_cols=2)
    return fig


def curves_plot(main: pd.DataFrame, path: Path, title: str = "") -> bool:
    """Write curves_figure to `path`; False (and no file) when no row has a curve yet."""
    fig = curves_figure(main, title)
    if fig is None:
        return False
    save_figure_atomic(fig, path)
    return True
