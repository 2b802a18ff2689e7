"""A committed results folder without per-prompt outcomes, read again under the seed-level rule.

Folders made before outcomes.csv.gz was written keep their comparisons.csv (made from records no longer
here) and their runs.csv (one row per run, its test means). What can still be recomputed from the folder is
every seed-level test: for each comparison the file lists, the Student-t over the per-seed differences of the
runs' means, from runs.csv (comparisons.compare_by_seed, the rows chosen on validation as the report chose
them). This rewrites comparisons.csv, comparisons.md and findings.md so that

- a comparison with two or more seeds a side is tested at the seed level only (recomputed here), its
  prompt-level rows kept as descriptive (not in m);
- a one-seed comparison keeps its prompt-level row, the test it had, with its p where the file had one; a
  row the file holds without a p (written before Benjamini-Hochberg) stays an interval, marked uncorrected;
- the header says which rows recompute from the folder and which cannot (per-prompt outcomes not committed).

    python -m harness.reporting.reread results/placebo_real_cpu results/numerics_cpu ...
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

from harness.core.atomic import write_text_atomic
from harness.core.errors import UserError
from harness.reporting.comparisons import (COLUMNS, compare_by_seed, comparisons_markdown, multiplicity,
                                           read_runs_csv, rows_by_name)
from harness.reporting.endpoints import from_experiment_file
from harness.reporting.findings import DESCRIPTIVE, STUDENT, findings_markdown, findings_title
from harness.reporting.outcomes import OUTCOMES
from harness.reporting.update_claims import with_claims

UNCORRECTED = ("uncorrected: per-prompt outcomes not committed and this row has no p (read when it was made, "
               "before Benjamini-Hochberg, as: {was})")
PREFACE = ("**Provenance.** Per-prompt outcomes are not committed for this folder (its records predate "
           f"{OUTCOMES}). {{seeds}} Prompt-level rows are as the records gave them when the experiment ran and "
           "cannot be recomputed from this folder{uncorrected}.")
SEEDS = ("Seed-level rows, the tests of every comparison with two or more seeds a side, are recomputed from "
         "`runs.csv` by `python -m harness.reporting.reread {folder}`.")
ONE_SEED_ONLY = ("No comparison here has two seeds a side: every test is prompt-level and, with one seed, speaks to "
                 "these runs, not to another seed.")


def _key(r) -> tuple:
    return (r["model"], r["kind"], r["comparison"], r["metric"])


def reread(folder: Path, experiment: str | None = None) -> str:
    """Rewrite the folder's comparisons and findings (see the module docstring); one line saying what changed."""
    folder = Path(folder)
    if (folder / OUTCOMES).is_file():
        raise UserError(f"{folder} has {OUTCOMES}: rebuild it from them (python -m harness.reporting.outcomes {folder})")
    old = pd.read_csv(folder / "comparisons.csv")
    for col in COLUMNS:
        if col not in old:
            old[col] = math.nan
    old = old[COLUMNS].astype({"result": object, "note": object, "pairing": object})
    old["note"] = old["note"].fillna("")
    runs = read_runs_csv(folder / "runs.csv")
    by_name = rows_by_name(runs)
    n_prompts = old["n_prompts"].dropna()
    n = int(n_prompts.iloc[0]) if len(n_prompts) and n_prompts.nunique() == 1 else None
    rows, missing = [], []
    for key, group in old.groupby(["model", "kind", "comparison", "metric"], sort=False):
        a, _, b = key[2].partition(" vs ")
        seed_rows = []
        if (key[0], a) in by_name and (key[0], b) in by_name:
            seed_rows = [r for r in compare_by_seed(key[1], by_name[key[0], a], by_name[key[0], b], runs, key[3], n)
                         if r["pairing"] == STUDENT or not str(r["result"]).startswith("not paired")]
        elif (group["pairing"] == STUDENT).any():
            missing.append(key[2])
        if seed_rows:
            for r in seed_rows:
                was = group[group["pairing"] == STUDENT]
                if len(was) and abs(float(was["difference"].iloc[0]) - float(r["difference"])) > 1e-9:
                    raise UserError(f"{folder}: {key[2]} {key[3]}: runs.csv gives a seed-level difference of "
                                    f"{r['difference']:.6f}, comparisons.csv {float(was['difference'].iloc[0]):.6f}")
                rows.append({**{c: math.nan for c in COLUMNS}, **r, "note": "per-seed differences of run means"})
            rows += [{**r, "result": DESCRIPTIVE, "p_bh": math.nan} for r in group.to_dict("records")
                     if r["pairing"] not in (STUDENT, "none")]
            continue
        for r in group.to_dict("records"):
            if (r["pairing"] != "none" and isinstance(r["p_value"], float) and math.isnan(r["p_value"])
                    and not str(r["result"]).startswith("uncorrected")):
                r = {**r, "result": UNCORRECTED.format(was=r["result"])}
            rows.append(r)
    if missing:
        raise UserError(f"{folder}: no row of runs.csv is named {missing[0]!r}; the folder's runs.csv and "
                        "comparisons.csv are from different runs")
    df = pd.DataFrame(rows, columns=COLUMNS)
    keep = df["result"].astype(str).str.startswith("uncorrected")
    df = multiplicity(df)
    df.loc[keep, "p_bh"] = math.nan
    title = findings_title(folder, folder.name)
    uncorrected = int(keep.sum())
    has_seeds = bool((df["pairing"] == STUDENT).any())
    preface = PREFACE.format(seeds=SEEDS.format(folder=folder.as_posix()) if has_seeds else ONE_SEED_ONLY, uncorrected=(
        f"; {uncorrected} prompt-level row{'s' * (uncorrected != 1)} written before Benjamini-Hochberg have no p "
        "and are marked uncorrected (not in m)" if uncorrected else ""))
    write_text_atomic(folder / "comparisons.csv", df.to_csv(index=False))
    write_text_atomic(folder / "comparisons.md", comparisons_markdown(df, title, preface))
    decl = from_experiment_file(experiment or folder.name)
    write_text_atomic(folder / "findings.md", with_claims(findings_markdown(df, title, preface, decl), folder))
    tested = df[df["p_bh"].notna()]
    return (f"{folder}: m = {len(tested)} seed- or prompt-level tests, {int((tested['result'] == 'detected').sum())} "
            f"detected; {int((df['result'] == DESCRIPTIVE).sum())} descriptive, {uncorrected} uncorrected")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.reporting.reread", description=__doc__.splitlines()[0])
    ap.add_argument("folders", type=Path, nargs="+", help="results/<experiment> folders without outcomes.csv.gz")
    args = ap.parse_args(argv)
    for folder in args.folders:
        try:
            print(reread(folder))
        except (UserError, FileNotFoundError) as e:
            print(f"esbench: error: {e}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
