"""The analysis figures: drift.png, localisation.png, sparsity.png, entropy.png.

Every line or bar is named by model, run (method and settings), seed and FLOPs spent, in one colour
per run across the four figures (past MAX_DRAWN runs, only each setting's lowest seed is drawn; analysis.md
lists every run); where analysis.md compares a figure with the random-walk null
(harness/analysis/null.py) the figure draws that null too. Each figure has a builder the layout tests
render and is written atomically (harness/core/atomic.py); the shared look is harness/reporting/style.py.
"""
from __future__ import annotations

import math
from pathlib import Path

from harness.analysis.groups import GROUPS, group_label
from harness.core.atomic import save_figure_atomic
from harness.reporting.stats import wilson
from harness.reporting.style import BASE, NULL, colors, legend_below, log_limits, looks, new_figure, note_entry, styled

NULL_LABEL = "random-walk null (ES), bar: its tolerance"
MAX_DRAWN = 24  # past this many runs a bar per run is unreadable (rl_family_cpu: 95 runs, 19 settings x 5 seeds)


def write_figures(runs: list[dict], out: Path) -> None:
    if not runs:
        return
    drawn = one_seed_each(runs)
    for name, build in (("drift.png", drift_figure), ("localisation.png", localisation_figure),
                        ("sparsity.png", sparsity_figure), ("entropy.png", entropy_figure)):
        save_figure_atomic(build(drawn), out / name)


def one_seed_each(runs: list[dict], most: int = MAX_DRAWN) -> list[dict]:
    """Every run when there are at most `most`; else each setting's (model, label) lowest seed, in order.
    The figures then show one run per setting, and every run stays in analysis.md; the drawn run's name
    still carries its seed, so a figure never passes one seed off as the setting's mean."""
    if len(runs) <= most:
        return runs
    def seed(r) -> float:  # an unseeded run (the base) yields to a seeded one of the same setting
        return math.inf if r["seed"] is None else r["seed"]
    lowest: dict[tuple, dict] = {}
    for r in runs:
        key = (r["model"], r["label"])
        if key not in lowest or seed(r) < seed(lowest[key]):
            lowest[key] = r
    keep = {id(r) for r in lowest.values()}
    return [r for r in runs if id(r) in keep]


def _groups(runs) -> tuple[list[str], list[str]]:
    """(groups any run has, their axis names: a tied embedding is also the LM head)."""
    tied = any(r["tied"] for r in runs)
    present = [g for g in GROUPS if any(g in r["drift"]["groups"] for r in runs)]
    return present, [g if g != "embed" else group_label(g, tied).replace(" (tied)", "\n(tied)") for g in present]


def _null(r: dict, part: str) -> dict:
    """The run's null cells for `part` (drift, top_k, top_fraction, below); {} when it has no null."""
    return (r.get("null") or {}).get(part) or {}


def _by_method(runs) -> list[tuple[str, list[dict]]]:
    """Runs grouped by method, in order of appearance: one panel each keeps ten runs readable."""
    methods = list(dict.fromkeys(r["method"] for r in runs))
    return [(m, [r for r in runs if r["method"] == m]) for m in methods]


def _drift_nulls(ax, runs, keys: list[str], width: float) -> list[float]:
    """Each ES bar's null as a black tick across it, its vertical bar the tolerance analysis.md applies."""
    values, label = [], NULL_LABEL
    for i, r in enumerate(runs):
        for j, k in enumerate(keys):
            c = _null(r, "drift").get(k)
            if not c or not c.get("null") or not math.isfinite(c["null"]):
                continue
            x, tol = j + (i - (len(runs) - 1) / 2) * width, c.get("tol", 0.0) * c["null"]
            ax.errorbar([x], [c["null"]], yerr=[[tol], [tol]], xerr=[[width / 2], [width / 2]], fmt="none",
                        ecolor=NULL["color"], elinewidth=1.5, capsize=0, zorder=5, label=label)
            label, values = None, values + [c["null"]]
    return values


@styled
def drift_figure(runs: list[dict]):
    """Relative drift per run and parameter group (log axis), each ES bar with its null and tolerance."""
    present, names = _groups(runs)
    keys = ["whole", *present]
    palette = colors(r["name"] for r in runs)
    fig, ax = new_figure(1, 1, max(9.0, 1.3 * len(keys) + 2), 7.0)
    ax = ax[0][0]
    width, values = 0.8 / len(runs), []
    for i, r in enumerate(runs):
        gs = r["drift"]["groups"]
        ys = [r["drift"]["whole"], *(gs[g]["drift"] if g in gs else None for g in present)]
        xs = [j + (i - (len(runs) - 1) / 2) * width for j in range(len(keys))]
        bars = [(x, y) for x, y in zip(xs, ys) if y is not None and y > 0]  # zero drift has no place on a log axis
        ax.bar([x for x, _ in bars], [y for _, y in bars], width, label=r["name"], color=palette[r["name"]])
        values += [y for _, y in bars]
    values += _drift_nulls(ax, runs, keys, width)
    ax.set_xticks(range(len(keys)), ["whole", *names])
    ax.set_yscale("log")
    ax.set_ylim(*log_limits(values))
    ax.set_ylabel("||delta|| / ||theta0||")
    ax.grid(alpha=0.3, axis="y")
    ax.set_title("relative drift, whole model and per parameter group")
    legend_below(fig, [ax], max_cols=2)
    return fig


def _shares(counts: dict, n: float, present: list[str]) -> list[float]:
    return [counts.get(g, 0) / n if n else 0.0 for g in present]


def _localisation_rows(runs, key: str, present) -> list[tuple[str, list[float], bool]]:
    """(label, share per group, is_null) per bar: each run, then its random-walk null when it has one."""
    null_key = "top_k" if key == "top_k_counts" else "top_fraction"
    out = []
    for r in runs:
        loc = r["localisation"]
        out.append((r["name"], _shares(loc[key], max(1, sum(loc[key].values())), present), False))
        nl = _null(r, null_key)
        if nl:
            k = loc["top_k"] if key == "top_k_counts" else loc["k_fraction"]
            expected = {g: c["null"] for g, c in nl.items()}
            out.append(("random-walk null of the run above", _shares(expected, k, present), True))
    return out


@styled
def localisation_figure(runs: list[dict]):
    """Where the largest |delta| land: stacked shares per group, each ES run followed by its null's shares."""
    present, names = _groups(runs)
    n_rows = len(_localisation_rows(runs, "top_k_counts", present))
    fig, axes = new_figure(1, 2, 15.0, 0.42 * n_rows + 3.0, sharey=True)
    for ax, key, title in ((axes[0][0], "top_k_counts", "top-k"), (axes[0][1], "top_fraction_counts", "top fraction")):
        rows = _localisation_rows(runs, key, present)
        for i, (_, shares, is_null) in enumerate(rows):
            left = 0.0
            look = {"height": 0.5, "alpha": 0.55, "hatch": "//", "edgecolor": "white"} if is_null else {"height": 0.8}
            for j, share in enumerate(shares):
                ax.barh(i, share, left=left, color=f"C{j}", label=names[j].replace("\n", " ") if i == 0 else None,
                        **look)
                left += share
        ax.set_yticks(range(len(rows)), [lab for lab, _, _ in rows])
        ax.set_ylim(len(rows) - 0.4, -0.6)  # the first run on top
        loc0 = runs[0]["localisation"]
        n0 = loc0["top_k"] if key == "top_k_counts" else loc0["k_fraction"]
        ax.set_xlabel(f"share of the {title} largest |delta|\n({n0} coordinates in the first run)")
        ax.set_xlim(0, 1.03)
    fig.suptitle("where the largest updates land (hatched: the random-walk null's expected shares)")
    legend_below(fig, [axes[0][0]], max_cols=len(present))
    return fig


def _acc_halfwidth(runs) -> str:
    """The widest 95% Wilson half-width of a drawn greedy accuracy, in points, over the re-evaluation's
    prompts: one number in the axis label instead of ten overlapping bands."""
    widths, prompts = [], set()
    for r in runs:
        n = r["sparsity"].get("prompts")
        for x in r["sparsity"].get("rows") or []:
            if n and "greedy_acc" in x:
                lo, hi = wilson(round(x["greedy_acc"] * n), n)
                widths.append(50 * (hi - lo))
                prompts.add(n)
    if not widths:
        return ""
    return f"\n[95% interval of a point: up to ±{max(widths):.0f} pts, {'/'.join(map(str, sorted(prompts)))} prompts]"


def _sparsity_panel(ax, runs, m: str, palette) -> None:
    """One method's runs: metric against the share zeroed, each run with its own marker and dash (grid
    points often score alike); the null's share below one ES step as a vertical line; the base (whole
    update zeroed) last, on top, with a level line across the panel to read each run against."""
    for r in runs:
        rows = [x for x in r["sparsity"].get("rows") or [] if m in x]
        if rows:
            ax.plot([100 * x["fraction_zeroed"] for x in rows], [100 * x[m] for x in rows], ms=5,
                    label=r["name"], **palette[r["name"]])
    for r in runs:
        c = _null(r, "below").get("one_step")
        if c and c.get("null") is not None:
            ax.axvline(100 * c["null"], label="random-walk null: share below one ES step", **NULL)
    for r in runs:  # the whole update zeroed is the base model
        for x in r["sparsity"].get("rows") or []:
            if m in x and x["fraction_zeroed"] >= 1:
                ax.axhline(100 * x[m], color=BASE["color"], lw=0.8, ls="--", alpha=0.5, zorder=1)
                ax.plot([100.0], [100 * x[m]], label="base (whole update zeroed; dashed: its level)",
                        **{**BASE, "ls": "none"})


@styled
def sparsity_figure(runs: list[dict]):
    """Functional sparsity, one column per method and one row per metric (greedy, pass@1)."""
    groups = _by_method(runs)
    palette = looks(r["name"] for r in runs)
    fig, axes = new_figure(2, len(groups), 5.2 * len(groups), 9.0, sharey="row", sharex=True)
    for j, (method, rs) in enumerate(groups):
        for i, m in enumerate(("greedy_acc", "pass@1")):
            ax = axes[i][j]
            _sparsity_panel(ax, rs, m, palette)
            ax.set_xlim(-3, 103)
            ax.grid(alpha=0.3)
            ax.set_ylabel(f"test {m} (%)" + (_acc_halfwidth(runs) if m == "greedy_acc" else "") if j == 0 else "")
        axes[0][j].set_title(method.upper())
        axes[-1][j].set_xlabel("nonzero update coordinates zeroed (%)")
    fig.suptitle("functional sparsity: zero |delta| below a threshold (one step x 1, 2, 4, ...), re-evaluate")
    legend_below(fig, axes.flat, max_cols=2)
    return fig


@styled
def entropy_figure(runs: list[dict]):
    """Token entropy against FLOPs, one panel per method; a point at 0 FLOPs (the base) drawn last when
    the records hold one, else a legend line says it was not measured."""
    groups = _by_method(runs)
    palette = looks(r["name"] for r in runs)  # own marker and dash: grid points often track each other
    fig, axes = new_figure(1, len(groups), 5.2 * len(groups), 6.0, sharey=True)
    right, base = 0.0, False
    for ax, (method, rs) in zip(axes[0], groups):
        for r in rs:
            pts = sorted((x["flops"], x["entropy"]) for x in r["entropy"] if x.get("entropy") is not None)
            if pts:
                ax.plot(*zip(*pts), ms=5, label=r["name"], **palette[r["name"]])
                right = max(right, pts[-1][0])
        for r in rs:
            for f, e in ((x["flops"], x["entropy"]) for x in r["entropy"] if x.get("entropy") is not None):
                if f == 0:
                    ax.plot([0.0], [e], label="base (0 FLOPs)", **{**BASE, "ls": "none"})
                    base = True
        ax.set_title(method.upper())
        ax.set_xlabel("training FLOPs spent")
        ax.grid(alpha=0.3)
    for ax in axes[0]:
        ax.set_xlim(-0.04 * right, 1.04 * right if right else 1.0)
    axes[0][0].set_ylabel("mean per-token entropy of samples (nats)")
    fig.suptitle("token entropy on a fixed held-out prompt set during training")
    extra = [] if base else [note_entry("base (0 FLOPs): not measured in these records")]
    legend_below(fig, axes.flat, extra, max_cols=2)
    return fig
