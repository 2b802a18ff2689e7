"""Tables and plots of a records folder, rebuilt from its plan and records alone (reporting/aggregate.py).

One path for everything: an experiment folder (runs/<group>/<stamp>, with experiment.json) and a
folder of single runs (each run a cell of its own, no plan) go through the same aggregation.
Writes into the output folder:
  table.md / table.csv   main table: per model, the fixed cells and each RL grid's validation choice
  summary.md             models x columns of the summary metric; with a `paper:` mapping in the
                         experiment file each cell reads "measured (paper, Δ)"
  grid.md / grid.csv     every grid point (validation score used to choose, test scores)
  runs.csv               every planned run with its status (ok | failed | interrupted | running | missing)
  versions.json          what made the records: git shas, package versions, CPU model and torch's CPU
                         capability, each value with its run count (harness/reporting/provenance.py)
  passk.png              pass@k curves of the main rows, one panel per model
  curves.png             train reward and validation accuracy against FLOPs (learning curves)
  pareto.png             with eval.kl_to_base: mean reward against KL to the base model (Table 2's reading)
  <axis>.md / .png       with `axis_plot:` (e.g. the sigma sweep): metric versus the axis per model
  comparisons.md / .csv  paired comparisons (trained vs base, ES vs each chosen RL row, variants vs full
                         ES, population N vs 30): paired by prompt always, by seed with >= 2 seeds
                         (harness/reporting/comparisons.py)
  findings.md            the detected differences and, separately, those not detected, each with its interval

Task notes (a record's task_info["notes"], e.g. MBPP's degenerate rows) are listed under the
tables of table.md and summary.md. A folder with no records raises NoRecords and writes nothing.

    python -m harness.reporting runs/<group>/<stamp> --out results/<group>
"""
from __future__ import annotations

import logging
import math
import re
from pathlib import Path

import pandas as pd

from harness.core.atomic import write_json_atomic, write_text_atomic
from harness.core.errors import UserError
from harness.core.records import Manifest, Record, read_records, write_manifest
from harness.reporting.aggregate import NOT_OK, ONE_SEED, SUPERSEDED, aggregate, metric_names, model_task, plan_of
from harness.reporting.comparisons import write_comparisons
from harness.reporting.curves import curves_plot
from harness.reporting.format import fmt_value, is_percent, md_row
from harness.reporting.format import isnan
from harness.reporting.grid_edges import edge_notes
from harness.reporting.heldout import heldout_markdown, heldout_paper_markdown
from harness.reporting.outcomes import write_outcomes
from harness.reporting.plots import axis_plot, pareto_plot, passk_panels
from harness.reporting.provenance import mixed_warning, provenance

log = logging.getLogger("esbench")

BUDGET_TOLERANCE = 0.10
NOTE = ("Accuracy-type metrics in %. A row with two or more successful seeds shows the mean over seeds "
        "[95% Student-t interval over seeds]; a row with one run shows that run's mean over test prompts "
        "[bootstrap 95% CI over prompts]. `*` = some planned runs of the row FAILED, were INTERRUPTED or are "
        "MISSING (see 'runs ok'; on an RL grid row, runs of any point of its grid: the choice saw only the runs "
        "that succeeded); the number is over the runs that succeeded. A rerun is not a seed: a later record of the "
        "same run replaces the earlier one (runs.csv lists it as superseded); runs of one seed show no interval "
        "('one seed'). Budget `!` = a run ended more than "
        "10% away from its budget. RL grid rows are chosen on validation {select_by} (mean over seeds), never on test.")
SUMMARY_STAR = ("`*` = some planned runs of the cell (on an RL column, of any point of its grid) FAILED, "
                "were INTERRUPTED or are MISSING; table.md's 'runs ok' says which.")


class NoRecords(UserError, ValueError):
    """The folder holds no run records: nothing to tabulate (and nothing is written)."""


class TrackedResults(UserError, ValueError):
    """A run was asked to write its tables into a folder whose files git tracks (the curated results/)."""
    nothing_started = True  # raised before any run: the CLI removes the folder Hydra made for it


def refuse_tracked(out_dir: Path, overwrite: bool = False) -> None:
    """Raise TrackedResults when git tracks files in `out_dir` and `overwrite` is not set: a copied command
    must never rewrite committed results. Curating into results/ is the explicit `+overwrite_results=true`.
    Outside a git checkout (or without git) there is nothing to protect."""
    import subprocess

    if overwrite:
        return
    out = Path(out_dir).resolve()
    where = next((p for p in (out, *out.parents) if p.is_dir()), None)
    try:
        tracked = subprocess.run(["git", "ls-files", "--", str(out)], cwd=where, capture_output=True, text=True,
                                 timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return
    if tracked:
        raise TrackedResults(f"{out_dir} holds files git tracks (committed results): tables go to outputs/ by default, "
                             "so drop results_dir=..., or add +overwrite_results=true to rewrite them on purpose")


def incomplete(row: pd.Series) -> bool:
    """True when a planned run of the row, or of the RL grid its point was chosen from, did not succeed."""
    grid_ok, grid_planned = row.get("grid_ok"), row.get("grid_planned")
    return row["n_ok"] < row["n_planned"] or (not isnan(grid_ok) and grid_ok < grid_planned)


def metric_cell(row: pd.Series, m: str) -> str:
    """'v [lo, hi]', '*' when runs of the row are missing or failed, FAILED/MISSING when none succeeded."""
    if row["status"] != "ok":
        return row["status"].upper()
    v = row.get(m)
    if isnan(v):
        return "-"
    star = "*" if incomplete(row) else ""
    if row.get("interval") == ONE_SEED and isnan(row.get(f"{m}_lo")):
        return f"{fmt_value(v, m)} ({ONE_SEED}){star}"
    return f"{fmt_value(v, m)} [{fmt_value(row[f'{m}_lo'], m)}, {fmt_value(row[f'{m}_hi'], m)}]{star}"


def runs_ok(row: pd.Series) -> str:
    """"2/2", "1/2, 1 FAILED"; a grid row chosen from a partial grid adds "(grid 3/4*, 1 INTERRUPTED)"."""
    parts = [f"{row['n_ok']}/{row['n_planned']}"]
    parts += [f"{row[f'n_{s}']} {s.upper()}" for s in NOT_OK if row.get(f"n_{s}")]
    text = ", ".join(parts)
    grid_ok, grid_planned = row.get("grid_ok"), row.get("grid_planned")
    if not isnan(grid_ok) and grid_ok < grid_planned:
        grid = [f"grid {grid_ok:.0f}/{grid_planned:.0f}*"]
        grid += [f"{row[f'grid_{s}']:.0f} {s.upper()}" for s in NOT_OK if row.get(f"grid_{s}")]
        text += f" ({', '.join(grid)})"
    return text


def budget_cell(row: pd.Series) -> str:
    if isnan(row.get("budget")):
        return "-"
    off = (row.get("trains", True) and not isnan(row.get("budget_spent"))
           and abs(row["budget_spent"] / row["budget"] - 1) > BUDGET_TOLERANCE)
    return f"{row['budget']:.3g} {row['budget_kind']}{'!' if off else ''}"


def delta_vs_base(df: pd.DataFrame, metric: str = "greedy_acc") -> list[str]:
    """Points of `metric` over the same model's untrained row (a method with trains=False; '-' when none).

    With several successful untrained rows for one model (a folder of single runs), their mean is the reference.
    """
    ok_base = df[(~df["trains"].astype(bool)) & (df["status"] == "ok")]
    base = ok_base.groupby("model")[metric].mean().to_dict() if metric in df.columns else {}
    out = []
    for _, r in df.iterrows():
        b = base.get(r["model"])
        ok = r["status"] == "ok" and r.get("trains", True) and b is not None and not isnan(r.get(metric))
        out.append(f"{100 * (r[metric] - b):+.1f}" if ok else "-")
    return out


def markdown(df: pd.DataFrame, metrics: list[str], extra: dict[str, list[str]] | None = None) -> str:
    """One line per row: model, run, runs ok, extra columns, metrics, FLOPs, budget, steps, wall.

    "train FLOPs" is the ledger's charge (what the method needs); "executed FLOPs" what ran, padding
    included, and "exec/charged" their ratio (harness/core/budget.py; '-' for runs that did not report it).
    """
    extra = dict(extra or {})
    if "greedy_acc" in metrics and "trains" in df and (~df["trains"].astype(bool)).any():
        extra["Δ greedy vs base"] = delta_vs_base(df)
    head = ["model", "run", "runs ok", *extra, *metrics, "train FLOPs", "executed FLOPs", "exec/charged", "budget", "steps",
            "wall s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, (_, r) in enumerate(df.iterrows()):
        num = lambda v, f: "-" if isnan(v) else f.format(v)  # noqa: E731
        cells = [str(r["model"]), str(r["label"]), runs_ok(r), *[v[i] for v in extra.values()],
                 *[metric_cell(r, m) for m in metrics], num(r.get("flops_used"), "{:.3g}"),
                 num(r.get("executed_flops"), "{:.3g}"), num(_ratio(r.get("executed_flops"), r.get("flops_used")), "{:.2f}"),
                 budget_cell(r),
                 num(r.get("steps"), "{:.0f}"), num(r.get("wall_s"), "{:.0f}")]
        lines.append(md_row(cells))
    return "\n".join(lines) + "\n"


def _ratio(executed, charged) -> float:
    return math.nan if isnan(executed) or isnan(charged) or not charged else executed / charged


def _published(entry, metric: str):
    """The paper's number for `metric` from a number or a {metric: number} mapping (None if absent)."""
    return entry.get(metric) if isinstance(entry, dict) else entry


def _per_metric(paper: dict | None) -> bool:
    """True when the published numbers are given per metric ({col: {metric: value}})."""
    return any(isinstance(v, dict) for cols in (paper or {}).values() for v in (cols or {}).values())


def _fmt_pub(v: float, metric: str) -> str:
    return f"{v:.1f}" if is_percent(metric) else f"{v:.3f}"


def summary_markdown(main: pd.DataFrame, metric: str, paper: dict | None, note: str | None) -> str:
    """Models x columns of `metric` on test; "measured (paper, Δ)" where the paper has a number.

    `paper` maps model -> column -> a number (for the experiment's first summary metric) or a
    mapping metric -> number (experiments that publish several metrics per cell, e.g. reward and KL).
    """
    cols = list(dict.fromkeys(main["column"]))
    models = list(dict.fromkeys(main["model"]))
    lines = ["| model | " + " | ".join(cols) + " |", "|" + "---|" * (len(cols) + 1)]
    starred = False
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
            star = "*" if r["status"] == "ok" and incomplete(r) else ""
            starred = starred or bool(star)
            if pub is not None and r["status"] == "ok" and not isnan(r.get(metric)):
                diff = (100 if is_percent(metric) else 1) * r[metric] - pub
                cells.append(f"{got}{star} ({_fmt_pub(pub, metric)}, {diff:+.1f})" if is_percent(metric)
                             else f"{got}{star} ({_fmt_pub(pub, metric)}, {diff:+.3f})")
            else:
                cells.append(f"{got}{star}" + ("" if pub is None else f" (paper {_fmt_pub(pub, metric)})"))
        lines.append(md_row([model, *cells]))
    unit = " in %" if is_percent(metric) else ""
    grids = main["grid"].apply(lambda g: isinstance(g, str)).any() if "grid" in main else False
    text = "\n".join(lines) + f"\n\nTest {metric}{unit}." + (" RL columns are each grid's point chosen on validation."
                                                           if grids else "")
    if paper:
        text += " Each cell: measured (published, measured - published)."
    if starred:
        text += f" {SUMMARY_STAR}"
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
            lines.append(md_row([model, *cells]))
        out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"


def _csv(df: pd.DataFrame, path: Path) -> None:
    drop = [c for c in ("curve", "path", "errors", "train_curve", "val_curve", "train_curves", "val_curves")
            if c in df.columns]
    write_text_atomic(path, df.drop(columns=drop).to_csv(index=False))


def task_notes(records: list[Record]) -> str:
    """The distinct notes the tasks left in their records (task_info["notes"]), as a markdown list:
    the training task's and every held-out task's (eval.tasks)."""
    notes = {}
    for rec in records:
        task = (rec.task or "").rsplit(".", 1)[-1] or "task"
        for n in (rec.task_info or {}).get("notes") or []:
            notes.setdefault((task, str(n)), None)
        for name, held in (rec.heldout or {}).items():
            for n in (held.get("task_info") or {}).get("notes") or []:
                notes.setdefault((f"{name} (held out)", str(n)), None)
    if not notes:
        return ""
    return "\n## Task notes\n\n" + "".join(f"- {task}: {n}\n" for task, n in notes)


def output_name(root: Path) -> str:
    """The group whose tables these are (outputs/<name>/): the plan's group, else a record's, else the folder's name."""
    man = plan_of(root, [])  # a damaged plan: the group comes from the records or the folder
    if man is not None and man.group:
        return safe_name(man.group)
    records, _ = read_records(root)
    group = next((r.config.get("group") for r in records if isinstance(r.config, dict) and r.config.get("group")), None)
    return safe_name(str(group or Path(root).resolve().name))


def safe_name(group) -> str:
    """A group as one folder name under outputs/: a record's group is data from a run folder, and "/etc" or
    "../x" there must not send the tables outside outputs/ (separators and leading dots become "_")."""
    name = re.sub(r"[^A-Za-z0-9._=+-]+", "_", str(group)).lstrip(".") or "_"
    return name


def write_report(root: Path, out_dir: Path, select_by: str | None = None, title: str | None = None,
                 only: tuple[str, str] | None = None) -> dict:
    """Rebuild every table and plot of the experiment whose records are under `root`.

    Raises NoRecords (writing nothing) when `root` holds no readable record: an empty table must
    never replace a good one. A folder of single runs (no plan) holding several models or tasks is
    split: one folder of tables per (model, task) under `out_dir` (write_split); `only` picks one pair.
    """
    agg = aggregate(Path(root), select_by, only)
    man, main, points, runs = agg["manifest"] or Manifest(group=Path(root).name, stamp=""), agg["main"], agg["points"], agg["runs"]
    title = title or man.group
    out_dir = Path(out_dir)
    if not agg["records"]:
        unread = f" ({len(agg['warnings'])} unreadable: {agg['warnings'][0]})" if agg["warnings"] else ""
        raise NoRecords(f"no run records under {root}{unread}; pass a records folder such as runs/<group>/<stamp> "
                        "(see `ls runs/`); nothing was written")
    pairs = list(dict.fromkeys(model_task(r) for r in agg["records"]))
    if agg["manifest"] is None and only is None and len(pairs) > 1:
        return write_split(root, out_dir, select_by, title, agg, pairs)
    metrics, sel = metric_names(runs), agg["select_by"]
    note = NOTE.format(select_by=sel) + superseded_line(runs)
    wanted = man.summary_metrics or [man.summary_metric]
    paper = man.paper
    summary = "\n".join(summary_markdown(main, m, paper if i == 0 or _per_metric(paper) else None, man.paper_note)
                        for i, m in enumerate(wanted))
    notes = task_notes(agg["records"])
    write_text_atomic(out_dir / "table.md", f"# {title}: test split\n\n{markdown(main, metrics)}\n{note}\n\n"
                                            f"## Summary\n\n{summary}" + heldout_markdown(agg["records"])
                      + heldout_paper_markdown(agg["records"], man.paper_heldout) + notes)
    write_text_atomic(out_dir / "summary.md", f"# {title}: summary\n\n{summary}{notes}")
    # which records made these tables, so `python -m harness.analysis <this folder>` reads those and no others
    prov = provenance(agg["records"]) | {"records": {"group": man.group, "stamp": man.stamp}}
    write_json_atomic(out_dir / "versions.json", prov)
    mixed = mixed_warning(prov)
    if mixed:
        agg["warnings"].append(mixed)
    grid = points[points["grid"].apply(lambda g: isinstance(g, str))]
    if not grid.empty:
        val = {f"validation {sel}": [("-" if isnan(v) else fmt_value(v, sel)) + (" ←" if c else "")
                                     for v, c in zip(grid["val"], grid["chosen"])]}
        edges = edge_notes(grid)
        edge_text = ("\n\nChosen at an edge of the grid:\n\n" + "\n".join(edges) + "\n") if edges else "\n"
        write_text_atomic(out_dir / "grid.md", f"# {title}: every grid point (← = chosen on validation)\n\n"
                                               f"{markdown(grid, metrics, val)}\n{note}{edge_text}")
        _csv(grid, out_dir / "grid.csv")
    _csv(main, out_dir / "table.csv")
    _csv(runs, out_dir / "runs.csv")
    # per-prompt outcomes and the plan: the comparisons below recompute from the folder alone (outcomes.py)
    if write_outcomes(agg["records"], runs, out_dir) and agg["manifest"] is not None:
        write_manifest(out_dir, agg["manifest"])
    passk_panels(main, out_dir / "passk.png", title)
    curves_plot(main, out_dir / "curves.png", title)
    pareto_plot(main, out_dir / "pareto.png", title)  # only with eval.kl_to_base=true
    spec = man.axis_plot
    if spec:
        name = spec.get("name") or spec["key"].split(".")[-1]
        shown = [m for m in spec.get("metrics", ["greedy_acc", "pass@16"]) if m in metrics]
        write_text_atomic(out_dir / f"{name}.md", f"# {title}: test metrics versus {name}\n\n"
                                                  f"{axis_markdown(points, main, spec, shown)}\n{note}\n")
        axis_plot(points, main, spec, shown, out_dir / f"{name}.png", title)
    agg["comparison_files"] = write_comparisons(agg, out_dir, title)
    return agg


def superseded_line(runs: pd.DataFrame) -> str:
    """' N earlier records were replaced by ...' when reruns replaced records, else ''."""
    n = int((runs["status"] == SUPERSEDED).sum()) if "status" in runs else 0
    return (f" {n} earlier record{'s' * (n != 1)} replaced by a later run of the same model, run, seed and config "
            "(superseded in runs.csv; not counted).") if n else ""


# what write_report puts in a table folder; a split folder keeps only its index and runs.csv at the top
TABLE_FILES = ("table.csv", "summary.md", "grid.md", "grid.csv", "versions.json", "passk.png", "curves.png",
               "pareto.png", "comparisons.md", "comparisons.csv", "findings.md")


def pair_folder(model: str, task: str) -> str:
    """'SmolLM2-135M-Instruct-Arithmetic': a folder name for a (model, task) pair."""
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in f"{model.rsplit('/', 1)[-1]}-{task}")


def write_split(root: Path, out_dir: Path, select_by: str | None, title: str, agg: dict, pairs: list) -> dict:
    """Runs of different models or tasks never share a table or a plot: each (model, task) gets its own
    folder of tables under `out_dir`; table.md there lists each pair's main table, runs.csv every run."""
    parts, used = [], set()
    for model, task in pairs:
        name = pair_folder(model, task)
        name = name if name not in used else f"{name}-{len(used)}"
        used.add(name)
        sub = write_report(root, out_dir / name, select_by, f"{title}: {model} on {task}", only=(model, task))
        agg["warnings"] += [w for w in sub["warnings"] if w not in agg["warnings"]]
        body = (out_dir / name / "table.md").read_text().replace("\n#", "\n##").replace("# ", "## ", 1)
        parts.append(f"{body}\n(every table and plot of this pair: {name}/)\n")
    for stale in TABLE_FILES:  # left by an earlier report of one pair: it no longer describes this folder
        (out_dir / stale).unlink(missing_ok=True)
    head = f"# {title}: {len(pairs)} models or tasks, one table each (runs of different models or tasks are never pooled)"
    write_text_atomic(out_dir / "table.md", f"{head}\n\n" + "\n".join(parts))
    _csv(agg["runs"], out_dir / "runs.csv")
    agg["split"] = [pair_folder(*p) for p in pairs]
    return agg


def rebuild(records: Path, out: Path, select_by: str | None = None, title: str | None = None) -> str:
    """Write every table and plot for `records` into `out`; return table.md's text."""
    agg = write_report(records, out, select_by, title)
    for w in agg["warnings"]:
        log.warning(w)
    for _, r in agg["runs"].iterrows():
        if r["status"] in ("failed", "interrupted"):
            log.warning("run %s %s: %s", r.get("path") or r.get("key"), r["status"].upper(), r.get("error") or "")
    return (Path(out) / "table.md").read_text()
