"""How the paired comparisons read: comparisons.md (every row) and findings.md (the rows by verdict).

    python -m harness.reporting.findings results/<folder>   # findings.md again from its comparisons.csv

The rows come from comparisons.py; each testable row has its test's p and its Benjamini-Hochberg adjusted p
over the file (harness/reporting/stats.py). Both files open with the file's multiplicity: m testable rows,
the nominal detections (p < 0.05), the number expected by chance if no difference were real (0.05 x m),
and the BH survivors at q = 0.05. "detected" means BH-surviving; "nominal only" a p < 0.05 that does not
survive. Rows that are not testable (constant columns, a quantity that is 0 by definition on one side) or
not paired are listed with the reason and are not in m.

    python -m pytest tests/test_comparisons.py -q
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.reporting.endpoints import Declarations, direction_note, roles
from harness.reporting.format import is_percent, isnan, md_row
from harness.reporting.stats import ALPHA, MAX_BOOT, MC_TARGET, N_BOOT, Q

DETECTED, NOMINAL, NOT_DETECTED = "detected", "nominal only", "not detected"
MCNEMAR, BOOTSTRAP, STUDENT = "by prompt (exact McNemar)", "by prompt (paired bootstrap)", "by seed (Student-t)"
CROSSED = "by seed and prompt (crossed bootstrap)"  # descriptive beside a multi-seed comparison's seed-level test
RESAMPLED = (BOOTSTRAP, CROSSED)
DESCRIPTIVE = "descriptive (prompt-level row of a multi-seed comparison: the seed-level row is the test; not in m)"

NOTE = ("Difference = A - B on the test split (accuracy-type metrics in percentage points) with a paired 95% "
        "interval and its test's two-sided p. With two or more seeds a side, the test is by seed: a Student-t "
        "interval and t-test over the per-seed differences of the run means; the prompt-level rows beside it (a "
        "crossed bootstrap of seeds and prompts, and a paired bootstrap or McNemar over seed-averaged prompts) are "
        "descriptive and not in m, because under the null they reject far more often than 5% once seeds vary "
        "(docs/architecture.md#calibration). With one seed a side, the test is by prompt and speaks to these runs, "
        "not to another seed: 0/1 outcomes (greedy correctness) get the exact McNemar test (binomial on the prompts "
        "that changed: up = A right and B wrong, down = the reverse) and Newcombe's paired score interval; other "
        "per-prompt scores a paired bootstrap over the same test prompts, p from the same resamples. `detected` only "
        "when the row's p survives Benjamini-Hochberg at q = 0.05 over the file's tested rows; `nominal only` when "
        "p < 0.05 does not survive. The interval and the test are separate procedures and can disagree at the "
        "margin: the p decides. RL rows are each grid's point chosen on validation.")
EVIDENCE = ("Evidence rule: a sentence claiming a difference quotes a row detected here (its p survives "
            "Benjamini-Hochberg at q = 0.05 over this file's m tests), with its interval and p; a \"nominal only\" "
            "row (p < 0.05 that does not survive) is not a detection; otherwise the sentence says \"not detected\".")


def fmt(v: float, metric: str) -> str:
    if isnan(v):
        return "-"
    return f"{100 * v:+.1f}" if is_percent(metric) else f"{v:+.3f}"


def interval(r) -> str:
    unit = " points" if is_percent(r["metric"]) else ""
    if isnan(r["ci_low"]):
        return f"{fmt(r['difference'], r['metric'])}{unit}"
    low, high = fmt(r["ci_low"], r["metric"]), fmt(r["ci_high"], r["metric"])
    return f"{fmt(r['difference'], r['metric'])}{unit} [{low}, {high}]"


def n_text(r) -> str:
    if r["pairing"] == "none" or isnan(r["n_seeds"]):
        return "-"
    seeds = f"{int(r['n_seeds'])} seed{'s' * (int(r['n_seeds']) != 1)}"
    return seeds if isnan(r["n_prompts"]) else f"{seeds} / {int(r['n_prompts'])} prompts"  # runs.csv: no prompts


def p_text(p: float, floor: bool = False, n_boot=None) -> str:
    """A p as printed; a bootstrap p at its resampling floor (no resample beyond 0) is a bound, "< 1/B"."""
    if isnan(p):
        return "-"
    if floor and n_boot:
        return f"< 1/{int(n_boot)}"
    return ("<= " if floor else "") + (f"{p:.3f}" if p >= 0.001 else f"{p:.1e}")


def _floor(r) -> bool:
    """A bootstrap p at its floor (no resample on the far side of 0): the true p is at most this."""
    b = r.get("n_boot")
    return r["pairing"] in RESAMPLED and not isnan(b) and abs(r["p_value"] - 2 / (b + 1)) < 1e-12


def method_text(r) -> str:
    """The row's test, with what it rests on (discordant prompts, resamples)."""
    if r["pairing"] == MCNEMAR:
        return f"exact McNemar, {int(r['n_up'])} up / {int(r['n_down'])} down"
    b = r.get("n_boot")
    resamples = "" if b is None or isnan(b) else f", {int(b)} resamples"  # files before BH did not keep the count
    if r["pairing"] == BOOTSTRAP:
        return f"paired bootstrap{resamples}"
    if r["pairing"] == CROSSED:
        return f"crossed bootstrap of seeds and prompts{resamples}"
    return "Student-t over seeds" if r["pairing"] == STUDENT else str(r["pairing"])


def counts(df: pd.DataFrame) -> dict:
    """m (testable rows), nominal detections, BH survivors, rows not testable and not paired."""
    tested = df[df["p_value"].notna() & (df["result"] != DESCRIPTIVE)] if "p_value" in df else df.iloc[:0]
    testable_none = df["result"].astype(str).str.startswith("not testable")
    return {"m": len(tested), "nominal": int((tested["p_value"] < ALPHA).sum()),
            "bh": int((tested["result"] == DETECTED).sum()), "not_testable": int(testable_none.sum()),
            "not_paired": int(((df["pairing"] == "none") & ~testable_none).sum())}


def multiplicity_head(df: pd.DataFrame) -> str:
    """The header both files open with: m, nominal, expected by chance, BH survivors; the tests' resampling."""
    c = counts(df)
    left = [f"{c['not_testable']} not testable"] * bool(c["not_testable"]) + \
           [f"{c['not_paired']} not paired"] * bool(c["not_paired"])
    out = f"; {' and '.join(left)}, not in m" if left else ""
    desc = int((df["result"] == DESCRIPTIVE).sum()) if "result" in df else 0
    out += (f"; {desc} descriptive prompt-level row{'s' * (desc != 1)} of multi-seed comparisons, not in m"
            if desc else "")
    text = (f"**Multiplicity.** m = {c['m']} tests (rows with a p{out}). "
            f"Nominal detections (p < {ALPHA:g}): {c['nominal']}; expected by chance if no difference were real: "
            f"{ALPHA:g} x m = {ALPHA * c['m']:.1f}; surviving Benjamini-Hochberg at q = {Q:g}: {c['bh']}. "
            "Below, \"detected\" means BH-surviving and \"nominal only\" a p < 0.05 that does not survive.")
    boot = df[df["pairing"].isin(RESAMPLED) & df["n_boot"].notna()] if "n_boot" in df else df.iloc[:0]
    if boot.empty:
        return text + " No row here is bootstrapped (McNemar and Student-t rows have no Monte-Carlo error)."
    pct = boot["metric"].map(is_percent).astype(bool)
    unit = " and ".join(
        [f"{100 * boot.loc[pct, 'mc_error'].max():.3f} points on accuracy-type rows"] * bool(pct.any())
        + [f"{boot.loc[~pct, 'mc_error'].max():.4f} on the others, in their units"] * bool((~pct).any()))
    lo, hi = int(boot["n_boot"].min()), int(boot["n_boot"].max())
    over = int((boot["mc_error"] >= MC_TARGET).sum())
    stuck = (f" ({over} row{'s' * (over != 1)} stopped above it at {MAX_BOOT} resamples: each row's error is "
             "comparisons.csv's mc_error; a bound sitting on a step of a discrete bootstrap distribution keeps "
             "about half a step)" if over else "")
    return text + (f" Bootstrap rows: {lo if lo == hi else f'{lo}-{hi}'} resamples (the count starts at {N_BOOT} and "
                   f"doubles, up to {MAX_BOOT}, until each bound's Monte-Carlo error is under {100 * MC_TARGET:g} "
                   "point); the largest "
                   f"Monte-Carlo standard error of a bound here is {unit}{stuck}. A bootstrap p has Monte-Carlo "
                   "error too, about sqrt(2p/B); p at its floor (no resample beyond 0) is printed as < 1/B.")


def comparisons_markdown(df: pd.DataFrame, title: str, preface: str = "") -> str:
    head = ["model", "comparison", "metric", "difference [95% CI]", "seeds / prompts", "test", "p", "BH p", "result",
            "note"]
    lines = [f"# {title}: paired comparisons\n", *([preface + "\n"] if preface else []), multiplicity_head(df) + "\n",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, r in df.iterrows():
        cells = [r["model"], r["comparison"], r["metric"], "-" if isnan(r["difference"]) else interval(r), n_text(r),
                 "none" if r["pairing"] == "none" else method_text(r), p_text(r["p_value"], _floor(r), r.get("n_boot")),
                 p_text(r["p_bh"]), r["result"], r["note"] or ""]
        lines.append(md_row(cells))
    if df.empty:
        lines.append("\nNothing to compare (no pair of successful rows: see the module docstring of "
                     "harness/reporting/comparisons.py for the rules).")
    return "\n".join(lines) + f"\n\n{NOTE}\n"


def _line(r, note: str | None = None) -> str:
    p = p_text(r["p_value"], _floor(r), r.get("n_boot"))
    p = p if p.startswith("<") else "= " + p
    how = f"{method_text(r)}, {n_text(r)}; p {p}, BH-adjusted p = {p_text(r['p_bh'])}" + (f"; {note}" if note else "")
    who = f"- {r['model']}, {r['metric']}: {r['comparison']}"
    if r["result"] == DESCRIPTIVE:
        shown = "" if isnan(r["p_value"]) else f"; p {p}"
        return f"{who}: {interval(r)} ({method_text(r)}, {n_text(r)}{shown}; descriptive, not a test).\n"
    if isnan(r["p_value"]):
        return f"{who}: {r['result']}.\n"
    if r["result"] == DETECTED:
        return f"{who} differs by {interval(r)} ({how}).\n"
    return f"{who}: {r['result']}, {interval(r)} ({how}).\n"


def findings_title(folder: Path, default: str) -> str:
    """The title a folder's findings.md opens with ("# <title>: findings"), else `default`."""
    path = Path(folder) / "findings.md"
    if not path.is_file():
        return default
    return path.read_text().split("\n", 1)[0].removeprefix("# ").removesuffix(": findings")


def rewrite_findings(folder: Path, decl: Declarations) -> str:
    """findings.md of a results folder again from its comparisons.csv (title and preface kept, the claims
    section from analysis.json), with the declarations; returns one line saying what it wrote."""
    from harness.core.atomic import write_text_atomic
    from harness.core.errors import UserError
    from harness.reporting.update_claims import with_claims

    folder = Path(folder)
    df = pd.read_csv(folder / "comparisons.csv", keep_default_na=True)
    if "p_value" not in df:
        raise UserError(f"{folder}/comparisons.csv has no p_value column (written by older code): rebuild the "
                        "folder from its records (python -m harness.reporting) or its runs.csv "
                        "(python -m harness.reporting.comparisons) first")
    df["note"] = df["note"].fillna("")
    rest = (folder / "findings.md").read_text().split("\n", 1)[1]
    title = findings_title(folder, folder.name)
    preface = rest.split("**Multiplicity.**")[0].strip()
    write_text_atomic(folder / "findings.md", with_claims(findings_markdown(df, title, preface, decl), folder))
    n = {k: int((roles(df, decl) == k).sum()) for k in ("primary", "secondary", "exploratory")}
    return (f"{folder}/findings.md: {n['primary']} primary, {n['secondary']} secondary and {n['exploratory']} "
            "exploratory rows")


def findings_markdown(df: pd.DataFrame, title: str, preface: str = "", decl: Declarations | None = None) -> str:
    """Detected (BH) differences, nominal only, not detected, each with its interval and p; then rows not
    testable and not paired, with the reason. With declarations (reporting/endpoints.py): the primary
    endpoints first, the exploratory arms' rows apart; the BH results are the file's, unchanged."""
    text = f"# {title}: findings\n\n" + (preface + "\n\n" if preface else "") + multiplicity_head(df) + "\n\n"
    text += EVIDENCE + "\n"
    decl = decl or Declarations()
    role = roles(df, decl) if len(df) else pd.Series(dtype=object)
    if decl.primary:
        notes = direction_note(df, decl)
        rows = df[role == "primary"]
        text += ("\n## Primary endpoints (declared in the experiment file before its runs)\n\n"
                 + ("".join(_line(r, notes.get(i)) for i, r in rows.iterrows()) or "None of the declared "
                    "comparisons has a row here (their runs are missing or failed).\n"))
    secondary = df[role == "secondary"] if len(df) else df
    text += _by_result(secondary, "Secondary: " if decl.primary else "")
    if decl.exploratory:
        rows = df[role == "exploratory"]
        text += ("\n## Exploratory (arms added after a result of this experiment was seen)\n\n"
                 + "".join(f"- {arm}: added {why}.\n" for arm, why in decl.exploratory.items()) + "\n"
                 + ("".join(_line(r) for _, r in rows[rows["p_value"].notna()].iterrows()) or "No tested row.\n"))
    return text


def _by_result(df: pd.DataFrame, prefix: str = "") -> str:
    """The rows by verdict (BH-detected, nominal only, not detected), then untestable and unpaired rows."""
    tested, text = df[df["p_value"].notna() & (df["result"] != DESCRIPTIVE)], ""
    for name, result in ((f"Differences detected (Benjamini-Hochberg, q = {Q:g})", DETECTED),
                         (f"Nominal only (p < {ALPHA:g}, not surviving Benjamini-Hochberg)", NOMINAL),
                         ("Not detected", NOT_DETECTED)):
        text += f"\n## {prefix}{name}\n\n" + ("".join(_line(r) for _, r in tested[tested["result"] == result].iterrows())
                                      or "None.\n")
    desc = df[df["result"] == DESCRIPTIVE]
    if not desc.empty:
        text += (f"\n## {prefix}Descriptive (prompt-level rows of multi-seed comparisons; the seed-level row above "
                 "is the test)\n\n" + "".join(_line(r) for _, r in desc.iterrows()))
    rest = df[df["p_value"].isna() & (df["result"] != DESCRIPTIVE)]
    uncorrected = rest["result"].astype(str).str.startswith("uncorrected")
    if uncorrected.any():
        text += (f"\n## {prefix}Uncorrected (an interval without a p: not a test, not in m)\n\n"
                 + "".join(f"- {r['model']}, {r['metric']}: {r['comparison']}: {interval(r)} ({n_text(r)}); "
                           f"{r['result']}.\n" for _, r in rest[uncorrected].iterrows()))
    rest = rest[~uncorrected]
    untestable = rest["result"].astype(str).str.startswith("not testable")
    for name, rows in (("Not testable", rest[untestable]), ("Not paired", rest[~untestable])):
        if not rows.empty:
            text += f"\n## {name}\n\n" + "".join(
                f"- {r['model']}, {r['metric']}: {r['comparison']}: {r['result']}\n" for _, r in rows.iterrows())
    return text


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    from harness.core.errors import UserError
    from harness.reporting.endpoints import from_experiment_file
    ap = argparse.ArgumentParser(prog="python -m harness.reporting.findings",
                                 description="Rewrite a results folder's findings.md from its comparisons.csv, "
                                             "primary endpoints first (declared in its experiment file).")
    ap.add_argument("folder", type=Path, help="results/<experiment> (with comparisons.csv and findings.md)")
    ap.add_argument("--experiment", default=None, help="the conf/experiment name (default: the folder's name)")
    args = ap.parse_args(argv)
    try:
        print(rewrite_findings(args.folder, from_experiment_file(args.experiment or args.folder.name)))
    except (UserError, FileNotFoundError) as e:
        print(f"esbench: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
