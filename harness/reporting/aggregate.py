"""From an experiment's plan and records to numbers: runs, seed means, and validation-chosen grid points.

Three frames, each built from the one before, none formatted (harness/reporting/report.py renders them):
- runs:   one row per planned run (experiment.json) with status ok | failed | interrupted | running |
          missing, plus one row per record the plan does not know (never dropped silently); a folder
          of single runs has no plan: each run is then a cell of its own;
- points: one row per (model, label): the mean over the runs that succeeded. With >= 2 successful
          runs of >= 2 distinct seeds the interval is a 95% Student-t interval over seeds; with one run
          it is that run's bootstrap 95% CI over prompts (the `interval` column says which);
- main:   per model, every fixed cell point, and per RL grid the point with the best *validation*
          mean over seeds of `select_by` (test is never looked at to choose); a grid's row also
          counts the runs of the whole grid (grid_ok, grid_planned, grid_<status>), so a choice made
          over a partly failed or interrupted grid is marked like a row with a missing seed.

Runs that did not update. A method whose train summary counts `skipped_updates`
(ES: every member of an iteration scored the same, so the update was skipped) and `steps` is
checked per run: skipped == iterations > 0 is NO UPDATE (the weights are the base model's, so its
numbers are the base model's, not a result); more than half skipped shows the share. The runs frame
carries `skipped_updates`, `iterations` and `update` ("NO UPDATE", "62% skipped" or ""); a point
(seed mean) whose every successful run had no update gets status "no update" (so every table cell
reads NO UPDATE, and plots, which draw only status ok, leave it out) and its label says so; a point
where only some seeds had no update, or some skipped more than half, keeps its numbers (the mean
over every successful seed) and its label says how many ("1 of 3 seeds NO UPDATE"). A grid chooses
among its points that updated; a point with no update is chosen only when no point updated.

A rerun is not a seed. Records of one run identity (the plan's run key; for a record the plan does not
know: model, task, label, seed and its config less where and when it ran, RUN_PLACE) are one run: the
latest record (by start time) counts, every earlier one is a `superseded` row of the runs frame that no
point counts. Unplanned records of one (model, task, label) whose configs differ in more than the seed
(e.g. two budgets of `method=es`) get the differing keys in their label, so they are never pooled.

    python -m pytest tests/test_tables.py tests/test_reruns.py -q
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from harness.core.payloads import BudgetSummary, TrainSummary
from harness.core.records import Manifest, Record, RecordError, read_manifest, read_records
from harness.reporting.format import isnan, metric_order

# Row states other than ok, worst first: a row with no successful run shows the first that applies.
NOT_OK = ("failed", "interrupted", "running", "missing")
NO_UPDATE = "no update"  # a point's status when every successful run of it skipped every update
SKIP_SHARE_SHOWN = 0.5   # a run that skipped more than this share of its iterations shows the share
IDENTITY = ["model", "cell", "column", "label", "grid", "method"]
SUPERSEDED = "superseded"  # a run's record replaced by a later record of the same run: listed, never counted
# config keys that say where and when a run ran, not what it ran: a rerun differing only here is the same run
RUN_PLACE = frozenset({"stamp", "results_dir", "runs_dir", "group", "logger", "label"})
SHOWN_KEYS = 3  # at most this many differing config keys in a label


def t975(df: int) -> float:
    """The 95% Student-t multiplier at df degrees of freedom (scipy.stats.t)."""
    from harness.reporting.stats import t_quantile
    return t_quantile(0.975, df)


def load(root: Path) -> tuple[Manifest | None, list[Record], list[str]]:
    """The experiment's manifest (None for a folder of single runs), its records, and read warnings.

    A damaged experiment.json (truncated, or not a plan) is a warning naming it, not a crash: the
    records are tabulated without the plan, so runs with no record cannot be marked MISSING.
    """
    records, warnings = read_records(root)
    return plan_of(root, warnings), records, warnings


def plan_of(root: Path, warnings: list[str]) -> Manifest | None:
    """read_manifest, with a damaged file skipped: its line (naming the file) goes into `warnings`."""
    try:
        return read_manifest(root)
    except (OSError, RecordError) as e:
        warnings.append(f"skipped {e}; tabulating the records without the plan (no run can show MISSING)")
        return None


def _identity_of_record(rec: Record) -> dict:
    """Plan-like identity for a record the plan does not list: a single run is a cell of its own."""
    label = rec.label or rec.method or "?"
    return {"index": rec.run_index, "model": rec.model_key or rec.model or "?", "seed": rec.seed,
            "cell": rec.cell or rec.grid or label, "column": rec.column or rec.grid or label, "label": label,
            "grid": rec.grid, "point": rec.point or {}, "method": rec.method, "key": rec.run_key}


def task_name(rec: Record) -> str:
    """The task's class name ("Arithmetic" from tasks.arithmetic.Arithmetic); "?" when unrecorded."""
    return (rec.task or "").rsplit(".", 1)[-1] or "?"


def _flat(d: dict, prefix: str = "") -> dict:
    """{"budget.flops": 4e12, ...}: nested config keys joined with dots."""
    out = {}
    for key, val in d.items():
        name = f"{prefix}{key}"
        out.update(_flat(val, name + ".") if isinstance(val, dict) and val else {name: val})
    return out


def _what_ran(rec: Record, drop: frozenset = RUN_PLACE) -> dict:
    """The record's config, flat, less the keys in `drop` (where and when it ran)."""
    config = rec.config if isinstance(rec.config, dict) else {}
    return {k: v for k, v in _flat(config).items() if k.split(".", 1)[0] not in drop}


def current(records: list[Record]) -> list[Record]:
    """The records that count: for each run (run_identity) the one that started last."""
    latest = {run_identity(r): r for r in records}
    return [r for r in records if latest[run_identity(r)] is r]


def run_identity(rec: Record) -> tuple:
    """What makes two records the same run: the plan's key, else model, task, label, seed and what ran."""
    if rec.run_key:
        return ("planned", rec.run_key)
    ran = hashlib.sha256(json.dumps(_what_ran(rec), sort_keys=True, default=str).encode()).hexdigest()
    return (rec.model_key or rec.model, task_name(rec), rec.label or rec.method, rec.seed, ran)


def _config_labels(records: list[Record]) -> dict[int, str]:
    """id(record) -> label with the config keys that tell it apart from other unplanned records of its
    (model, task, label) that differ in more than the seed; only records that need it are listed."""
    groups: dict[tuple, list[Record]] = {}
    for rec in records:
        groups.setdefault((rec.model_key or rec.model, task_name(rec), rec.label or rec.method), []).append(rec)
    out = {}
    for recs in groups.values():
        ran = [_what_ran(r, RUN_PLACE | {"seed"}) for r in recs]
        keys = sorted({k for a in ran for b in ran for k in a.keys() | b.keys() if a.get(k) != b.get(k)})
        for rec, cfg in zip(recs, ran):
            if keys:
                more = ", ..." if len(keys) > SHOWN_KEYS else ""
                shown = ", ".join(f"{k}={cfg.get(k)}" for k in keys[:SHOWN_KEYS]) + more
                out[id(rec)] = f"{rec.label or rec.method} ({shown})"
    return out


def skipped_iterations(train: TrainSummary | None) -> tuple[int, int, int] | None:
    """(skipped, iterations, resumed_from) from a method's train summary; None when it does not count
    skipped updates.

    The iterations are those this record's process ran (`steps` less `resumed_from`): ES counts the
    skipped updates of the process that wrote the summary, not those before a resume. (A record older than
    the typed payloads may hold anything there: only numbers count.)
    """
    if train is None:
        return None
    skipped, steps, resumed = train.skipped_updates, train.steps, train.resumed_from or 0
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (skipped, steps, resumed)):
        return None
    return int(skipped), int(steps) - int(resumed), int(resumed)


def update_note(skipped: int | None, iterations: int | None, resumed_from: int = 0) -> str:
    """'NO UPDATE' when every iteration skipped its update, 'NN% skipped' above half, else ''.

    A resumed run knows only the iterations since the resume: all of them skipped reads
    '100% skipped since resume', never NO UPDATE (the iterations before may have updated).
    """
    if skipped is None or iterations is None or isnan(skipped) or isnan(iterations) or iterations <= 0:
        return ""
    since = " since resume" if resumed_from else ""
    if skipped >= iterations and not since:
        return "NO UPDATE"
    share = min(skipped / iterations, 1.0)
    return f"{100 * share:.0f}% skipped{since}" if share > SKIP_SHARE_SHOWN else ""


def _row(ident: dict, rec: Record | None) -> dict:
    keys = ("index", "model", "seed", "cell", "column", "label", "grid", "point", "method", "key")
    row = {k: ident.get(k) for k in keys}
    row["model"] = row["model"] or (rec.model if rec else "?")
    if rec is None:
        return {**row, "status": "missing"}
    b = rec.budget or BudgetSummary()  # every field None: the run stopped before its ledger was read
    row.update(status=rec.effective_status, error=rec.error, method=rec.method or row["method"], trains=rec.trains,
               flops_used=b.flops_used, executed_flops=b.executed_flops, budget=b.limit, budget_kind=b.kind,
               budget_spent=b.spent, steps=b.steps, wall_s=rec.wall_s.get("total"),
               curve=rec.pass_curve.get("test"), train_curve=_train_curve(rec), val_curve=rec.curve, path=rec.path)
    counted = skipped_iterations(rec.train) if rec.trains else None
    row["skipped_updates"], row["iterations"] = counted[:2] if counted else (math.nan, math.nan)
    row["update"] = update_note(*counted) if counted and rec.effective_status == "ok" else ""
    for split, prefix in (("test", ""), ("validation", "val:")):
        for name, m in rec.metrics.get(split, {}).items():
            row[prefix + name] = m.mean
            if not prefix:
                row[f"{name}_lo"], row[f"{name}_hi"] = m.ci_low, m.ci_high
    return row


def train_batch(method: dict) -> str:
    """The prompts a run's train reward is measured on: "fixed" (the same batch every step: ES's
    `fixed_batch`, the paper's setting), "rolling" (new prompts each step: GRPO, PPO, ES with
    fixed_batch false) or "mixed" (a composite whose stages differ, conf/method/sequential.yaml)."""
    stages = method.get("stages") or {}
    parts = [stages[s] for s in method.get("order") or stages if isinstance(stages.get(s), dict)] or [method]
    kinds = {"fixed" if p.get("fixed_batch") else "rolling" for p in parts}
    return kinds.pop() if len(kinds) == 1 else "mixed"


def _train_curve(rec: Record) -> list:
    """The run's step log, each step tagged with its batch kind (train_batch): a reward on one fixed batch
    and one on rolling batches are different quantities, so curves.py never draws them on one axis."""
    if not rec.trains or not isinstance(rec.config, dict):
        return rec.steps
    kind = train_batch(rec.config.get("method") or {})
    return [{**s, "batch": kind} for s in rec.steps]


def _folder(rec: Record) -> str | None:
    return Path(rec.path).parent.name if rec.path else None


def runs_frame(manifest: Manifest | None, records: list[Record]) -> pd.DataFrame:
    """One row per planned run (ok, failed, interrupted, running or missing) and per unplanned record;
    a record replaced by a later one of the same run (run_identity) is a `superseded` row."""
    latest = {run_identity(r): r for r in records}  # read_records sorts by start time: the last one wins
    by_key = {r.run_key: r for r in latest.values() if r.run_key}
    rows, used = [], set()
    for planned in (manifest.runs if manifest else []):
        used.add(planned.key)
        rows.append(_row(asdict(planned), by_key.get(planned.key)))
    unplanned = [r for r in latest.values() if r.run_key is None or r.run_key not in used]
    labels = _config_labels([r for r in unplanned if not r.run_key])
    for rec in records:
        current = latest[run_identity(rec)]
        if current is not rec:
            row = _row(_identity_of_record(rec), rec)  # named by its run folder: runs.csv keeps no absolute path
            rows.append({**row, "status": SUPERSEDED, "key": row["key"] or _folder(rec),
                         "superseded_by": _folder(current)})
        elif rec.run_key is None or rec.run_key not in used:
            ident = _identity_of_record(rec)
            if id(rec) in labels:  # the label is the cell of an unplanned record: both carry the config
                ident.update(label=labels[id(rec)], cell=labels[id(rec)], column=labels[id(rec)])
            rows.append(_row(ident, rec))
    # a plan without a models axis names no model: a missing run belongs to the one model the records ran
    models = {r["model"] for r in rows if r["status"] != "missing"}
    if len(models) == 1:
        for r in rows:
            if r["status"] == "missing" and r["model"] == "?":
                r["model"] = next(iter(models))
    return pd.DataFrame(rows)


def metric_names(df: pd.DataFrame) -> list[str]:
    """Test metrics present in a runs frame, in a fixed reading order."""
    return metric_order(c[:-3] for c in df.columns if c.endswith("_lo"))


ONE_SEED = "one seed"  # several runs but one distinct seed: a mean with no interval (a rerun is not a seed)


def _mean_ci(ok: pd.DataFrame, m: str) -> tuple[float, float, float, str]:
    vals = ok[m].dropna() if m in ok else pd.Series(dtype=float)
    n = len(vals)
    if n == 0:
        return math.nan, math.nan, math.nan, ""
    if n == 1:
        row = ok.loc[vals.index[0]]
        return float(vals.iloc[0]), float(row[f"{m}_lo"]), float(row[f"{m}_hi"]), "prompts"
    if "seed" in ok and ok.loc[vals.index, "seed"].nunique() < 2:
        return float(vals.mean()), math.nan, math.nan, ONE_SEED
    mean, sd = float(vals.mean()), float(vals.std(ddof=1))
    half = t975(n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half, "seeds"


def _mean_curve(ok: pd.DataFrame) -> dict | None:
    curves = [c for c in ok.get("curve", pd.Series(dtype=object)) if isinstance(c, dict) and c]
    if not curves:
        return None
    ks = sorted({int(k) for c in curves for k in c})
    return {k: sum(float(c[str(k)]) for c in curves if str(k) in c) / sum(str(k) in c for c in curves) for k in ks}


def points_frame(runs: pd.DataFrame, select_by: str = "greedy_acc") -> pd.DataFrame:
    """One row per (model, label), aggregated over seeds; counts of ok, failed and missing runs."""
    metrics, rows = metric_names(runs), []
    runs = runs[runs["status"] != SUPERSEDED]  # listed in runs.csv, never counted
    for _, g in runs.groupby(["model", "label"], sort=False, dropna=False):
        ok = g[g["status"] == "ok"]
        first = g.iloc[0]
        row = {k: first.get(k) for k in (*IDENTITY, "point", "index")}
        row["method"] = next((m for m in g["method"] if isinstance(m, str)), None)
        row["trains"] = next((bool(t) for t in g.get("trains", []) if isinstance(t, bool)), True)
        row.update(n_planned=len(g), n_ok=len(ok), **{f"n_{s}": int((g["status"] == s).sum()) for s in NOT_OK},
                   errors=[e for e in g.get("error", pd.Series(dtype=object)).dropna()])
        for m in metrics:
            row[m], row[f"{m}_lo"], row[f"{m}_hi"], interval = _mean_ci(ok, m)
            row["interval"] = row.get("interval") or interval
        val = f"val:{select_by}"
        row["val"] = float(ok[val].mean()) if val in ok and ok[val].notna().any() else math.nan
        for k in ("flops_used", "executed_flops", "budget_spent", "steps", "wall_s"):
            row[k] = float(ok[k].mean()) if k in ok and ok[k].notna().any() else math.nan
        row["budget"] = next((b for b in g.get("budget", []) if isinstance(b, float) and not math.isnan(b)), math.nan)
        row["budget_kind"] = next((b for b in g.get("budget_kind", []) if isinstance(b, str)), None)
        row["curve"] = _mean_curve(ok)
        # per-seed curves on the FLOPs axis (reporting/curves.py draws the mean and the seed band)
        row["train_curves"] = [c for c in ok.get("train_curve", []) if isinstance(c, list) and c]
        row["val_curves"] = [c for c in ok.get("val_curve", []) if isinstance(c, list) and c]
        row["n_no_update"], row["update"] = _update_of(ok)
        if row["update"]:
            row["label"] = f"{row['label']} [{row['update']}]"
        rows.append(row)
    return pd.DataFrame(rows)


def _update_of(ok: pd.DataFrame) -> tuple[int, str]:
    """(successful runs with no update, the point's note): 'NO UPDATE' when every one had none,
    else '1 of 3 seeds NO UPDATE' and/or '62% skipped' (one run) / '2 of 3 seeds >50% skipped (62%, 80%)'."""
    notes = [u for u in ok.get("update", pd.Series(dtype=object)) if isinstance(u, str)]
    n, k = len(ok), sum(u == "NO UPDATE" for u in notes)
    if n and k == n:
        return k, "NO UPDATE"
    shares = [u.split()[0] for u in notes if "% skipped" in u]
    if n == 1:
        return k, notes[0] if notes else ""
    parts = [f"{k} of {n} seeds NO UPDATE"] if k else []
    if shares:
        parts.append(f"{len(shares)} of {n} seeds >{100 * SKIP_SHARE_SHOWN:.0f}% skipped ({', '.join(shares)})")
    return k, "; ".join(parts)


def status_of(row) -> str:
    """ok when any run of the row succeeded ("no update" when every one of them skipped every
    update); else the worst of failed, interrupted, running, missing."""
    if row["n_ok"] > 0:
        return NO_UPDATE if row.get("n_no_update", 0) == row["n_ok"] else "ok"
    return next((s for s in NOT_OK if row[f"n_{s}"] > 0), "missing")


def choose(points: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(main rows, points with a `chosen` column): fixed cells as they are, each grid's best point.

    A grid's best point maximises the validation mean over seeds; a grid with no successful point
    becomes one row marked failed or missing, so it never disappears from the table.
    """
    points = points.copy()
    points["chosen"] = False
    points["status"] = [status_of(r) for _, r in points.iterrows()]
    main = []
    for (model, cell), g in points.groupby(["model", "cell"], sort=False, dropna=False):
        grid = g.iloc[0]["grid"]
        if not isinstance(grid, str):
            main.extend(r for _, r in g.iterrows())
            continue
        cands = g[(g["n_ok"] > 0) & g["val"].notna()]
        updated = cands[cands["status"] != NO_UPDATE]
        no_update = len(cands) - len(updated)
        cands = updated if not updated.empty else cands  # a point that never updated is the base model
        if cands.empty:
            row = g.iloc[0].copy()
            row["label"] = f"{cell} (no successful grid point)"
            row["status"] = next((s for s in NOT_OK if (g[f"n_{s}"] > 0).any()), "missing")
            for c in [c for c in row.index if c.endswith(("_lo", "_hi"))]:
                row[c] = math.nan
            main.append(row)
            continue
        best = cands["val"].idxmax()
        points.loc[best, "chosen"] = True
        row = points.loc[best].copy()
        row["point_label"] = row["label"]  # short name for plot legends
        partial = int(((g["n_ok"] > 0) & (g["n_ok"] < g["n_planned"])).sum())
        failed = len(g) - len(cands) - (no_update if len(updated) else 0)
        shortfall = ("" if not failed else f"; {failed} points FAILED or MISSING") + \
            (f"; {no_update} point{'s' * (no_update != 1)} NO UPDATE" if no_update and len(updated) else "") + \
            (f"; {partial} point{'s' * (partial != 1)} with fewer seeds than planned" if partial else "")
        row["label"] = f"{row['label']} (best of {len(g)} on validation{shortfall})"
        row["column"] = cell
        # The choice saw only the grid's successful runs: a seed interrupted on another point marks this row too.
        row["grid_ok"], row["grid_planned"] = int(g["n_ok"].sum()), int(g["n_planned"].sum())
        for s in NOT_OK:
            row[f"grid_{s}"] = int(g[f"n_{s}"].sum())
        main.append(row)
    return pd.DataFrame(main).reset_index(drop=True), points


def model_task(rec: Record) -> tuple[str, str]:
    """(model, task) of a record: ad-hoc runs of different pairs never share a table (report.py splits them)."""
    return str(rec.model_key or rec.model or "?"), task_name(rec)


def aggregate(root: Path, select_by: str | None = None, only: tuple[str, str] | None = None) -> dict:
    """Everything the report needs: manifest, warnings and the runs, points and main frames.

    `only`: a (model, task) pair (model_task): the records of that pair alone.
    """
    man, records, warnings = load(root)
    if only is not None:
        records = [r for r in records if model_task(r) == only]
    select_by = select_by or (man.select_by if man else "greedy_acc")
    runs = runs_frame(man, records)
    records = current(records)  # a superseded record is listed in runs.csv, never read again
    if runs.empty:
        return {"manifest": man, "warnings": warnings, "records": records, "runs": runs, "points": runs, "main": runs,
                "select_by": select_by}
    points = points_frame(runs, select_by)
    main, points = choose(points)
    return {"manifest": man, "warnings": warnings, "records": records, "runs": runs, "points": points, "main": main,
            "select_by": select_by}
