"""Every figure reads at a glance: rendered here and measured, not looked at.

Each figure is built from the committed results/quickstart files (table.csv, analysis.json) or from
small frames shaped like the aggregated ones, drawn, and checked in display coordinates: no legend
box covers a plotted point, band or bar; every legend lies inside the figure; no bar or point is
clipped by its axes; no text is under 9 pt; no log axis has a "0" tick; the untrained base is drawn,
in its own style, above every other line; the random-walk null is drawn where analysis.md compares
with one; pass@k and the learning curves carry their 95% intervals.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.collections import LineCollection, PolyCollection  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from matplotlib.text import Text  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402

from harness.analysis.figures import (NULL_LABEL, drift_figure, entropy_figure, localisation_figure,  # noqa: E402
                                      sparsity_figure)
from harness.reporting.curves import curves_figure  # noqa: E402
from harness.reporting.plots import axis_figure, pareto_figure, passk_figure  # noqa: E402
from harness.reporting.style import BASE, FONT  # noqa: E402

QUICKSTART = Path(__file__).resolve().parent.parent / "results" / "quickstart"
SLACK = 1.0  # display pixels: an edge drawn exactly on the frame is inside it


# ---- measuring a drawn figure ----
def drawn(fig):
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def legends(fig) -> list:
    return [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]


def _finite(xy: np.ndarray) -> np.ndarray:
    xy = np.asarray(xy, dtype=float).reshape(-1, 2)
    return xy[np.isfinite(xy).all(1)]


def _along(xy: np.ndarray, n: int = 20) -> np.ndarray:
    """Points every 1/n of each segment of a drawn line: a legend must not sit on a line between its vertices."""
    if len(xy) < 2:
        return xy
    t = np.linspace(0, 1, n, endpoint=False)[:, None, None]
    return np.concatenate([(xy[:-1] + t * (xy[1:] - xy[:-1])).reshape(-1, 2), xy[-1:]])


def marks(ax) -> np.ndarray:
    """Display coordinates of every plotted point: line vertices and the lines between them, error-bar
    ends, band outlines."""
    pts = []
    for line in ax.lines:
        if line.get_visible() and len(line.get_xydata()):
            xy = _finite(line.get_transform().transform(_finite(line.get_xydata())))
            pts.append(_along(xy) if line.get_linestyle() not in ("None", "", " ") else xy)
    for coll in ax.collections:
        if isinstance(coll, LineCollection):
            pts += [coll.get_transform().transform(_finite(seg)) for seg in coll.get_segments() if len(seg)]
        elif isinstance(coll, PolyCollection):
            pts += [coll.get_transform().transform(_finite(p.vertices)) for p in coll.get_paths()]
    pts = [p for p in pts if len(p)]
    return np.concatenate(pts) if pts else np.empty((0, 2))


def bars(ax, renderer) -> list:
    return [p.get_window_extent(renderer) for p in ax.patches if isinstance(p, Rectangle) and p.get_visible()
            and p.get_width() and p.get_height()]


def inside(bbox, pts: np.ndarray) -> np.ndarray:
    return ((pts[:, 0] > bbox.x0 + SLACK) & (pts[:, 0] < bbox.x1 - SLACK)
            & (pts[:, 1] > bbox.y0 + SLACK) & (pts[:, 1] < bbox.y1 - SLACK))


def overlap(a, b) -> bool:
    return a.x0 < b.x1 - SLACK and b.x0 < a.x1 - SLACK and a.y0 < b.y1 - SLACK and b.y0 < a.y1 - SLACK


def check_layout(fig) -> None:
    """The checks every figure must pass; closes the figure."""
    renderer = drawn(fig)
    boxes = [leg.get_window_extent(renderer) for leg in legends(fig)]
    assert boxes, "the figure has no legend"
    for box in boxes:
        assert fig.bbox.x0 - SLACK <= box.x0 and box.x1 <= fig.bbox.x1 + SLACK and fig.bbox.y0 - SLACK <= box.y0, \
            f"a legend runs off the figure: {box} in {fig.bbox}"
    for ax in fig.axes:
        if not ax.get_visible() or not ax.axison:
            continue
        pts, frame = marks(ax), ax.get_window_extent(renderer)
        shown = [Bbox.intersection(b, frame) for b in bars(ax, renderer)]  # a log axis cuts every bar's foot
        for box in boxes:
            assert not inside(box, pts).any(), f"a legend covers {inside(box, pts).sum()} plotted points"
            assert not any(b is not None and overlap(box, b) for b in shown), "a legend covers a bar"
        for b in bars(ax, renderer):
            foot = ax.get_yscale() == "log" or frame.y0 - SLACK <= b.y0
            assert frame.x0 - SLACK <= b.x0 and b.x1 <= frame.x1 + SLACK and foot and b.y1 <= frame.y1 + SLACK, \
                f"a bar is clipped by the frame: {b} in {frame}"
        lines = [line.get_transform().transform(_finite(line.get_xydata())) for line in ax.lines
                 if line.get_marker() not in (None, "None", "", " ")]
        for p in (p for p in lines if len(p)):
            assert (p[:, 1] >= frame.y0 - SLACK).all() and (p[:, 1] <= frame.y1 + SLACK).all(), "a point is clipped"
            assert (p[:, 0] >= frame.x0 - SLACK).all() and (p[:, 0] <= frame.x1 + SLACK).all(), "a point is clipped"
        for axis, scale in ((ax.yaxis, ax.get_yscale()), (ax.xaxis, ax.get_xscale())):
            if scale in ("log", "symlog"):
                assert scale == "log", "a symlog axis draws a '0' tick among powers of ten"
                assert all(t.get_text().replace("$\\mathdefault{", "").rstrip("}") != "0"
                           for t in axis.get_ticklabels()), "a '0' tick on a log axis"
    small = [(t.get_text(), t.get_fontsize()) for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip() and t.get_fontsize() < FONT]
    assert not small, f"text under {FONT} pt: {small[:3]}"
    plt.close(fig)


def base_lines(fig) -> list:
    """The base's lines: plotted with a "base ..." label, or the data line of an error bar so labelled."""
    found = [line for ax in fig.axes for line in ax.lines if line.get_label().startswith("base")]
    return found + [c.lines[0] for ax in fig.axes for c in ax.containers
                    if c.get_label().startswith("base") and c.lines[0] is not None]


def data_lines(ax) -> list:
    """The axes' labelled lines in drawing order (an error bar's caps and level lines aside)."""
    return [line for line in ax.lines if not line.get_label().startswith("_")]


def check_base_on_top(fig) -> None:
    """The base is drawn, in its own style (black hollow diamond), above every other line of its axes."""
    found = base_lines(fig)
    assert found, "no base drawn"
    for line in found:
        assert line.get_marker() == BASE["marker"] and line.get_markerfacecolor() in ("white", (1, 1, 1, 1))
        others = [o.get_zorder() for o in line.axes.lines if o.get_color() != BASE["color"]]  # its own caps aside
        assert line.get_zorder() > max(others, default=0)


# ---- the frames ----
@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    """The committed quickstart table as the main frame, each row's pass@k curve at the ks it reports."""
    main = pd.read_csv(QUICKSTART / "table.csv")
    ks = sorted(int(c[len("pass@"):]) for c in main.columns if c.startswith("pass@") and c[5:].isdigit())
    main["curve"] = [{k: r[f"pass@{k}"] for k in ks} for _, r in main.iterrows()]
    return main


@pytest.fixture(scope="module")
def runs() -> list[dict]:
    return json.loads((QUICKSTART / "analysis.json").read_text())["runs"]


def steps(n: int, top: float, seed: int, key="reward_mean", extra=None) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"flops": 2.5e12 * (i + 1) / n, key: float(0.5 + (top - 0.5) * i / n + rng.normal(0, 0.02)),
             **(extra or {})} for i in range(n)]


def curves_frame(base_val: float | None) -> pd.DataFrame:
    """Three trained rows (three seeds; one seed whose validation points record their prompts; one seed
    without) and the untrained base, shaped like aggregate's main rows (2.5e12 FLOPs each, as the quickstart)."""
    def row(label, trains, train=(), val=(), v=math.nan):
        return {"model": "zoo-1m", "label": label, "status": "ok", "trains": trains, "val": v,
                "train_curves": list(train), "val_curves": list(val)}
    return pd.DataFrame([
        row("base", False, v=math.nan if base_val is None else base_val),
        row("ES", True, [steps(46, 0.7, s) for s in range(3)], [steps(10, 0.68, s, "greedy_acc") for s in range(3)]),
        row("GRPO", True, [steps(266, 0.55, 4)], [steps(10, 0.67, 5, "greedy_acc", {"prompts": 100})]),
        row("PPO", True, [steps(49, 0.5, 6)], [steps(10, 0.64, 7, "greedy_acc")]),
    ])


# ---- the tables' figures ----
def test_passk_has_intervals_and_base_on_top_from_the_committed_table(table):
    fig = passk_figure(table, "quickstart")
    ax = fig.axes[0]
    caps = [c for c in ax.collections if isinstance(c, LineCollection)]
    assert len(caps) == len(table)  # one set of 95% error bars per row
    lo, hi = 100 * table["pass@1_lo"].min(), 100 * table["pass@32_hi"].max()
    assert ax.get_ylim()[0] < lo and ax.get_ylim()[1] > hi  # every interval inside the frame
    check_base_on_top(fig)
    assert base_lines(fig)[0] is data_lines(ax)[-1]  # drawn last
    check_layout(fig)


def test_passk_with_several_models_keeps_the_legend_out_of_the_panels(table):
    two = pd.concat([table, table.assign(model="zoo-2m")], ignore_index=True)
    fig = passk_figure(two)
    assert len([a for a in fig.axes if a.lines]) == 2
    check_layout(fig)


def test_curves_draw_the_base_at_zero_flops_and_95_percent_bands():
    fig = curves_figure(curves_frame(base_val=0.62))
    train_ax, val_ax = fig.axes[0], fig.axes[1]
    check_base_on_top(fig)
    (base,) = base_lines(fig)
    assert base.axes is val_ax and list(base.get_xdata()) == [0.0] and base.get_ydata()[0] == pytest.approx(62)
    assert val_ax.get_xlim()[0] < 0 < val_ax.get_xlim()[1]
    bands = [c for c in val_ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 2  # ES over three seeds (t) and GRPO's recorded prompts (Wilson); PPO has neither
    assert [c for c in train_ax.collections if isinstance(c, PolyCollection)]  # ES's three seeds
    check_layout(fig)


def test_curves_say_so_when_the_base_has_no_validation_score():
    fig = curves_figure(curves_frame(base_val=None))
    assert not base_lines(fig)
    texts = [t.get_text() for leg in legends(fig) for t in leg.get_texts()]
    assert any("base: no validation score" in t for t in texts)
    check_layout(fig)


def test_one_seed_band_is_a_wilson_interval_over_the_recorded_prompts():
    from harness.reporting.curves import seed_band
    from harness.reporting.stats import wilson
    x, mean, lo, hi = seed_band([[{"flops": 1.0, "greedy_acc": 0.6, "prompts": 100}]], "greedy_acc", 100.0)
    assert (lo[0], hi[0]) == pytest.approx(tuple(100 * v for v in wilson(60, 100)))
    x, mean, lo, hi = seed_band([[{"flops": 1.0, "greedy_acc": 0.6}]], "greedy_acc", 100.0)
    assert lo[0] == hi[0] == mean[0] == pytest.approx(60)  # no prompt count: no made-up band


def test_axis_and_pareto_figures_keep_their_legends_outside(table):
    points = pd.DataFrame([{"model": m, "cell": "ES", "point": {"method.sigma": s}, "label": f"ES {s}",
                            "status": "no update" if (m, s) == ("zoo-2m", 3e-2) else "ok",  # a note above the axes
                            "greedy_acc": a, "greedy_acc_lo": a - 0.04, "greedy_acc_hi": a + 0.04}
                           for m in ("zoo-1m", "zoo-2m") for s, a in ((1e-3, 0.55), (1e-2, 0.57), (3e-2, 0.5))])
    main = pd.DataFrame([{"model": m, "cell": "GRPO", "status": "ok", "greedy_acc": 0.59}
                         for m in ("zoo-1m", "zoo-2m")])
    fig = axis_figure(points, main, {"key": "method.sigma", "cell": "ES", "reference": "GRPO"}, ["greedy_acc"])
    assert "NO UPDATE" in fig.get_suptitle() and "zoo-2m sigma=0.03" in fig.get_suptitle()
    check_layout(fig)
    kl = table.assign(kl_to_base=[0.0, 0.3, 0.05, 1.4, 0.9])
    kl["kl_to_base_lo"], kl["kl_to_base_hi"] = kl["kl_to_base"] * 0.9, kl["kl_to_base"] * 1.1
    fig = pareto_figure(kl)
    check_base_on_top(fig)
    check_layout(fig)


# ---- the analysis figures, from the committed analysis.json ----
def test_drift_draws_every_bar_inside_a_log_frame_with_the_null(runs):
    fig = drift_figure(runs)
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    labels = [c.get_label() for c in ax.containers]
    assert NULL_LABEL in labels
    n_null = sum(1 for r in runs for k in (r.get("null") or {}).get("drift") or {})
    assert n_null and len([c for c in ax.collections if isinstance(c, LineCollection)]) >= n_null
    check_layout(fig)


def test_localisation_adds_the_null_beside_each_es_run(runs):
    fig = localisation_figure(runs)
    ticks = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    with_null = [r for r in runs if (r.get("null") or {}).get("top_k")]
    assert with_null and ticks.count("random-walk null of the run above") == len(with_null)
    assert ticks.index(with_null[0]["name"]) + 1 == ticks.index("random-walk null of the run above")
    check_layout(fig)


def test_sparsity_labels_the_base_and_draws_the_null(runs):
    fig = sparsity_figure(runs)
    check_base_on_top(fig)
    assert any("random-walk null" in line.get_label() for ax in fig.axes for line in ax.lines)
    assert len(fig.axes) == 2 * len({r["method"] for r in runs})  # one column per method, not ten curves on one
    check_layout(fig)


def test_entropy_draws_a_base_point_when_the_records_have_one(runs):
    fig = entropy_figure(runs)
    texts = [t.get_text() for leg in legends(fig) for t in leg.get_texts()]
    assert "base (0 FLOPs): not measured in these records" in texts
    check_layout(fig)
    with_base = [{**r, "entropy": [{"flops": 0.0, "entropy": 0.3}, *r["entropy"]]} for r in runs]
    fig = entropy_figure(with_base)
    check_base_on_top(fig)
    check_layout(fig)
