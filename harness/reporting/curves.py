"""Learning curves: train reward and validation accuracy against FLOPs spent, every method on one axis.

One column per model; the top panel is the mean train reward of each step (the population's for
ES, the group's for GRPO, the rollouts' for PPO; a trailing mean over a tenth of the run's steps),
the bottom one validation greedy accuracy measured at fixed fractions of the budget
(`eval.every_flops_fraction`; without it the figure has the top row only). One line per main row
(each grid's chosen point only), the mean over seeds, with a 95% band: Student-t over seeds with two
or more, a Wilson interval over the curve's prompts with one seed when its points record how many
(`prompts`), none otherwise. The untrained base sits at 0 FLOPs with a level line at its validation
score, drawn last; a legend line says so when the records hold no such score.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from harness.core.atomic import save_figure_atomic
from harness.reporting.aggregate import t975
from harness.reporting.stats import wilson
from harness.reporting.style import BAND_ALPHA, BASE, colors, legend_below, new_figure, note_entry, styled

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


def _name(row: pd.Series) -> str:
    short = row.get("point_label")  # a grid row: its point, without the "(best of ...)" note
    return short if isinstance(short, str) else str(row["label"])


def _has_curves(main: pd.DataFrame, column: str) -> bool:
    return column in main and bool(main[column].apply(lambda c: isinstance(c, list) and bool(c)).any())


def _base_val(r: pd.Series) -> float | None:
    v = r.get("val")
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def _draw_trained(column, panels, r, color) -> float:
    """One trained row's mean line and 95% band in each panel; returns the largest FLOPs drawn."""
    right = 0.0
    val_ax = column[1] if len(panels) > 1 else None
    for ax, (col, key, scale, smooth) in zip(column, panels):
        curves = r.get(col)
        band = seed_band(curves if isinstance(curves, list) else [], key, scale, smooth)
        if band is None:
            continue
        x, mean, lo, hi = band
        ax.plot(x, mean, color=color, lw=1.4, marker="o" if ax is val_ax else None, ms=4, label=_name(r))
        if (hi > lo).any():
            ax.fill_between(x, lo, hi, color=color, alpha=BAND_ALPHA, lw=0)
        right = max(right, float(x.max()))
    return right


def _draw_base(val_ax, bases: list) -> bool:
    """The untrained rows at 0 FLOPs on the validation panel, with a level line; False when none has a score."""
    drawn = False
    for r in bases:
        v = _base_val(r)
        if val_ax is None or v is None:
            continue
        val_ax.axhline(100 * v, color=BASE["color"], ls=":", lw=1.2, zorder=BASE["zorder"])
        val_ax.plot([0.0], [100 * v], label=f"{_name(r)} (untrained, at 0 FLOPs)", **{**BASE, "ls": "none"})
        drawn = True
    return drawn


@styled
def curves_figure(main: pd.DataFrame, title: str = ""):
    """The learning-curves figure; None when no row has a curve yet."""
    if main.empty or not _has_curves(main, "train_curves"):
        return None
    # a model none of whose rows has a curve or a base score gets no column: an empty panel reads as a result
    models = [m for m in dict.fromkeys(main["model"]) if _has_curves(main[main["model"] == m], "train_curves")
              or _has_curves(main[main["model"] == m], "val_curves")]
    # one row per panel: (curves column, key, scale, smoothing); no empty validation row when an
    # experiment measured none during training
    panels = [("train_curves", "reward_mean", 1.0, SMOOTH_SHARE)]
    if _has_curves(main, "val_curves"):
        panels.append(("val_curves", VAL_METRIC, 100.0, 1))
    fig, axes = new_figure(len(panels), len(models), 5.4 * len(models), 5.0 if len(panels) == 1 else 8.2,
                           sharex="col")
    ok = main[main["status"] == "ok"]
    trains = ok["trains"].astype(bool) if "trains" in ok else pd.Series(True, index=ok.index)
    palette = colors(_name(r) for _, r in ok[trains].iterrows())
    missing_base = []
    for j, model in enumerate(models):
        column = [axes[k][j] for k in range(len(panels))]
        val_ax = column[1] if len(panels) > 1 else None
        rows = ok[ok["model"] == model]
        right = max([0.0, *(_draw_trained(column, panels, r, palette[_name(r)])
                            for _, r in rows[trains[rows.index]].iterrows())])
        bases = [r for _, r in rows[~trains[rows.index]].iterrows()]
        if bases and val_ax is not None and not _draw_base(val_ax, bases):
            missing_base.append(str(model))
        column[0].set_title(str(model))
        column[0].set_ylabel(f"train reward\n(trailing mean, 1/{SMOOTH_SHARE} of the steps)")
        if val_ax is not None:
            val_ax.set_ylabel(f"validation {VAL_METRIC} (%)\n[95% band]")
        column[-1].set_xlabel("training FLOPs")
        column[0].set_xlim(-0.04 * right, 1.04 * right if right else 1.0)  # 0 FLOPs (the base) inside the frame
        for ax in column:
            ax.grid(alpha=0.3)
    fig.suptitle(title or "learning curves")
    extra = [note_entry(f"base: no validation score in the records ({', '.join(missing_base)}), "
                        "so no point at 0 FLOPs")] if missing_base else []
    legend_below(fig, axes.flat, extra, max_cols=2)
    return fig


def curves_plot(main: pd.DataFrame, path: Path, title: str = "") -> bool:
    """Write curves_figure to `path`; False (and no file) when no row has a curve yet."""
    fig = curves_figure(main, title)
    if fig is None:
        return False
    save_figure_atomic(fig, path)
    return True
