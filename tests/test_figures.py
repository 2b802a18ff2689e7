"""Every figure says what it shows: rendered from small frames and read through matplotlib's objects.

A label that promises a band has one (or names where it is); every series of a panel shows when its
numbers equal another's (own marker, hollow, side by side on pass@k); ES's reward on its fixed batch
never shares an axis with RL's reward on rolling batches; the untrained base is a reference in every
panel that plots a score; a grid's row says how its point was chosen. Layout (legends clear of the
data, text sizes) is tests/test_plot_layout.py's.

    python -m pytest tests/test_figures.py -q
"""
from __future__ import annotations

import math

import matplotlib
import numpy as np
import pandas as pd
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402

from harness.analysis.figures import drift_figure, entropy_figure, localisation_figure, sparsity_figure  # noqa: E402
from harness.reporting.aggregate import train_batch  # noqa: E402
from harness.reporting.curves import curves_figure  # noqa: E402
from harness.reporting.plots import passk_figure  # noqa: E402
from harness.reporting.stats import wilson  # noqa: E402
from harness.reporting.style import BASE  # noqa: E402

GRID_LABEL = "GRPO lr=1e-05 (best of 4 on validation)"  # aggregate.choose's label of a grid's chosen point
KS = (1, 2, 4, 8, 16, 32)


# ---- reading a drawn figure ----
def legend_texts(fig) -> list[str]:
    return [t.get_text() for leg in fig.legends for t in leg.get_texts()]


def series(ax) -> list:
    """The axes' labelled data lines (level lines, error-bar caps and bands aside)."""
    return [line for line in ax.lines if not line.get_label().startswith("_")]


def bands(ax) -> list:
    return [c for c in ax.collections if isinstance(c, PolyCollection)]


def labels_in(ax) -> list[str]:
    return [line.get_label() for line in series(ax)]


def level_lines(ax, y: float) -> list:
    """Horizontal black lines at `y` spanning the axes (axhline): a reference level."""
    return [line for line in ax.lines if line.get_color() == BASE["color"] and len(line.get_ydata()) == 2
            and list(line.get_xdata()) == [0, 1] and all(v == pytest.approx(y) for v in line.get_ydata())]


def assert_each_series_own_marker(ax) -> None:
    """Trained series each have their own hollow marker: one drawn on another leaves its outline showing."""
    trained = [line for line in series(ax) if line.get_color() != BASE["color"]]
    markers = [line.get_marker() for line in trained]
    assert len(set(markers)) == len(markers), f"two series share a marker: {markers}"
    assert all(str(line.get_markerfacecolor()) == "none" for line in trained)


# ---- pass@k ----
def passk_frame(every_k: bool = False) -> pd.DataFrame:
    """The base, two ES rows equal to it from k = 4 on (the issue's hidden ES), a grid's chosen GRPO point
    and PPO; intervals at the table's pass_ks (1, 16, 32), or at every k."""
    def row(label, trains, values, **kw):
        r = {"model": "zoo-1m", "label": label, "status": "ok", "trains": trains,
             "curve": dict(zip(KS, values)), **kw}
        for k, v in zip(KS, values):
            if every_k or k in (1, 16, 32):
                r[f"pass@{k}"], r[f"pass@{k}_lo"], r[f"pass@{k}_hi"] = v, v - 0.03, v + 0.03
        return r
    base = [0.45, 0.61, 0.76, 0.86, 0.93, 0.97]
    return pd.DataFrame([
        row("base", False, base),
        row("ES sigma=1e-2", True, [0.43, 0.60, *base[2:]]),
        row("ES sigma=1e-3", True, [0.45, 0.61, *base[2:]]),
        row(GRID_LABEL, True, [0.52, 0.64, 0.73, 0.80, 0.85, 0.88], point_label="GRPO lr=1e-05", grid="GRPO"),
        row("PPO", True, [0.49, 0.63, 0.75, 0.84, 0.89, 0.92]),
    ])


def test_passk_y_label_names_the_ks_with_an_interval():
    fig = passk_figure(passk_frame())
    ax = fig.axes[0]
    assert ax.get_ylabel().endswith("[95% interval at k = 1, 16, 32 only]")
    bars = [c for c in ax.containers if c.has_yerr]
    assert len(bars) == 5 and all(len(c.lines[2][0].get_segments()) == 3 for c in bars)  # one bar per k with one
    plt.close(fig)
    fig = passk_figure(passk_frame(every_k=True))
    ax = fig.axes[0]
    assert ax.get_ylabel().endswith("[95% interval]")
    assert all(len(c.lines[2][0].get_segments()) == len(KS) for c in ax.containers if c.has_yerr)
    plt.close(fig)


def test_passk_draws_every_row_side_by_side_with_its_own_marker():
    main = passk_frame()
    fig = passk_figure(main)
    ax = fig.axes[0]
    lines = series(ax)
    assert len(lines) == len(main)
    assert_each_series_own_marker(ax)
    fig.canvas.draw()
    px = fig.dpi / 72
    for i, k in enumerate(KS):  # at each k the rows sit apart by at least their markers' half-widths
        xs = sorted((line.get_transform().transform(line.get_xydata()[i])[0], line.get_markersize()) for line in lines)
        for (x0, m0), (x1, m1) in zip(xs, xs[1:]):
            assert x1 - x0 >= (m0 + m1) / 2 * px - 0.5, f"two rows' markers overlap at k={k}"
    plt.close(fig)


def test_passk_legend_says_how_the_grid_point_was_chosen_and_draws_the_base():
    fig = passk_figure(passk_frame())
    texts = legend_texts(fig)
    assert GRID_LABEL in texts and "base (untrained)" in texts
    (base,) = [line for line in fig.axes[0].lines if line.get_label() == "base (untrained)"]
    assert base.get_marker() == BASE["marker"] and base.get_zorder() == BASE["zorder"]
    plt.close(fig)


# ---- learning curves ----
def steps(n: int, top: float, seed: int, key: str = "reward_mean", **extra) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"flops": 1e12 * (i + 1) / n, key: float(0.5 + (top - 0.5) * i / n + rng.normal(0, 0.02)), **extra}
            for i in range(n)]


def curves_frame(batch: bool = True, prompts: bool = True, base_val: float = 0.6, es_seeds: int = 2) -> pd.DataFrame:
    """The base; ES over two seeds on a fixed batch; a second ES row equal to the first; a grid's GRPO
    point (one seed, validation points with their prompt count) and PPO (one seed, no count), both on
    rolling batches. `batch`: steps tagged with their batch kind as aggregate tags them."""
    def train(kind, n, top, seed):
        return steps(n, top, seed, **({"batch": kind} if batch else {}))

    def val(seed, top):
        return steps(10, top, seed, "greedy_acc", **({"prompts": 100} if prompts else {}))

    def row(label, trains, tr=(), va=(), **kw):
        return {"model": "zoo-1m", "label": label, "status": "ok", "trains": trains, "val": math.nan,
                "train_curves": list(tr), "val_curves": list(va), **kw}
    es = ([train("fixed", 40, 0.7, s) for s in range(es_seeds)], [val(s, 0.65) for s in range(es_seeds)])
    return pd.DataFrame([
        row("base", False, val=base_val),
        row("ES sigma=1e-2", True, *es),
        row("ES sigma=1e-3", True, *es),
        row(GRID_LABEL, True, [train("rolling", 200, 0.55, 4)], [val(5, 0.6)], point_label="GRPO lr=1e-05"),
        row("PPO", True, [train("rolling", 50, 0.5, 6)], [steps(10, 0.6, 7, "greedy_acc")]),
    ])


def test_curves_keep_fixed_batch_and_rolling_batch_rewards_on_separate_panels():
    fig = curves_figure(curves_frame())
    fixed, rolling, val = fig.axes
    assert "one fixed batch" in fixed.get_title() and "rolling batches" in rolling.get_title()
    assert labels_in(fixed) == ["ES sigma=1e-2", "ES sigma=1e-3"]
    assert labels_in(rolling) == [GRID_LABEL, "PPO"]
    assert bands(fixed) and not bands(rolling)  # two seeds: a t band; one seed of a train reward: none
    assert "t over seeds" in fixed.get_ylabel() and "95%" not in rolling.get_ylabel()
    assert len(series(val)) == 5  # four trained rows and the base
    for ax in fig.axes:
        assert_each_series_own_marker(ax)
    plt.close(fig)


def test_curves_validation_bands_are_what_the_label_says():
    fig = curves_figure(curves_frame())
    val = fig.axes[-1]
    assert "[95% band: Wilson, 100 prompts]" in val.get_ylabel() and "[95% band: t over seeds]" in val.get_ylabel()
    assert len(bands(val)) == 3  # both ES rows (two seeds each) and GRPO (one seed, 100 prompts); PPO has none
    grpo = [line for line in series(val) if line.get_label() == GRID_LABEL][0]
    band = [c for c in bands(val) if np.allclose(c.get_facecolor()[0][:3], matplotlib.colors.to_rgb(grpo.get_color()))]
    ys = np.concatenate([p.vertices[:, 1] for c in band for p in c.get_paths()])
    bounds = [wilson(round(y), 100) for y in grpo.get_ydata()]  # y: % of 100 prompts
    assert ys.min() == pytest.approx(100 * min(b[0] for b in bounds))
    assert ys.max() == pytest.approx(100 * max(b[1] for b in bounds))
    assert "no validation band for PPO: one seed, prompt count not in the records" in legend_texts(fig)
    plt.close(fig)


def test_curves_promise_no_band_when_none_can_be_drawn():
    fig = curves_figure(curves_frame(prompts=False, es_seeds=1))  # one seed each and no prompt count
    val = fig.axes[-1]
    assert not bands(val) and "95%" not in val.get_ylabel()
    assert "no validation band for every row: one seed, prompt count not in the records" in legend_texts(fig)
    plt.close(fig)


def test_curves_draw_the_base_as_a_reference_level_and_name_the_grid_choice():
    fig = curves_figure(curves_frame(base_val=0.6))
    val = fig.axes[-1]
    assert level_lines(val, 60.0)
    base = [line for line in series(val) if line.get_label().startswith("base")]
    assert len(base) == 1 and list(base[0].get_xdata()) == [0.0] and base[0].get_marker() == BASE["marker"]
    assert GRID_LABEL in legend_texts(fig)
    plt.close(fig)


def test_curves_from_records_without_a_batch_tag_say_the_kind_is_unknown():
    fig = curves_figure(curves_frame(batch=False))
    train, val = fig.axes
    assert "batch kind not in the records" in train.get_title()
    assert len(series(train)) == 4
    plt.close(fig)


def test_train_batch_reads_the_method_config():
    assert train_batch({"_target_": "methods.es.ES", "fixed_batch": True}) == "fixed"
    assert train_batch({"_target_": "methods.es.ES", "fixed_batch": False}) == "rolling"
    assert train_batch({"_target_": "methods.grpo.GRPO", "beta": 0.0}) == "rolling"
    seq = {"order": ["grpo", "es"], "stages": {"grpo": {"beta": 0.0}, "es": {"fixed_batch": True}}}
    assert train_batch(seq) == "mixed"
    assert train_batch({**seq, "stages": {"grpo": {}, "es": {"fixed_batch": False}}}) == "rolling"


# ---- the analysis figures ----
def analysis_runs() -> list[dict]:
    """An ES run and two GRPO grid points whose numbers are equal (entropy, sparsity): neither may hide."""
    def run(name, method, acc, ent):
        return {"name": name, "method": method, "tied": False, "null": {},
                "drift": {"whole": 0.1, "groups": {"attn_q": {"drift": 0.1}, "mlp": {"drift": 0.2}}},
                "localisation": {"top_k": 10, "top_k_counts": {"attn_q": 4, "mlp": 6}, "k_fraction": 20,
                                 "top_fraction_counts": {"attn_q": 8, "mlp": 12}},
                "sparsity": {"prompts": 100, "rows": [{"fraction_zeroed": f, "greedy_acc": a, "pass@1": a - 0.1}
                                                      for f, a in ((0.0, acc), (0.5, acc), (1.0, 0.5))]},
                "entropy": [{"flops": f, "entropy": ent - 0.01 * i} for i, f in enumerate((1e11, 2e11, 3e11))]}
    return [run("ES sigma=1e-3", "es", 0.55, 0.3), run("GRPO lr=1e-05", "grpo", 0.58, 0.29),
            run("GRPO lr=3e-05", "grpo", 0.58, 0.29)]


def test_entropy_draws_equal_grid_points_each_visible():
    fig = entropy_figure(analysis_runs())
    grpo = fig.axes[1]
    a, b = series(grpo)
    assert list(a.get_ydata()) == list(b.get_ydata())
    assert_each_series_own_marker(grpo)
    plt.close(fig)


def test_sparsity_draws_the_base_level_and_names_its_interval():
    fig = sparsity_figure(analysis_runs())
    for ax in fig.axes:
        base = [line for line in series(ax) if line.get_label().startswith("base")]
        assert base and base[0].get_marker() == BASE["marker"]
        assert level_lines(ax, base[0].get_ydata()[0])  # every run reads against the base's score
        assert_each_series_own_marker(ax)
    assert "95% interval of a point" in fig.axes[0].get_ylabel()  # no band per point: the label says how wide
    plt.close(fig)


def test_drift_and_localisation_name_every_run():
    runs = analysis_runs()
    fig = drift_figure(runs)
    assert [c.get_label() for c in fig.axes[0].containers] == [r["name"] for r in runs]
    plt.close(fig)
    fig = localisation_figure(runs)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == [r["name"] for r in runs]
    plt.close(fig)


def test_many_runs_draw_one_seed_per_setting_and_few_draw_all():
    """rl_family_cpu's 95 runs drew 95 bars per group: past MAX_DRAWN each setting keeps its lowest seed."""
    from harness.analysis.figures import MAX_DRAWN, one_seed_each
    runs = [{"model": "zoo-1m", "label": f"GRPO lr={lr}", "seed": s, "name": f"GRPO lr={lr} · seed {s}"}
            for lr in ("1e-05", "3e-05", "0.0001") for s in (24, 20, 22, 21, 23, 25, 26, 27, 28)]
    runs.append({"model": "zoo-1m", "label": "base", "seed": None, "name": "base"})
    assert len(runs) > MAX_DRAWN
    drawn = one_seed_each(runs)
    assert [r["name"] for r in drawn] == ["GRPO lr=1e-05 · seed 20", "GRPO lr=3e-05 · seed 20",
                                          "GRPO lr=0.0001 · seed 20", "base"]
    assert one_seed_each(runs[:MAX_DRAWN]) == runs[:MAX_DRAWN]
