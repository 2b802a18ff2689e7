"""Plots of an experiment's aggregated rows (harness/reporting/aggregate.py): pass@k panels and metric-versus-axis.

Each figure has a builder that returns it (the layout tests render those) and a writer that saves it
atomically (harness/core/atomic.py): concurrent cluster jobs never leave half a PNG. The shared look
(font sizes, the base row's style, legends under the axes) is harness/reporting/style.py.
"""
from __future__ import annotations

import math
import textwrap
from pathlib import Path

import matplotlib.pyplot as plt  # noqa: F401  (tests patch plots.plt's Axes and Figure)
import pandas as pd

from harness.core.atomic import save_figure_atomic
from harness.reporting.aggregate import NO_UPDATE
from harness.reporting.style import (BAND_ALPHA, BASE, FONT, colors, legend_below, looks, margin_limits, new_figure,
                                     styled)

DODGE = 0.13  # log2 units between neighbouring rows at one k: a marker's width, so equal values sit side by side


def _is_base(row) -> bool:
    return not bool(row.get("trains", True))


def _drawn_rows(rows: pd.DataFrame) -> list:
    """The rows with a pass@k curve, trained ones first and the untrained base last (drawn on top)."""
    ok = [r for _, r in rows.iterrows()
          if r["status"] == "ok" and isinstance(r.get("curve"), dict) and r.get("curve")]
    return [r for r in ok if not _is_base(r)] + [r for r in ok if _is_base(r)]


def _row_name(r) -> str:
    """The row's label as the table prints it: a grid's row says how its point was chosen ("(best of 4 on
    validation)", aggregate.choose), so the legend does too; the base says it is untrained."""
    return f"{r['label']} (untrained)" if _is_base(r) else str(r["label"])


def _interval(r, k: int) -> tuple[float, float] | None:
    lo, hi = r.get(f"pass@{k}_lo"), r.get(f"pass@{k}_hi")
    return (lo, hi) if _finite(lo) and _finite(hi) else None


def _passk_row(ax, r, look: dict, shift: float) -> list[float]:
    """One row's curve with its 95% interval at every k the table has one for; returns the y drawn."""
    curve = r["curve"]
    ks = sorted(int(k) for k in curve)
    xs = [k * 2 ** shift for k in ks]
    ys = [100 * curve[k] for k in ks]
    style = {**BASE} if _is_base(r) else {**look, "ms": 5, "lw": 1.4}
    ax.plot(xs, ys, label=_row_name(r), **style)
    bars = [(x, y, *_interval(r, k)) for x, y, k in zip(xs, ys, ks) if _interval(r, k)]
    if bars:
        bx, by, lo, hi = zip(*bars)
        err = [[max(0.0, y - 100 * v) for y, v in zip(by, lo)], [max(0.0, 100 * v - y) for y, v in zip(by, hi)]]
        ax.errorbar(bx, by, yerr=err, fmt="none", ecolor=style["color"], elinewidth=1.2, capsize=3,
                    zorder=style.get("zorder", 2) - 0.5)  # under its own line and marker
        return [*ys, *(100 * v for v in lo), *(100 * v for v in hi)]
    return ys


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def interval_note(rows: list) -> str:
    """Where the drawn rows have a 95% interval: the curve's every k, some of them (the table's pass@k
    columns: the records keep no interval at the others), or none; the y label says which."""
    ks = sorted({int(k) for r in rows for k in r["curve"]})
    with_ci = [k for k in ks if any(_interval(r, k) for r in rows)]
    if not with_ci:
        return "[no interval in the records]"
    if with_ci == ks:
        return "[95% interval]"
    return f"[95% interval at k = {', '.join(map(str, with_ci))} only]"


@styled
def passk_figure(main: pd.DataFrame, title: str = ""):
    """pass@k versus k (log scale), one panel per model, one line per main row (mean over seeds) with
    its 95% interval where the table has one (the pass_ks; the y label names them); the base row drawn
    last, in black. Rows sit side by side at each k (DODGE) with their own marker and dash, so rows with
    equal values all show. A model none of whose rows has a curve (e.g. scored greedy only) gets no
    panel: an empty panel reads as a result."""
    models = [m for m in dict.fromkeys(main["model"]) if _drawn_rows(main[main["model"] == m])]
    models = models or list(dict.fromkeys(main["model"]))[:1]  # nothing at all to draw: one empty panel, not none
    cols = min(len(models), 4)
    rows = math.ceil(len(models) / cols)
    fig, axes = new_figure(rows, cols, 5.4 * cols, 3.6 * rows + 1.4, sharey=True)
    palette = looks(_row_name(r) for r in _drawn_rows(main) if not _is_base(r))
    ys, drawn_all = [], []
    for ax, model in zip(axes.flat, models):
        drawn = _drawn_rows(main[main["model"] == model])
        drawn_all += drawn
        for i, r in enumerate(drawn):
            ys += _passk_row(ax, r, palette.get(_row_name(r), {}), DODGE * (i - (len(drawn) - 1) / 2))
        ax.set_xscale("log", base=2)
        ax.set_title(str(model))
        ax.set_xlabel("k (samples per prompt; rows side by side at each k)")
        ax.grid(alpha=0.3)
    if ys:
        axes[0][0].set_ylim(*margin_limits(min(ys), max(ys)))
    for ax in axes.flat[len(models):]:
        ax.axis("off")
    axes[0][0].set_ylabel(f"pass@k on test (%)\n{interval_note(drawn_all)}")
    fig.suptitle(title or "pass@k")
    legend_below(fig, axes.flat, max_cols=2)
    return fig


def passk_panels(main: pd.DataFrame, path: Path, title: str = "") -> None:
    """Write passk_figure to `path`."""
    save_figure_atomic(passk_figure(main, title), path)


def _axis_model(ax, sweep: pd.DataFrame, main: pd.DataFrame, model, m: str, ref, ref_x: float, color) -> list:
    """One model's sweep line with its interval band, and its reference row as a star plus a level line."""
    ys = []
    s = sweep[sweep["model"] == model].sort_values("x")
    if not s.empty:
        ax.plot(s["x"], 100 * s[m], marker="o", color=color, label=str(model))
        ax.fill_between(s["x"], 100 * s[f"{m}_lo"], 100 * s[f"{m}_hi"], color=color, alpha=BAND_ALPHA)
        ys += [*(100 * s[f"{m}_lo"]), *(100 * s[f"{m}_hi"])]
    hit = main[(main["model"] == model) & (main["cell"] == ref) & (main["status"] == "ok")] if ref else []
    if len(hit):
        y = 100 * hit.iloc[0][m]
        ax.axhline(y, color=color, ls=":", lw=1)
        ax.plot([ref_x], [y], marker="*", ms=12, color=color, ls="none")
        ys.append(y)
    return ys


@styled
def axis_figure(points: pd.DataFrame, main: pd.DataFrame, spec: dict, metrics: list[str], title: str = ""):
    """One panel per metric: the swept cell's test metric versus the axis (log x), one line per model
    with its CI as a band, and the reference (e.g. tuned GRPO) as a star in the model's colour at the
    right edge plus a dotted level line, so each size's ES curve reads against its own RL result.
    A point whose runs never updated (status "no update": its numbers are the base model's) is not
    drawn; a note under the title names it.
    """
    key, cell, ref = spec["key"], spec["cell"], spec.get("reference")
    sweep = points[(points["cell"] == cell) & (points["status"] == "ok")].copy()
    sweep["x"] = [p.get(key) for p in sweep["point"]]
    xs = sorted(sweep["x"].dropna().unique())
    fig, axes = new_figure(1, len(metrics), 5.4 * len(metrics), 5.0)
    models = list(dict.fromkeys(points[points["cell"] == cell]["model"]))
    palette = colors(models)
    ref_x = xs[-1] * 2.5 if xs else 1.0
    for ax, m in zip(axes[0], metrics):
        ys = [y for model in models for y in _axis_model(ax, sweep, main, model, m, ref, ref_x, palette[model])]
        ax.set_xscale("log")
        if xs:
            ax.set_xticks([*xs, ref_x], [*(f"{x:g}" for x in xs), ref or ""])
            ax.minorticks_off()
        if ys:
            ax.set_ylim(*margin_limits(min(ys), max(ys)))
        ax.set_xlabel(f"{key} ({ref + ' = star, dotted line' if ref else ''})")
        ax.set_ylabel(f"test {m} (%)")
        ax.grid(alpha=0.3)
    legend_below(fig, axes.flat)
    skipped = points[(points["cell"] == cell) & (points["status"] == NO_UPDATE)]
    note = ""
    if not skipped.empty:
        names = ", ".join(f"{m} {key.split('.')[-1]}={p.get(key):g}" if isinstance(p.get(key), (int, float))
                          else f"{m} {lab}" for m, p, lab in zip(skipped["model"], skipped["point"], skipped["label"]))
        note = "\n" + _wrapped(f"Not drawn, NO UPDATE (every iteration skipped its update; weights = base model): "
                               f"{names}", fig)
    fig.suptitle((title or f"test metrics versus {key}") + note)  # the layout keeps a suptitle clear of the axes
    return fig


def _wrapped(text: str, fig) -> str:
    """`text` broken into lines that fit the figure's width at the title's size."""
    return "\n".join(textwrap.wrap(text, max(30, int(fig.get_figwidth() * 72 / (0.6 * (FONT + 2)))),
                                    break_on_hyphens=False))


def axis_plot(points: pd.DataFrame, main: pd.DataFrame, spec: dict, metrics: list[str], path: Path,
              title: str = "") -> None:
    """Write axis_figure to `path`."""
    save_figure_atomic(axis_figure(points, main, spec, metrics, title), path)


def _pareto_point(ax, r, x: str, y: str, color) -> None:
    style = {**BASE, "ls": "none"} if _is_base(r) else {"color": color, "marker": "o", "ms": 5, "ls": "none"}
    ax.errorbar(r[x], r[y], xerr=[[r[x] - r[f"{x}_lo"]], [r[f"{x}_hi"] - r[x]]],
                yerr=[[r[y] - r[f"{y}_lo"]], [r[f"{y}_hi"] - r[y]]], capsize=3, label=r["label"], **style)


@styled
def pareto_figure(main: pd.DataFrame, title: str = "", x: str = "kl_to_base", y: str = "mean_reward"):
    """Reward against KL to the base model (the ES paper's Table 2 reading), one panel per model, one point
    per main row with its CIs as error bars (the base row last, in black); up and to the left is better.
    None when the rows lack either metric (eval.kl_to_base=false)."""
    if x not in main.columns or y not in main.columns:
        return None
    ok = main[(main["status"] == "ok") & main[x].notna() & main[y].notna()]
    if ok.empty:
        return None
    models = list(dict.fromkeys(ok["model"]))
    fig, axes = new_figure(1, len(models), 5.0 * len(models), 5.0)
    palette = colors(r["label"] for _, r in ok.iterrows() if not _is_base(r))
    for ax, model in zip(axes.flat, models):
        rows = [r for _, r in ok[ok["model"] == model].iterrows()]
        for r in [r for r in rows if not _is_base(r)] + [r for r in rows if _is_base(r)]:
            _pareto_point(ax, r, x, y, palette.get(r["label"]))
        ax.set_title(str(model))
        ax.set_xlabel(f"{x} (nats per token)")
        ax.set_ylabel(y)
        ax.grid(alpha=0.3)
        ax.margins(0.08)
    fig.suptitle(title or f"{y} against {x}")
    legend_below(fig, axes.flat, max_cols=2)
    return fig


def pareto_plot(main: pd.DataFrame, path: Path, title: str = "", x: str = "kl_to_base", y: str = "mean_reward") -> bool:
    """Write pareto_figure to `path`; False (nothing written) when there is nothing to draw."""
    fig = pareto_figure(main, title, x, y)
    if fig is None:
        return False
    save_figure_atomic(fig, path)
    return True
