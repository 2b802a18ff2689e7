"""Plots of an experiment's aggregated rows (harness/reporting/aggregate.py): pass@k panels and metric-versus-axis.

Every figure is written atomically (harness/core/atomic.py): concurrent cluster jobs never leave half a PNG.
"""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: no display on servers or CI
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from harness.core.atomic import save_figure_atomic  # noqa: E402
from harness.reporting.aggregate import NO_UPDATE  # noqa: E402


def passk_panels(main: pd.DataFrame, path: Path, title: str = "") -> None:
    """pass@k versus k (log scale), one panel per model, one line per main row (mean over seeds)."""
    models = list(dict.fromkeys(main["model"]))
    cols = min(len(models), 4)
    rows = math.ceil(len(models) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), squeeze=False, sharey=True)
    for ax, model in zip(axes.flat, models):
        for _, r in main[main["model"] == model].iterrows():
            curve = r.get("curve")
            if r["status"] != "ok" or not isinstance(curve, dict) or not curve:
                continue
            ks = sorted(int(k) for k in curve)
            name = r.get("point_label")  # a grid row: its point, without the "(best of ...)" note
            ax.plot(ks, [100 * curve[k] for k in ks], marker="o", ms=3,
                    label=name if isinstance(name, str) else r["label"])
        ax.set_xscale("log", base=2)
        ax.set_title(str(model), fontsize=9)
        ax.set_xlabel("k (samples per prompt)")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=6)
    for ax in axes.flat[len(models):]:
        ax.axis("off")
    axes[0][0].set_ylabel("pass@k on test (%)")
    fig.suptitle(title or "pass@k", fontsize=10)
    fig.tight_layout()
    save_figure_atomic(fig, path)


def axis_plot(points: pd.DataFrame, main: pd.DataFrame, spec: dict, metrics: list[str], path: Path,
              title: str = "") -> None:
    """One panel per metric: the swept cell's test metric versus the axis (log x), one line per model
    with its CI as a band, and the reference (e.g. tuned GRPO) as a star in the model's colour at the
    right edge plus a dotted level line, so each size's ES curve reads against its own RL result.
    A point whose runs never updated (status "no update": its numbers are the base model's) is not
    drawn; a note under the figure names it.
    """
    key, cell, ref = spec["key"], spec["cell"], spec.get("reference")
    sweep = points[(points["cell"] == cell) & (points["status"] == "ok")].copy()
    sweep["x"] = [p.get(key) for p in sweep["point"]]
    xs = sorted(sweep["x"].dropna().unique())
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.2 * len(metrics), 4.0), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    ref_x = xs[-1] * 2.5 if xs else 1.0
    for ax, m in zip(axes[0], metrics):
        for i, model in enumerate(dict.fromkeys(points[points["cell"] == cell]["model"])):
            c = colors[i % len(colors)]
            s = sweep[sweep["model"] == model].sort_values("x")
            if not s.empty:
                ax.plot(s["x"], 100 * s[m], marker="o", color=c, label=str(model))
                ax.fill_between(s["x"], 100 * s[f"{m}_lo"], 100 * s[f"{m}_hi"], color=c, alpha=0.15)
            hit = main[(main["model"] == model) & (main["cell"] == ref) & (main["status"] == "ok")] if ref else []
            if len(hit):
                y = 100 * hit.iloc[0][m]
                ax.axhline(y, color=c, ls=":", lw=1)
                ax.plot([ref_x], [y], marker="*", ms=12, color=c, ls="none")
        ax.set_xscale("log")
        if xs:
            ax.set_xticks([*xs, ref_x], [*(f"{x:g}" for x in xs), ref or ""])
            ax.minorticks_off()
        ax.set_xlabel(f"{key} ({ref + ' = star, dotted line' if ref else ''})")
        ax.set_ylabel(f"test {m} (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title or f"test metrics versus {key}", fontsize=10)
    skipped = points[(points["cell"] == cell) & (points["status"] == NO_UPDATE)]
    if not skipped.empty:
        names = ", ".join(f"{m} {key.split('.')[-1]}={p.get(key):g}" if isinstance(p.get(key), (int, float))
                          else f"{m} {lab}" for m, p, lab in zip(skipped["model"], skipped["point"], skipped["label"]))
        fig.text(0.01, 0.005, f"Not drawn, NO UPDATE (every iteration skipped its update; weights = base model): {names}",
                 fontsize=7, ha="left", va="bottom", wrap=True)
        fig.tight_layout(rect=(0, 0.06, 1, 1))
    else:
        fig.tight_layout()
    save_figure_atomic(fig, path)


def pareto_plot(main: pd.DataFrame, path: Path, title: str = "", x: str = "kl_to_base", y: str = "mean_reward") -> bool:
    """Reward against KL to the base model (the ES paper's Table 2 reading), one panel per model, one point
    per main row with its CIs as error bars; up and to the left is better. False (nothing written)
    when the rows lack either metric (eval.kl_to_base=false)."""
    if x not in main.columns or y not in main.columns:
        return False
    ok = main[(main["status"] == "ok") & main[x].notna() & main[y].notna()]
    if ok.empty:
        return False
    models = list(dict.fromkeys(ok["model"]))
    fig, axes = plt.subplots(1, len(models), figsize=(4.8 * len(models), 3.8), squeeze=False)
    for ax, model in zip(axes.flat, models):
        for _, r in ok[ok["model"] == model].iterrows():
            ax.errorbar(r[x], r[y], xerr=[[r[x] - r[f"{x}_lo"]], [r[f"{x}_hi"] - r[x]]],
                        yerr=[[r[y] - r[f"{y}_lo"]], [r[f"{y}_hi"] - r[y]]], fmt="o", ms=4, capsize=2, label=r["label"])
        ax.set_title(str(model), fontsize=9)
        ax.set_xlabel(f"{x} (nats per token)")
        ax.set_ylabel(y)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.suptitle(title or f"{y} against {x}", fontsize=10)
    fig.tight_layout()
    save_figure_atomic(fig, path)
    return True
