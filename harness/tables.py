"""Tables and plots rebuilt from run records alone (never edited by hand).

    python -m harness.tables runs/adhoc --out results/adhoc                        # plain runs
    python -m harness.tables runs/quickstart/<stamp> --experiment --out results/quickstart   # an experiment

writes table.md, table.csv and passk.png (an experiment adds grid.md, summary.md, runs.csv: harness/reporting/report.py).
Records from another schema version are skipped with a warning; failed runs stay in the table as rows marked FAILED, so nothing disappears silently.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: no display on servers or CI
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from harness.records import read_records  # noqa: E402
from harness.reporting.report import BUDGET_TOLERANCE, _isnan, delta_vs_base, fmt_value  # noqa: E402

log = logging.getLogger(__name__)
METRIC_ORDER = ["greedy_acc", "pass@1", "pass@16", "pass@32", "maj@16", "maj@32", "mean_reward", "kl_to_base"]


def records_frame(records: list[dict], split: str = "test") -> pd.DataFrame:
    """One row per record: identity columns, then <metric>, <metric>_lo, <metric>_hi."""
    rows = []
    for r in records:
        b = r.get("budget", {})
        row = {"label": r.get("label", r.get("method", "?")), "model": r.get("model", "?"),
               "method": r.get("method", "?"), "seed": r.get("seed"), "status": r.get("status", "ok"),
               "flops_used": b.get("flops_used"), "budget": b.get("limit"), "budget_kind": b.get("kind"),
               "budget_spent": b.get("spent"), "train_steps": b.get("steps"),
               "wall_s": r.get("wall_s", {}).get("total"), "path": r.get("_path")}
        for name, m in r.get("metrics", {}).get(split, {}).items():
            row[name], row[f"{name}_lo"], row[f"{name}_hi"] = m["mean"], m["ci_low"], m["ci_high"]
        rows.append(row)
    return pd.DataFrame(rows)


def _metric_cols(df: pd.DataFrame) -> list[str]:
    known = [m for m in METRIC_ORDER if m in df.columns]
    extra = sorted(c for c in df.columns if c.startswith(("pass@", "maj@")) and not c.endswith(("_lo", "_hi"))
                   and c not in known)
    return known + extra


def _cell(row: pd.Series, m: str) -> str:
    if row["status"] != "ok":
        return "FAILED"
    v = row.get(m)
    if _isnan(v):
        return "-"
    return f"{fmt_value(v, m)} [{fmt_value(row.get(f'{m}_lo', v), m)}, {fmt_value(row.get(f'{m}_hi', v), m)}]"


def _delta_vs_base(df: pd.DataFrame, metric: str = "greedy_acc") -> list[str] | None:
    """Points of `metric` gained over the same model's base run (None when there is no base run)."""
    if metric not in df.columns or not ((df["method"] == "base") & (df["status"] == "ok")).any():
        return None
    return delta_vs_base(df, metric)


def budget_flag(row: pd.Series) -> str:
    """'!' when a trained run ended more than 10% away from its budget (base runs spend nothing)."""
    if row["method"] == "base" or not row.get("budget") or row.get("budget_spent") is None:
        return ""
    return "!" if abs(row["budget_spent"] / row["budget"] - 1) > BUDGET_TOLERANCE else ""


def markdown_table(df: pd.DataFrame, extra: dict[str, list[str]] | None = None) -> str:
    """Percent metrics with 95% CIs, FLOPs used, budget flag and wall time, one line per run.

    Args:
        df: from records_frame.
        extra: more columns (name -> one cell per row), shown after the model column.
    """
    metrics, extra = _metric_cols(df), dict(extra or {})
    delta = _delta_vs_base(df)
    if delta:
        extra["Δ greedy vs base"] = delta
    head = ["run", "model", *extra, *metrics, "train FLOPs", "budget", "steps", "wall s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, (_, row) in enumerate(df.iterrows()):
        flops = "-" if pd.isna(row["flops_used"]) else f"{row['flops_used']:.3g}"
        budget = "-" if pd.isna(row["budget"]) else f"{row['budget']:.3g} {row['budget_kind']}{budget_flag(row)}"
        steps = "-" if pd.isna(row["train_steps"]) else str(int(row["train_steps"]))
        wall = "-" if pd.isna(row["wall_s"]) else f"{row['wall_s']:.0f}"
        cells = [row["label"], row["model"], *[v[i] for v in extra.values()], *[_cell(row, m) for m in metrics],
                 flops, budget, steps, wall]
        lines.append("| " + " | ".join(cells) + " |")
    note = ("\nAccuracy-type metrics in %, mean over test prompts [bootstrap 95% CI]. "
            "Budget '!' = the run ended more than 10% away from its budget.\n")
    return "\n".join(lines) + "\n" + note


def passk_plot(records: list[dict], path: Path, split: str = "test", title: str = "") -> None:
    """pass@k versus k (log scale), one line per run."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for r in records:
        curve = r.get("pass_curve", {}).get(split)
        if r.get("status", "ok") != "ok" or not curve:
            continue
        ks = sorted(int(k) for k in curve)
        ax.plot(ks, [100 * curve[str(k)] if str(k) in curve else 100 * curve[k] for k in ks], marker="o",
                label=r.get("label", r.get("method")))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k (samples per prompt)")
    ax.set_ylabel(f"pass@k on {split} (%)")
    ax.set_title(title or f"pass@k, {split} split")
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_tables(records_root: Path, out_dir: Path, split: str = "test", title: str = "") -> pd.DataFrame:
    """Rebuild table.md, table.csv and passk.png in `out_dir` from the records under `records_root`."""
    records, warnings = read_records(records_root)
    for w in warnings:
        log.warning(w)
    for r in records:
        if r.get("status", "ok") != "ok":
            log.warning("run %s failed: %s", r.get("_path"), r.get("error", "no error recorded"))
    out_dir.mkdir(parents=True, exist_ok=True)
    df = records_frame(records, split)
    if df.empty:
        log.warning("no records under %s; nothing to tabulate", records_root)
        return df
    (out_dir / "table.md").write_text((f"# {title}\n\n" if title else "") + markdown_table(df)
                                      + heldout_markdown(records))
    df.drop(columns=["path"]).to_csv(out_dir / "table.csv", index=False)
    passk_plot(records, out_dir / "passk.png", split, title)
    return df


def heldout_markdown(records: list[dict]) -> str:
    """One table block per held-out task (eval.tasks): the trained policies on other tasks' tests."""
    names = sorted({n for r in records for n in r.get("heldout", {})})
    blocks = []
    for name in names:
        rows = [{**r, "metrics": {"test": r["heldout"][name]["metrics"]}} for r in records if name in r.get("heldout", {})]
        blocks.append(f"\n## Held-out task: {name} (test split)\n\n" + markdown_table(records_frame(rows)))
    return "".join(blocks)


def write_experiment_tables(root: Path, out_dir: Path, select_by: str | None = None, title: str | None = None) -> None:
    """An experiment's tables and plots (models x cells x seeds, grids chosen on validation): harness/reporting/report.py."""
    from harness.reporting.report import write_report

    agg = write_report(root, out_dir, select_by, title)
    for w in agg["warnings"]:
        log.warning(w)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m harness.tables", description="Rebuild tables from run records.")
    ap.add_argument("records", type=Path, help="folder searched recursively for record.json")
    ap.add_argument("--out", type=Path, help="output folder (default: the records folder)")
    ap.add_argument("--split", default="test")
    ap.add_argument("--experiment", action="store_true",
                    help="an experiment folder (runs/<group>/<stamp>): seeds, models, grids chosen on validation, "
                         "missing runs marked from its experiment.json")
    ap.add_argument("--title", default=None, help="table title (default: the experiment's group)")
    ap.add_argument("--select-by", default=None, help="validation metric that chooses grid points "
                    "(default: the experiment's select_by, else greedy_acc)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    out = args.out or args.records
    if args.experiment:
        write_experiment_tables(args.records, out, args.select_by, args.title)
        print((out / "table.md").read_text())
        return
    df = write_tables(args.records, out, args.split, args.title or "")
    if not df.empty:
        print(markdown_table(df))


if __name__ == "__main__":
    main()
