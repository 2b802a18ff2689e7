"""The look every figure shares (tables' plots, learning curves, the analysis figures), kept in one place.

Rules: text at 9 pt or more; the untrained base drawn last, in black with its own hollow marker, so
a method that sits on it never hides it; legends below the axes, outside the data; axis limits from
the data with a margin, so no bar or interval touches the frame.
"""
from __future__ import annotations

import functools
import math

import matplotlib

matplotlib.use("Agg")  # headless: no display on servers or CI
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

FONT = 9  # the smallest text in any figure
RC = {"font.size": FONT, "axes.titlesize": FONT + 1, "axes.labelsize": FONT, "xtick.labelsize": FONT,
      "ytick.labelsize": FONT, "legend.fontsize": FONT, "legend.title_fontsize": FONT, "figure.titlesize": FONT + 2}
BASE_COLOR = "black"
# on top of everything (z 10) and hollow, so a row with the same numbers still shows through
BASE = {"color": BASE_COLOR, "marker": "D", "ms": 7, "mfc": "white", "mec": BASE_COLOR, "mew": 1.5, "ls": "--",
        "lw": 1.3, "zorder": 10}
NULL = {"color": "black", "ls": ":", "lw": 1.5}  # the random-walk null, wherever an analysis compares with one
BAND_ALPHA = 0.15
PALETTE = "tab10"
# Series of one panel may coincide (two ES runs, grid points with equal numbers): each gets its own
# marker shape, hollow, and its own dash, so one drawn over another leaves the other's outline and
# line showing through (every marker differs for ten series, every (marker, dash) pair too).
MARKERS = ("o", "s", "^", "v", "P", "X", "<", ">", "h", "p")
DASHES = ("-", (0, (5, 2)), (0, (1.5, 1.5)), (0, (6, 2, 1.5, 2)), (0, (3, 1, 1, 1, 1, 1)))


def styled(build):
    """Run a figure builder under RC (rc_context, so nothing leaks into other figures)."""
    @functools.wraps(build)
    def wrapper(*args, **kwargs):
        with plt.rc_context(RC):
            return build(*args, **kwargs)
    return wrapper


def new_figure(rows: int, cols: int, width: float, height: float, **kw):
    """plt.subplots with constrained layout: it makes room for legends placed outside the axes."""
    return plt.subplots(rows, cols, figsize=(width, height), squeeze=False, layout="constrained", **kw)


def colors(labels) -> dict:
    """One colour per distinct label, in order (tab10, tab20 past ten), so a label keeps its colour
    across every panel of a figure."""
    names = list(dict.fromkeys(labels))
    cmap = plt.get_cmap(PALETTE if len(names) <= 10 else "tab20")
    return {n: cmap(i % cmap.N) for i, n in enumerate(names)}


def series_look(i: int) -> dict:
    """The i-th series' marker and line (MARKERS, DASHES): its own hollow shape and its own dash."""
    return {"marker": MARKERS[i % len(MARKERS)], "mfc": "none", "mew": 1.3, "ls": DASHES[i % len(DASHES)]}


def looks(labels) -> dict:
    """colors() and series_look() together: one colour, marker and dash per distinct label, in order, so a
    series looks the same in every panel and in the legend."""
    return {n: {"color": c, **series_look(i)} for i, (n, c) in enumerate(colors(labels).items())}


def legend_below(fig, axes, extra: list[tuple] = (), max_cols: int = 3):
    """One legend for the whole figure, under the axes: the union of the axes' entries (a label once),
    plus `extra` (handle, label) pairs. Columns as many as fit the figure's width."""
    handles, labels = [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels and not lab.startswith("_"):
                handles.append(h)
                labels.append(lab)
    for h, lab in extra:
        handles.append(h)
        labels.append(lab)
    if not handles:
        return None
    longest = max(len(lab) for lab in labels)
    per_col = 0.6 * FONT / 72 * longest + 0.8  # inches: ~0.6 em a character, plus the handle
    ncol = max(1, min(max_cols, len(labels), int(fig.get_figwidth() // per_col)))
    return fig.legend(handles, labels, loc="outside lower center", ncol=ncol, frameon=False)


def note_entry(text: str) -> tuple:
    """A legend line with no mark: a note the reader needs beside the entries (e.g. what was not measured)."""
    return Line2D([], [], ls="none"), text


def margin_limits(lo: float, hi: float, share: float = 0.06) -> tuple[float, float]:
    """[lo, hi] widened by `share` of its span on each side (a flat span by 1 unit)."""
    span = hi - lo if hi > lo else 1.0
    return lo - share * span, hi + share * span


def log_limits(values) -> tuple[float, float]:
    """Limits of a log axis for positive `values`: a third of a decade beyond the extremes, so a bar's top
    or a point never sits on the frame."""
    pos = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not pos:
        return 1e-3, 1.0
    return min(pos) / 10 ** (1 / 3), max(pos) * 10 ** (1 / 3)
