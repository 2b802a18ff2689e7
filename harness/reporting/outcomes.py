"""Per-prompt outcomes as a committed file: the comparisons of a results folder, recomputable from it alone.

The records an experiment writes (runs/, git-ignored) hold each run's per-prompt scores; a results folder
commits the tables made from them. Without the scores no interval paired by prompt can be recomputed, so
the report also writes `outcomes.csv.gz`: one row per (successful run, test metric) with what comparisons.py
pairs on (harness/evaluation/metrics.py's per-prompt keys):

    key, model, cell, label, seed, method, target, metric, prompts, n_samples, values
    ES/seed10, smollm2-135m-instruct, ES, ES, 10, es, methods.es.ES, greedy_acc, 3f2a..., , "0 1 1 0 ..."

`values` is the metric's per-prompt scores, space-separated (greedy 0/1, rewards and maj@k rounded as the
record keeps them), or for pass@k the number correct of `n_samples` per prompt, from which pass@k is
recomputed exactly. Records that keep their method's facts (Record.facts) add a last column, `facts` (that
JSON), so the comparisons are rebuilt with each run's family without the method's module (a plugin's
rows included); records older than that write the columns above alone. Beside it the report writes the
plan (`experiment.json`), so that

    python -m harness.reporting.outcomes results/placebo_real_confirm       # check, then rebuild

checks the outcomes against runs.csv (every successful run present with each metric runs.csv reports, and
each metric's mean equal to runs.csv's) and writes comparisons.md, comparisons.csv and findings.md again from
runs.csv, experiment.json and outcomes.csv.gz alone: byte-identical to what the report wrote from the records
(tests/test_outcomes.py). A folder whose outcomes disagree with its runs.csv fails, naming the folder, the run
and the metric. gzip is written with no timestamp, so the same outcomes give the same bytes.
"""
from __future__ import annotations

import argparse
import gzip
import io
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from harness.core.atomic import write_bytes_atomic
from harness.core.errors import UserError
from harness.core.payloads import Metric
from harness.core.records import MANIFEST_NAME, Record, read_manifest
from harness.evaluation.metrics import per_prompt_values

OUTCOMES = "outcomes.csv.gz"
COLUMNS = ["key", "model", "cell", "label", "seed", "method", "target", "metric", "prompts", "n_samples", "values"]
FACTS = "facts"  # optional last column: the run's Record.facts as JSON (records that keep them)
SPLIT = "test"


class OutcomesMismatch(UserError, ValueError):
    """A committed outcomes file that disagrees with its runs.csv."""


def _text(values) -> str:
    return " ".join(str(int(v)) if float(v).is_integer() else repr(float(v)) for v in values)


def outcomes_frame(records: list[Record], runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (ok run of `runs`, test metric with per-prompt scores), in runs.csv's order; with the FACTS
    column when some run's record keeps its method's facts."""
    by_path = {r.path: r for r in records if r.path}
    rows, facts = [], False
    for _, run in runs.iterrows():
        rec = by_path.get(run.get("path"))
        if rec is None or run.get("status") != "ok" or not isinstance(run.get("key"), str):
            continue
        target = str(((rec.config or {}).get("method") or {}).get("_target_") or "")
        for metric, m in rec.metrics.get(SPLIT, {}).items():
            if m.prompts is None or (m.per_prompt is None and m.correct is None):
                continue
            pass_counts = m.correct is not None and m.per_prompt is None
            rows.append({"key": run["key"], "model": run["model"], "cell": run["cell"], "label": run["label"],
                         "seed": run["seed"], "method": rec.method, "target": target, "metric": metric,
                         "prompts": m.prompts, "n_samples": m.n_samples if pass_counts else None,
                         "values": _text(m.correct if pass_counts else m.per_prompt),
                         FACTS: json.dumps(rec.facts, sort_keys=True) if rec.facts else None})
            facts = facts or bool(rec.facts)
    return pd.DataFrame(rows, columns=COLUMNS + [FACTS] * facts)


def write_outcomes(records: list[Record], runs: pd.DataFrame, out_dir: Path) -> Path | None:
    """outcomes.csv.gz of these runs into out_dir (None, writing nothing, when no run has per-prompt scores)."""
    df = outcomes_frame(records, runs)
    if df.empty:
        return None
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, compresslevel=9) as gz:  # mtime 0: same input, same bytes
        gz.write(df.to_csv(index=False).encode())
    path = Path(out_dir) / OUTCOMES
    write_bytes_atomic(path, buf.getvalue())
    return path


def read_outcomes(folder: Path) -> pd.DataFrame:
    path = Path(folder) / OUTCOMES
    if not path.is_file():
        raise UserError(f"{folder} has no {OUTCOMES}: its per-prompt outcomes are not committed, so its prompt-level "
                        "rows cannot be recomputed (rerun the experiment with results_dir=... to write them)")
    df = pd.read_csv(path, dtype={"values": str, "prompts": str, "key": str, FACTS: str})
    missing = [c for c in COLUMNS if c not in df]
    if missing:
        raise OutcomesMismatch(f"{path} is not an outcomes file written by the report: no column {', '.join(missing)}")
    return df


def _metric(row) -> Metric:
    values = [float(v) for v in str(row["values"]).split()] if isinstance(row["values"], str) else []
    if not (isinstance(row["n_samples"], float) and math.isnan(row["n_samples"])) and row["n_samples"] is not None:
        return Metric(None, None, None, len(values), row["prompts"], None, [int(v) for v in values],
                      int(row["n_samples"]))
    return Metric(None, None, None, len(values), row["prompts"], values)


def records_of(df: pd.DataFrame) -> list[Record]:
    """One Record per run key, holding only what comparisons read: method, its _target_ and kept facts, test
    per-prompt scores (its path is the run key, which the rebuilt runs frame carries as `path`)."""
    out = []
    for key, rows in df.groupby("key", sort=False):
        first = rows.iloc[0]
        target = first["target"] if isinstance(first["target"], str) else None
        kept = first.get(FACTS)
        out.append(Record(status="ok", method=str(first["method"]), path=str(key),
                          config={"method": {"_target_": target}} if target else {},
                          facts=json.loads(kept) if isinstance(kept, str) and kept else {},
                          metrics={SPLIT: {str(r["metric"]): _metric(r) for _, r in rows.iterrows()}}))
    return out


def check(folder: Path, runs: pd.DataFrame, df: pd.DataFrame) -> None:
    """Every ok run of runs.csv has outcomes for each test metric it reports, and each mean equals runs.csv's."""
    runs_keys = set(runs.loc[runs["status"] == "ok", "key"])
    extra = sorted(set(df["key"]) - runs_keys)
    if extra:
        raise OutcomesMismatch(f"{folder}: {OUTCOMES} has run {extra[0]!r}, which runs.csv does not list as ok")
    for rec in records_of(df):
        run = runs[runs["key"] == rec.path].iloc[0]
        for metric, m in rec.metrics[SPLIT].items():
            if metric not in run or (isinstance(run[metric], float) and math.isnan(run[metric])):
                continue
            mean = float(np.mean(per_prompt_values(m.to_dict(), metric)))
            if abs(mean - float(run[metric])) > 1e-4:  # per-prompt scores are rounded to 4 digits in records
                raise OutcomesMismatch(f"{folder}: run {rec.path!r} {metric}: the outcomes' mean {mean:.6f} is not "
                                       f"runs.csv's {float(run[metric]):.6f}")
    missing = sorted(runs_keys - set(df["key"])) if not df.empty else []
    if missing:
        raise OutcomesMismatch(f"{folder}: runs.csv lists run {missing[0]!r} as ok, {OUTCOMES} has no outcome of it")


def rebuild(folder: Path) -> list[str]:
    """comparisons.md, comparisons.csv and findings.md of a results folder again from its committed runs.csv,
    experiment.json and outcomes.csv.gz (checked first); returns the file names written."""
    from harness.reporting.aggregate import choose, points_frame
    from harness.reporting.comparisons import read_runs_csv, write_comparisons
    from harness.reporting.findings import findings_title

    folder = Path(folder)
    if not (folder / MANIFEST_NAME).is_file():
        raise UserError(f"{folder} has no {MANIFEST_NAME}: the plan its comparisons were made under is not committed")
    man = read_manifest(folder)
    runs = read_runs_csv(folder / "runs.csv")
    df = read_outcomes(folder)
    check(folder, runs, df)
    runs["path"] = runs["key"]
    main, points = choose(points_frame(runs, man.select_by or "greedy_acc"))
    title = findings_title(folder, man.group)
    agg = {"manifest": man, "warnings": [], "records": records_of(df), "runs": runs, "points": points, "main": main}
    return write_comparisons(agg, folder, title)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.reporting.outcomes",
                                 description="Check a results folder's outcomes.csv.gz against its runs.csv and "
                                             "rewrite its comparisons and findings from them alone.")
    ap.add_argument("folders", type=Path, nargs="+", help="results/<experiment> folders")
    args = ap.parse_args(argv)
    for folder in args.folders:
        try:
            written = rebuild(folder)
        except UserError as e:
            print(f"esbench: error: {e}", file=sys.stderr)
            return 2
        print(f"{folder}: {', '.join(written)} rebuilt from {OUTCOMES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
