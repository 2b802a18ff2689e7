"""Learning curves: train reward and validation accuracy against FLOPs spent, every method on one axis.

One column per model; the top panel is the mean train reward of each step (the population's for
ES, the group's for GRPO, the rollouts' for PPO; a trailing mean over a tenth of the run's steps),
the bottom one validation greedy accuracy measured at fixed fractions of the budget
(`eval.every_flops_fraction`; without it the figure has the top row only). One line per main row
(each grid's chosen point only), the mean over seeds, with the seeds' min-max as a band. An
untrained row is a dotted level line at its validation score.
"""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: no display on servers or CI
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from harness.core.atomic import save_figure_atomic  # noqa: E402

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


def seed_band(curves: list[list[dict]], key: str, scale: float = 1.0, smooth: int = 1):
    """(x, mean, lo, hi) of `key` against cumulative FLOPs over seeds, on the shared x-range of all seeds.

    Seeds log at slightly different FLOPs (steps differ in token counts), so each is interpolated
    onto one grid before averaging; None when no seed logged `key`.
    """
    series = []
    for c in curves:
        pts = [(float(p["flops"]), float(p[key])) for p in c if p.get(key) is not None and p.get("flops") is not None]
        if pts:
            a = np.array(sorted(pts))
            a[:, 1] = rolling_mean(a[:, 1], -(-len(a) // smooth) if smooth > 1 else 1)  # ceil(len / smooth)
            series.append(a)
    if not series:
        return None
    if len(series) == 1:
        x, y = series[0][:, 0], scale * series[0][:, 1]
        return x, y, y, y
    lo_x, hi_x = max(s[0, 0] for s in series), min(s[-1, 0] for s in series)
    n = max(len(s) for s in series)
    x = np.linspace(lo_x, hi_x, n) if hi_x > lo_x else np.array([lo_x])
    ys = np.stack([scale * np.interp(x, s[:, 0], s[:, 1]) for s in series])
    return x, ys.mean(0), ys.min(0), ys.max(0)


def _name(row: pd.Series) -> str:
    short = row.get("point_label")  # a grid row: its point, without the "(best of ...)" note
    return short if isinstance(short, str) else str(row["label"])


def _has_curves(main: pd.DataFrame, column: str) -> bool:
    return column in main and bool(main[column].apply(lambda c: isinstance(c, list) and bool(c)).any())


def curves_plot(main: pd.DataFrame, path: Path, title: str = "") -> bool:
    """Write the figure; False (and no file) when no row has a curve yet."""
    if main.empty or not _has_curves(main, "train_curves"):
        return False
    models = list(dict.fromkeys(main["model"]))
    # one row per panel: (curves column, key, scale, smoothing); no empty validation row when an
    # experiment measured none during training
    panels = [("train_curves", "reward_mean", 1.0, SMOOTH_SHARE)]
    if _has_curves(main, "val_curves"):
        panels.append(("val_curves", VAL_METRIC, 100.0, 1))
    fig, axes = plt.subplots(len(panels), len(models), figsize=(5.0 * len(models), 3.8 if len(panels) == 1 else 6.4),
                             squeeze=False, sharex="col")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for j, model in enumerate(models):
        column = [axes[k][j] for k in range(len(panels))]
        val_ax = column[1] if len(panels) > 1 else None
        rows = main[(main["model"] == model) & (main["status"] == "ok")]
        for i, (_, r) in enumerate(rows.iterrows()):
            c = colors[i % len(colors)]
            if not r.get("trains", True):
                if val_ax is not None and not (isinstance(r.get("val"), float) and math.isnan(r["val"])) and r.get("val") is not None:
                    val_ax.axhline(100 * r["val"], color=c, ls=":", lw=1, label=f"{_name(r)} (untrained)")
                continue
            for ax, (col, key, scale, smooth) in zip(column, panels):
                curves = r.get(col)
                band = seed_band(curves if isinstance(curves, list) else [], key, scale, smooth)
                if band is None:
                    continue
                x, mean, lo, hi = band
                ax.plot(x, mean, color=c, lw=1.2, marker="o" if ax is val_ax else None, ms=3, label=_name(r))
                if (hi > lo).any():
                    ax.fill_between(x, lo, hi, color=c, alpha=0.15)
        column[0].set_title(str(model), fontsize=9)
        column[0].set_ylabel(f"train reward\n(trailing mean, 1/{SMOOTH_SHARE} of the steps)")
        if val_ax is not None:
            val_ax.set_ylabel(f"validation {VAL_METRIC} (%)")
        column[-1].set_xlabel("training FLOPs")
        for ax in column:
            ax.grid(alpha=0.3)
            if ax.lines:
                ax.legend(fontsize=6)
    fig.suptitle(title or "learning curves", fontsize=10)
    fig.tight_layout()
    save_figure_atomic(fig, path)
    return True
