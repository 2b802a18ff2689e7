"""The analysis figures: drift.png, localisation.png, sparsity.png, entropy.png.

Every line or bar is named by model, run (method and settings), seed and FLOPs spent; each figure
is written atomically (harness/core/atomic.py), in the style of harness/reporting/plots.py.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from harness.analysis.groups import GROUPS, group_label  # noqa: E402
from harness.core.atomic import save_figure_atomic  # noqa: E402


def write_figures(runs: list[dict], out: Path) -> None:
    if not runs:
        return
    tied = any(r["tied"] for r in runs)
    present = [g for g in GROUPS if any(g in r["drift"]["groups"] for r in runs)]
    names = [g if g != "embed" else group_label(g, tied).replace(" (tied)", "\n(tied)") for g in present]
    _drift(runs, present, names, out / "drift.png")
    _localisation(runs, present, names, out / "localisation.png")
    _sparsity(runs, out / "sparsity.png")
    _entropy(runs, out / "entropy.png")


def _drift(runs, present, names, path):
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * (len(present) + 1)) + 4, 4.2))
    width = 0.8 / len(runs)
    for i, r in enumerate(runs):
        gs = r["drift"]["groups"]
        ys = [r["drift"]["whole"], *(gs[g]["drift"] if g in gs else 0 for g in present)]
        ax.bar([j + i * width for j in range(len(ys))], ys, width, label=r["name"], color=plt.cm.tab20(i % 20))
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(present) + 1)], ["whole", *names], fontsize=7)
    ax.set_yscale("symlog", linthresh=1e-4)
    ax.set_ylabel("||delta|| / ||theta0||")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1))  # outside: 20+ runs would hide the bars
    ax.set_title("relative drift, whole model and per parameter group", fontsize=10)
    fig.tight_layout()
    save_figure_atomic(fig, path)


def _localisation(runs, present, names, path):
    fig, axes = plt.subplots(1, 2, figsize=(11, 0.5 * len(runs) + 2.5), squeeze=False)
    for ax, key, title in ((axes[0][0], "top_k_counts", "top-k"), (axes[0][1], "top_fraction_counts", "top fraction")):
        for i, r in enumerate(runs):
            loc, left = r["localisation"], 0.0
            n = max(1, sum(loc[key].values()))
            for j, g in enumerate(present):
                share = loc[key].get(g, 0) / n
                ax.barh(i, share, left=left, color=f"C{j}", label=names[j] if i == 0 else None)
                left += share
        ax.set_yticks(range(len(runs)), [r["name"] for r in runs], fontsize=6)
        loc0 = runs[0]["localisation"]
        n0 = loc0["top_k"] if key == "top_k_counts" else loc0["k_fraction"]
        ax.set_xlabel(f"share of the {title} largest |delta| ({n0} coordinates in the first run)", fontsize=8)
        ax.set_xlim(0, 1)
    axes[0][1].legend(fontsize=6, loc="lower right")
    axes[0][1].set_yticks([])
    fig.suptitle("where the largest updates land", fontsize=10)
    fig.tight_layout()
    save_figure_atomic(fig, path)


def _sparsity(runs, path):
    fig, axes = plt.subplots(1, 2, figsize=(15, 4.2), squeeze=False)
    for ax, m in zip(axes[0], ("greedy_acc", "pass@1")):
        for r in runs:
            rows = r["sparsity"].get("rows") or []
            pts = [(x["fraction_zeroed"], x[m]) for x in rows if m in x]
            if pts:
                ax.plot([100 * a for a, _ in pts], [100 * b for _, b in pts], marker="o", ms=3, label=r["name"])
        ax.set_xlabel("nonzero update coordinates zeroed (%)")
        ax.set_ylabel(f"test {m} (%)")
        ax.grid(alpha=0.3)
        if ax.lines and ax is axes[0][-1]:  # one legend, right of both panels
            ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.suptitle("functional sparsity: zero |delta| below a threshold (one step x 1, 2, 4, ...), re-evaluate",
                 fontsize=10)
    fig.tight_layout()
    save_figure_atomic(fig, path)


def _entropy(runs, path):
    fig, ax = plt.subplots(figsize=(11, 4.2))
    for r in runs:
        pts = [(x["flops"], x["entropy"]) for x in r["entropy"] if x.get("entropy") is not None]
        if pts:
            ax.plot(*zip(*pts), marker="o", ms=3, label=r["name"])
    ax.set_xlabel("training FLOPs spent")
    ax.set_ylabel("mean per-token entropy of samples (nats)")
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.set_title("token entropy on a fixed held-out prompt set during training", fontsize=10)
    fig.tight_layout()
    save_figure_atomic(fig, path)
