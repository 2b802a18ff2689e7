"""The claims ledger checks the comparisons.csv it reads: each row against its own counts, the file's BH,
its runs.csv and, where committed, its outcomes.

comparisons.csv is a committed text file: an edited row (a p_bh of 1e-9, "detected", counts unchanged) would
otherwise flip a claim. Before the ledger reads a folder, every row must agree with what it was computed from:

- an exact McNemar row: its difference is (up - down) / prompts and its p is the exact test's on up and down;
- a Student-t row: its p is the t test's that its difference, interval and seed count imply, and its
  difference is the mean of the per-seed differences runs.csv gives (harness/reporting/reread.py's check);
- the file: each tested row's adjusted p is Benjamini-Hochberg's over the file's tested p, and its result
  (detected, nominal only, not detected) follows from them;
- a folder with outcomes.csv.gz: they rebuild comparisons.csv byte for byte (harness/reporting/outcomes.py).

A mismatch fails naming the folder and the row.

    python -m pytest tests/test_ledger_check.py -q
"""
from __future__ import annotations

import math
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from harness.core.errors import UserError
from harness.reporting import stats
from harness.reporting.findings import DESCRIPTIVE, DETECTED, MCNEMAR, NOMINAL, NOT_DETECTED, STUDENT

TOL = 1e-6


class LedgerMismatch(UserError, ValueError):
    """A committed comparisons.csv row that disagrees with what it was computed from."""


def _bad(folder: Path, i: int, r, why: str) -> LedgerMismatch:
    return LedgerMismatch(f"{folder}/comparisons.csv row {i + 2} ({r['comparison']}, {r['metric']}, {r['pairing']}): "
                          f"{why}; rebuild the folder (python -m harness.reporting.outcomes or .reread) instead of "
                          "editing it")


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= TOL * max(1.0, abs(a), abs(b))


def check_rows(folder: Path, df: pd.DataFrame) -> None:
    """Each row against its own counts and the file's Benjamini-Hochberg (see the module docstring)."""
    for i, r in df.iterrows():
        p = r.get("p_value", math.nan)
        if r["pairing"] == MCNEMAR and not pd.isna(r.get("n_up")) and not pd.isna(p):
            up, down, n = int(r["n_up"]), int(r["n_down"]), int(r["n_prompts"])
            if not _close(float(r["difference"]), (up - down) / n):
                raise _bad(folder, i, r, f"difference {r['difference']} is not (up - down) / prompts = {(up - down) / n}")
            if not _close(float(p), stats.mcnemar_exact(up, down)):
                raise _bad(folder, i, r, f"p {p} is not the exact McNemar p {stats.mcnemar_exact(up, down):.6g} of "
                                         f"{up} up / {down} down")
        if r["pairing"] == STUDENT and not pd.isna(p) and not pd.isna(r["ci_low"]) and int(r["n_seeds"]) >= 2:
            df_t = int(r["n_seeds"]) - 1
            se = (float(r["ci_high"]) - float(r["ci_low"])) / 2 / stats.t_quantile(0.975, df_t)
            implied = stats.t_p(float(r["difference"]) / se, df_t) if se > 0 else math.nan
            if not math.isnan(implied) and abs(implied - float(p)) > 1e-3 * max(1.0, float(p) * 10):
                raise _bad(folder, i, r, f"p {p} is not the t test's {implied:.4g} for its interval and "
                                         f"{int(r['n_seeds'])} seeds")
    if "p_bh" not in df:
        return
    tested = df["p_bh"].notna() & df["p_value"].notna() & (df["result"] != DESCRIPTIVE)
    if not tested.any():
        return
    adj, keep = stats.benjamini_hochberg(df.loc[tested, "p_value"].to_numpy(dtype=float))
    for (i, r), a, k in zip(df[tested].iterrows(), adj, keep):
        if not _close(float(r["p_bh"]), float(a)):
            raise _bad(folder, i, r, f"p_bh {r['p_bh']} is not Benjamini-Hochberg's {a:.6g} over the file's "
                                     f"{int(tested.sum())} tests")
        want = DETECTED if k else NOMINAL if float(r["p_value"]) < stats.ALPHA else NOT_DETECTED
        if r["result"] != want:
            raise _bad(folder, i, r, f"result {r['result']!r} does not follow from its p and BH p ({want!r})")


def check_seed_rows(folder: Path, df: pd.DataFrame) -> None:
    """Student-t rows' differences against the runs' means in runs.csv (the rows chosen as the report chose)."""
    if not (folder / "runs.csv").is_file() or not (df["pairing"] == STUDENT).any():
        return
    from harness.reporting.comparisons import compare_by_seed, read_runs_csv, rows_by_name
    runs = read_runs_csv(folder / "runs.csv")
    by_name = rows_by_name(runs)
    for i, r in df[df["pairing"] == STUDENT].iterrows():
        a, _, b = str(r["comparison"]).partition(" vs ")
        if (r["model"], a) not in by_name or (r["model"], b) not in by_name:
            raise _bad(folder, i, r, "no row of runs.csv carries these names")
        got = compare_by_seed(r["kind"], by_name[r["model"], a], by_name[r["model"], b], runs, r["metric"])
        seed = [g for g in got if g["pairing"] == STUDENT]
        if seed and not np.isclose(float(seed[0]["difference"]), float(r["difference"]), atol=1e-9):
            raise _bad(folder, i, r, f"difference {r['difference']} is not runs.csv's {seed[0]['difference']:.6g}")


def check_outcomes(folder: Path) -> None:
    """A folder with committed outcomes: they rebuild comparisons.csv byte for byte."""
    from harness.reporting.outcomes import OUTCOMES, rebuild
    if not (folder / OUTCOMES).is_file():
        return
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / folder.name
        shutil.copytree(folder, copy)
        rebuild(copy)
        if (copy / "comparisons.csv").read_bytes() != (folder / "comparisons.csv").read_bytes():
            raise LedgerMismatch(f"{folder}/comparisons.csv is not what its {OUTCOMES} give; rebuild it with "
                                 f"python -m harness.reporting.outcomes {folder}")


def check_folder(folder: Path, df: pd.DataFrame) -> None:
    """Everything above, in order of cost."""
    check_rows(folder, df)
    check_seed_rows(folder, df)
    check_outcomes(folder)
