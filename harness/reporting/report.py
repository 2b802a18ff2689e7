"""An experiment's tables and plots, rebuilt from its plan and records alone (harness/reporting/aggregate.py).

Writes into the output folder:
  table.md / table.csv   main table: per model, the fixed cells and each RL grid's validation choice
  summary.md             models x columns of the summary metric; with a `paper:` mapping in the
                         experiment file each cell reads "measured (paper, Δ)"
  grid.md / grid.csv     every grid point (validation score used to choose, test scores)
  runs.csv               every planned run with its status (ok | failed | missing) and error
  passk.png              pass@k curves of the main rows, one panel per model
  <axis>.md / .png       with `axis_plot:` (e.g. the sigma sweep): metric versus the axis per model

    python -m harness.tables runs/<group>/<stamp> --experiment --out results/<group>
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from harness.reporting.aggregate import aggregate, metric_names
from harness.reporting.plots import axis_plot, passk_panels
from harness.records import write_text_atomic

PERCENT = ("greedy_acc", "pass@", "maj@")
BUDGET_TOLERANCE = 0.10
NOTE = ("Accuracy-type metrics in %. A row with two or more successful seeds shows the mean over seeds "
        "[95% Student-t interval over seeds]; a row with one run shows that run's mean over test prompts "
        "[bootstrap 95% CI over prompts]. `*` = some planned runs of the row FAILED or are MISSING (see 'runs ok'); "
        "the number is over the runs that succeeded. Budget `!` = a run ended more than 10% away from its budget. "
        "RL grid rows are chosen on validation {select_by} (mean over seeds), never on test.")


def _isnan(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _pct(m: str) -> bool:
    return m.startswith(PERCENT)


def fmt_value(v: float, m: str) -> str:
    return "-" if _isnan(v) else (f"{100 * v:.1f}" if _pct(m) else f"{v:.3f}")


def metric_cell(row: pd.Series, m: str) -> str:
    """'v [lo, hi]', '*' when runs of the row are missing or failed, FAILED/MISSING when none succeeded."""
    if row["status"] != "ok":
        return row["status"].upper()
    v = row.get(m)
    if _isnan(v):
        return "-"
    star = "*" if row["n_ok"] < row["n_planned"] else ""
    return f"{fmt_value(v, m)} [{fmt_value(row[f'{m}_lo'], m)}, {fmt_value(row[f'{m}_hi'], m)}]{star}"


def runs_ok(row: pd.Series) -> str:
    parts = [f"{row['n_ok']}/{row['n_planned']}"]
    parts += [f"{row['n_failed']} FAILED"] if row["n_failed"] else []
    parts += [f"{row['n_missing']} MISSING"] if row["n_missing"] else []
    return ", ".join(parts)


def budget_cell(row: pd.Series) -> str:
    if _isnan(row.get("budget")):
        return "-"
    off = (row.get("method") != "base" and not _isnan(row.get("budget_spent"))
           and abs(row["budget_spent"] / row["budget"] - 1) > BUDGET_TOLERANCE)
    return f"{row['budget']:.3g} {row['budget_kind']}{'!' if off else ''}"


def delta_vs_base(df: pd.DataFrame, metric: str = "greedy_acc") -> list[str]:
    """Points of `metric` over the same model's base row ('-' when there is none).

    With several successful base rows for one model (an ad-hoc folder of runs), their mean is the reference.
    """
    ok_base = df[(df["method"] == "base") & (df["status"] == "ok")]
    base = ok_base.groupby("model")[metric].mean().to_dict() if metric in df.columns else {}
    out = []
    for _, r in df.iterrows():
        b = base.get(r["model"])
        ok = r["status"] == "ok" and r.get("method") != "base" and b is not None and not _isnan(r.get(metric))
        out.append(f"{100 * (r[metric] - b):+.1f}" if ok else "-")
    return out


def markdown(df: pd.DataFrame, metrics: list[str], extra: dict[str, list[str]] | None = None) -> str:
    """One line per row: model, run, runs ok, extra columns, metrics, FLOPs, budget, steps, wall."""
    extra = dict(extra or {})
    if "greedy_acc" in metrics and (df.get("method") == "base").any():
        extra["Δ greedy vs base"] = delta_vs_base(df)
    head = ["model", "run", "runs ok", *extra, *metrics, "train FLOPs", "budget", "steps", "wall s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, (_, r) in enumerate(df.iterrows()):
        num = lambda v, f: "-" if _isnan(v) else f.format(v)  # noqa: E731
        cells = [str(r["model"]), str(r["label"]), runs_ok(r), *[v[i] for v in extra.values()],
                 *[metric_cell(r, m) for m in metrics], num(r.get("flops_used"), "{:.3g}"), budget_cell(r),
                 num(r.get("steps"), "{:.0f}"), num(r.get("wall_s"), "{:.0f}")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _published(entry, metric: str):
    """The paper's number for `metric` from a number or a {metric: number} mapping (None if absent)."""
    return entry.get(metric) if isinstance(entry, dict) else entry


def _per_metric(paper: dict | None) -> bool:
    """True when the published numbers are given per metric ({col: {metric: value}})."""
    return any(isinstance(v, dict) for cols in (paper or {}).values() for v in (cols or {}).values())


def heldout_paper_markdown(records: list[dict], paper_heldout: dict | None,
                           metrics: tuple[str, ...] = ("pass@1", "pass@16", "pass@32")) -> str:
    """Held-out tasks against published numbers: task -> model -> column -> [values of `metrics`].

    Each cell is "measured (published, Δ)", the measured value a mean over the successful seeds.
    """
    blocks = []
    for task, models in (paper_heldout or {}).items():
        lines = [f"\n## Held-out {task}: measured (published, Δ), test, in %\n",
                 "| model | run | " + " | ".join(metrics) + " |", "|---|---|" + "---|" * len(metrics)]
        for model, cols in models.items():
            for col, published in cols.items():
                done = [r["heldout"][task]["metrics"] for r in records if r.get("status") == "ok"
                        and r.get("model_key", r.get("model")) == model and r.get("column", r.get("label")) == col
                        and task in r.get("heldout", {})]
                cells = []
                for m, pub in zip(metrics, published):
                    vals = [d[m]["mean"] for d in done if m in d]
                    got = 100 * sum(vals) / len(vals) if vals else None
                    cells.append(f"- (paper {pub:.1f})" if got is None else f"{got:.1f} ({pub:.1f}, {got - pub:+.1f})")
                lines.append(f"| {model} | {col} | " + " | ".join(cells) + " |")
        blocks.append("\n".join(lines) + "\n")
    return "".join(blocks)


def _fmt_pub(v: float, metric: str) -> str:
    return f"{v:.1f}" if _pct(metric) else f"{v:.3f}"


def summary_markdown(main: pd.DataFrame, metric: str, paper: dict | None, note: str | None) -> str:
    """Models x columns of `metric` on test; "measured (paper, Δ)" where the paper has a number.

    `paper` maps model -> column -> a number (for the experiment's first summary metric) or a
    mapping metric -> number (experiments that publish several metrics per cell, e.g. reward and KL).
    """
    cols = list(dict.fromkeys(main["column"]))
    models = list(dict.fromkeys(main["model"]))
    lines = ["| model | " + " | ".join(cols) + " |", "|" + "---|" * (len(cols) + 1)]
    for model in models:
        cells = []
        for col in cols:
            hit = main[(main["model"] == model) & (main["column"] == col)]
            pub = _published(((paper or {}).get(model) or {}).get(col), metric)
            if hit.empty:
                cells.append("-" if pub is None else f"- (paper {_fmt_pub(pub, metric)})")
                continue
            r = hit.iloc[0]
            got = r["status"].upper() if r["status"] != "ok" else fmt_value(r.get(metric), metric)
            star = "*" if r["status"] == "ok" and r["n_ok"] < r["n_planned"] else ""
            if pub is not None and r["status"] == "ok" and not _isnan(r.get(metric)):
                diff = (100 if _pct(metric) else 1) * r[metric] - pub
                cells.append(f"{got}{star} ({_fmt_pub(pub, metric)}, {diff:+.1f})" if _pct(metric)
                             else f"{got}{star} ({_fmt_pub(pub, metric)}, {diff:+.3f})")
            else:
                cells.append(f"{got}{star}" + ("" if pub is None else f" (paper {_fmt_pub(pub, metric)})"))
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    unit = " in %" if _pct(metric) else ""
    text = "\n".join(lines) + f"\n\nTest {metric}{unit}; RL columns are each grid's point chosen on validation."
    if paper:
        text += " Each cell: measured (published, measured - published)."
    return text + (f" {note}" if note else "") + "\n"


def axis_markdown(points: pd.DataFrame, main: pd.DataFrame, spec: dict, metrics: list[str]) -> str:
    """Per metric: models x axis values of the swept cell, with the baseline (e.g. the untrained
    model) before and the reference (e.g. tuned GRPO) after."""
    key, cell, ref, base = spec["key"], spec["cell"], spec.get("reference"), spec.get("baseline")
    sweep = points[points["cell"] == cell].copy()
    sweep["x"] = [p.get(key) for p in sweep["point"]]
    xs = sorted(x for x in sweep["x"].dropna().unique())
    out = []
    for m in metrics:
        head = [*([base] if base else []), *(f"{key.split('.')[-1]}={x:g}" for x in xs),
                *([f"{ref} (chosen on validation)"] if ref else [])]
        lines = [f"### test {m}\n", "| model | " + " | ".join(head) + " |", "|" + "---|" * (len(head) + 1)]
        for model in dict.fromkeys(sweep["model"]):
            cells = []
            if base:  # the untrained model: does any sigma help at all?
                hit = main[(main["model"] == model) & (main["cell"] == base)]
                cells.append(metric_cell(hit.iloc[0], m) if not hit.empty else "-")
            for x in xs:
                hit = sweep[(sweep["model"] == model) & (sweep["x"] == x)]
                cells.append(metric_cell(hit.iloc[0], m) if not hit.empty else "-")
            if ref:
                hit = main[(main["model"] == model) & (main["cell"] == ref)]
                cells.append(metric_cell(hit.iloc[0], m) if not hit.empty else "-")
            lines.append(f"| {model} | " + " | ".join(cells) + " |")
        out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"


def _csv(df: pd.DataFrame, path: Path) -> None:
    drop = [c for c in ("curve", "path", "errors") if c in df.columns]
    write_text_atomic(path, df.drop(columns=drop).to_csv(index=False))


def write_report(root: Path, out_dir: Path, select_by: str | None = None, title: str | None = None) -> dict:
    """Rebuild every table and plot of the experiment whose records are under `root`."""
    agg = aggregate(Path(root), select_by)
    man, main, points, runs = agg["manifest"] or {}, agg["main"], agg["points"], agg["runs"]
    title = title or man.get("group") or Path(root).name
    out_dir = Path(out_dir)
    if runs.empty:
        write_text_atomic(out_dir / "table.md", f"# {title}\n\nNo records under {root} yet.\n")
        return agg
    metrics, sel = metric_names(runs), agg["select_by"]
    note = NOTE.format(select_by=sel)
    wanted = man.get("summary_metrics") or [man.get("summary_metric", "greedy_acc")]
    paper = man.get("paper")
    summary = "\n".join(summary_markdown(main, m, paper if i == 0 or _per_metric(paper) else None, man.get("paper_note"))
                        for i, m in enumerate(wanted))
    from harness.tables import heldout_markdown  # every run on the held-out tasks (eval.tasks), if any

    write_text_atomic(out_dir / "table.md", f"# {title}: test split\n\n{markdown(main, metrics)}\n{note}\n\n"
                                            f"## Summary\n\n{summary}" + heldout_markdown(agg["records"])
                      + heldout_paper_markdown(agg["records"], man.get("paper_heldout")))
    write_text_atomic(out_dir / "summary.md", f"# {title}: summary\n\n{summary}")
    grid = points[points["grid"].apply(lambda g: isinstance(g, str))]
    if not grid.empty:
        val = {f"validation {sel}": [("-" if _isnan(v) else fmt_value(v, sel)) + (" ←" if c else "")
                                     for v, c in zip(grid["val"], grid["chosen"])]}
        write_text_atomic(out_dir / "grid.md", f"# {title}: every grid point (← = chosen on validation)\n\n"
                                               f"{markdown(grid, metrics, val)}\n{note}\n")
        _csv(grid, out_dir / "grid.csv")
    _csv(main, out_dir / "table.csv")
    _csv(runs, out_dir / "runs.csv")
    passk_panels(main, out_dir / "passk.png", title)
    spec = man.get("axis_plot")
    if spec:
        name = spec.get("name") or spec["key"].split(".")[-1]
        shown = [m for m in spec.get("metrics", ["greedy_acc", "pass@16"]) if m in metrics]
        write_text_atomic(out_dir / f"{name}.md", f"# {title}: test metrics versus {name}\n\n"
                                                  f"{axis_markdown(points, main, spec, shown)}\n{note}\n")
        axis_plot(points, main, spec, shown, out_dir / f"{name}.png", title)
    return agg
