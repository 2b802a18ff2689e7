"""The claims ledger: each published claim, the experiment files that test it, and its verdict.

    python -m harness.reporting.claims                  # results/*/comparisons.csv -> docs/claims.md
    python -m harness.reporting.claims --results R --out F

docs/claims.md is generated, never edited: rerun this after a results/ folder changes. A claim is
decided only by the paired rows of comparisons.csv (harness/reporting/comparisons.py): per experiment,
the rows its rule names (comparison kind, the A side of the comparison, metric), one row per
comparison and metric (paired by seed where the experiment has one, else by prompt). A row counts as
`detected` only when its p survives Benjamini-Hochberg at q = 0.05 over its comparisons.csv (the file's
p_bh; its result "detected") AND Holm at 0.05 within the claim's deciding rows (Holm over those rows'
p_value: a claim decided by several rows must not pick its evidence from them); its direction is the
sign of its difference. A row with p < 0.05 that does not survive is `nominal only` and counts as not
detected. A comparisons.csv older than the p columns (no p_bh) has only intervals: its rows are read
by whether their 95% interval excludes 0, and every verdict from it says "uncorrected: records needed to
apply BH" (BH can only remove those detections: a `not detected` there stands, a `supported` or
`contradicted` may not). Rows that admit no test (`not testable`: identical columns, a quantity 0 by
definition on the base; `not paired`: too few or identical seeds) count as not detected and are named.
Verdicts, per experiment:

- supported: every deciding row is detected in the claimed direction;
- contradicted: some deciding row is detected against it;
- not detected: neither;
- not testable: no deciding row admits a test (each row's reason is given);
- not run: no results, results without per-prompt scores, or no row the rule names (the reason and the
  command are given);
- not decidable from comparisons: no comparison kind decides the claim; the file to read is named.

A few claims need a rule over model size or sigma (the 1.5B boundary, its alternative reading, C7);
they are small functions below. The sizes the sources quote (36.4%, 15 of 18, ~40x) are quoted, not
tested: the rules test directions.

    python -m pytest tests/test_claims.py -q
"""
from __future__ import annotations

import argparse
import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from harness.core.atomic import write_text_atomic
from harness.reporting.findings import CROSSED, p_text
from harness.reporting.format import is_percent
from harness.reporting.stats import ALPHA, Q
from harness.reporting.update_claims import MARK

SUPPORTED, CONTRADICTED, NOT_DETECTED, NOT_TESTABLE, NOT_RUN = (
    "supported", "contradicted", "not detected", "not testable", "not run")
UNCORRECTED = "uncorrected: records needed to apply BH"
BY_SEED = "by seed (Student-t)"
ES = r"ES(?! then)"          # an ES row (any label starting "ES"), not the sequential "ES then GRPO"
RERUN = "`python -m harness experiment={exp} results_dir=results`"
# what a row of comparisons.csv admits (row_status)
PREDATE, UNTESTABLE, UNPAIRED, TESTED, INTERVAL = "predate", "not testable", "not paired", "tested", "interval"


@dataclass(frozen=True)
class Check:
    """Rows of comparisons.csv: `kind`, A side matching regex `a`, `metric` ("pass@K": the largest pass@k, k > 1,
    the experiment measured); `sign` +1 claims A above B, -1 below."""
    kind: str
    a: str
    metric: str
    sign: int = 1


@dataclass(frozen=True)
class Verdict:
    word: str
    detail: str = ""
    rows: tuple = ()          # the deciding rows (pandas Series), each with the ledger's call on it (_call)
    uncorrected: bool = False  # some deciding row has an interval and no p (a comparisons.csv older than BH)


@dataclass(frozen=True)
class Claim:
    id: str
    source: str
    text: str                 # as the source states it
    cpu: tuple = ()           # CPU twins (conf/experiment/<name>.yaml)
    gpu: tuple = ()           # GPU files
    rule: str = ""
    checks: tuple = ()
    min_models: int = 1
    decide: Callable | None = None    # a custom rule over the experiment's deciding rows
    undecidable: str = ""             # why no comparison decides it, and what to read


# ----------------------------------------------------------------------------- reading rows


def _a_side(df: pd.DataFrame) -> pd.Series:
    return df["comparison"].str.split(" vs ", n=1).str[0]


def deciding(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, kind, comparison, metric): the crossed seed x prompt row where there is one, else
    paired by seed, else by prompt."""
    pref = df["pairing"].map({CROSSED: 0, BY_SEED: 1}).fillna(2).astype(int)
    keys = ["model", "kind", "comparison", "metric"]
    out = df.assign(_pref=pref).sort_values("_pref", kind="stable").drop_duplicates(keys)
    return out.sort_index().drop(columns="_pref")


def _nan(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or bool(pd.isna(v))


def row_status(row) -> str:
    """What a row admits: PREDATE (records without per-prompt scores), UNTESTABLE (comparisons.py's "not
    testable": identical columns, a quantity 0 by definition), UNPAIRED (too few or identical seeds), TESTED
    (a p, hence a BH-adjusted p over its file) or INTERVAL (an interval and no p: a comparisons.csv written
    before BH, read uncorrected)."""
    p = row.get("p_value", math.nan)
    if row["pairing"] == "none" or (_nan(row["ci_low"]) and _nan(p)):
        result = str(row["result"])
        return PREDATE if result.startswith("no per-prompt") else UNTESTABLE if result.startswith(
            "not testable") else UNPAIRED
    return INTERVAL if _nan(p) else TESTED


def holm(p) -> np.ndarray:
    """Holm's step-down adjusted p (Holm 1979, Scand. J. Statist. 6:65-70): p_(i) sorted ascending gets
    max over j <= i of (m - j + 1) p_(j), capped at 1; NaN entries are not tests and keep NaN."""
    p = np.asarray(p, dtype=float)
    adj = np.full(p.shape, np.nan)
    idx = np.flatnonzero(~np.isnan(p))
    if idx.size:
        order = idx[np.argsort(p[idx], kind="stable")]
        scaled = p[order] * (idx.size - np.arange(idx.size))
        adj[order] = np.minimum(1.0, np.maximum.accumulate(scaled))
    return adj


def direction(row) -> int | None:
    """+1 / -1 when the interval excludes 0 above / below, 0 when it spans 0, None when not paired (the
    interval alone, uncorrected: the ledger decides with `annotate`)."""
    lo, hi = row["ci_low"], row["ci_high"]
    if row["pairing"] == "none" or pd.isna(lo) or pd.isna(hi):
        return None
    return 1 if lo > 0 else -1 if hi < 0 else 0


def annotate(rows: pd.DataFrame) -> pd.DataFrame:
    """The deciding rows with the ledger's call on each: `_status` (row_status), `_holm` (Holm over the rows
    with a p), `_dir` (+1 / -1: counted as detected above / below; 0: not; NaN: no test) and `_call` (what the
    quote says). A row with a p counts when its BH-adjusted p (over its file) and its Holm p (over these rows)
    are both <= 0.05; a row with only an interval counts when the interval excludes 0 (uncorrected)."""
    rows = rows.copy()
    if "p_value" not in rows:
        rows["p_value"] = math.nan
    if "p_bh" not in rows:
        rows["p_bh"] = math.nan
    rows["_status"] = [row_status(r) for _, r in rows.iterrows()]
    tested = (rows["_status"] == TESTED).to_numpy()
    rows["_holm"] = holm(np.where(tested, rows["p_value"].to_numpy(dtype=float), np.nan))
    m = int(tested.sum())
    dirs, calls = [], []
    for _, r in rows.iterrows():
        sign = 1 if r["difference"] > 0 else -1 if r["difference"] < 0 else 0
        if r["_status"] == TESTED:
            bh, hp = float(r["p_bh"]), float(r["_holm"])
            ps = f"p = {p_text(r['p_value'])}, BH p = {p_text(bh)}, Holm p = {p_text(hp)} over {m} row{'s' * (m != 1)}"
            if bh <= Q and hp <= ALPHA:
                dirs.append(sign)
                calls.append(f"detected; {ps}")
            else:
                dirs.append(0)
                call = ("detected in its file, not after Holm over this claim's rows" if bh <= Q else
                        "nominal only" if r["p_value"] < ALPHA else "not detected")
                calls.append(f"{call}; {ps}")
        elif r["_status"] == INTERVAL:
            d = direction(r)
            dirs.append(d)
            calls.append(f"{'interval excludes 0' if d else 'interval spans 0'}, uncorrected (no p)")
        else:
            dirs.append(math.nan)
            calls.append(str(r["result"]))
    rows["_dir"], rows["_call"] = dirs, calls
    return rows


def select(df: pd.DataFrame, check: Check) -> pd.DataFrame:
    metric = check.metric
    if metric == "pass@K":
        ks = [int(m[5:]) for m in df["metric"].unique() if re.fullmatch(r"pass@\d+", m) and int(m[5:]) > 1]
        metric = f"pass@{max(ks)}" if ks else metric
    return df[(df["kind"] == check.kind) & (df["metric"] == metric) & _a_side(df).str.match(check.a)]


def load(results: Path, exp: str, gpu: bool) -> pd.DataFrame | str:
    """The experiment's deciding rows, or why there are none (a `not run` reason)."""
    folder = results / exp
    if not folder.is_dir():
        where = " on GPUs (with the options the file's first line names)" if gpu else ""
        return f"no results/{exp}: run {RERUN.format(exp=exp)}{where}"
    csv = folder / "comparisons.csv"
    if not csv.is_file():
        return f"results/{exp} predate per-prompt scores (no comparisons.csv): rerun {RERUN.format(exp=exp)}"
    df = pd.read_csv(csv)
    if df.empty:
        findings = folder / "findings.md"
        text = findings.read_text().split("\n" + MARK)[0].strip() if findings.is_file() else ""
        first = text.splitlines()[-1] if text else ""
        return f"results/{exp}/comparisons.csv has no rows{': ' + first if first else ''}"
    return deciding(df)


# ----------------------------------------------------------------------------- rules

PREDATES = "its records predate per-prompt scores (comparisons.csv says so): rerun it"


def _not_runnable(rows: pd.DataFrame) -> Verdict | None:
    """NOT_RUN when no row is named or some row's records predate per-prompt scores."""
    if rows.empty:
        return Verdict(NOT_RUN, "no row this rule names in comparisons.csv")
    if (rows["_status"] == PREDATE).any():
        return Verdict(NOT_RUN, PREDATES)
    return None


def _untested(rows: pd.DataFrame) -> str:
    """'; 2 not testable, 1 not paired' for the rows that admit no test ('' when none)."""
    parts = [f"{int((rows['_status'] == s).sum())} {s}" for s in (UNTESTABLE, UNPAIRED) if (rows["_status"] == s).any()]
    return f"; {', '.join(parts)} (no test: counted as not detected)" if parts else ""


def _missed(rows: pd.DataFrame) -> str:
    """'; not counted: 2 nominal only, 1 detected in its file but not after Holm ...' for tested rows not counted."""
    tested = rows[(rows["_status"] == TESTED) & (rows["_dir"] == 0)]
    holm_only = int((tested["p_bh"] <= Q).sum())
    nominal = int(((tested["p_bh"] > Q) & (tested["p_value"] < ALPHA)).sum())
    parts = [f"{nominal} nominal only"] * bool(nominal) + \
        [f"{holm_only} detected in its file but not after Holm over these rows"] * bool(holm_only)
    return f"; not counted: {', '.join(parts)}" if parts else ""


def _counted(rows: pd.DataFrame) -> str:
    """How a detection was counted here: BH and Holm, or uncorrected intervals."""
    if (rows["_status"] == INTERVAL).any():
        return " (by 95% interval alone: this comparisons.csv has no p, so neither BH nor Holm applies)"
    n = int((rows["_status"] == TESTED).sum())
    return f" (counted: BH-surviving in its file and Holm-surviving over {'this row' if n == 1 else f'these {n} rows'})"


def _uncorrected(rows: pd.DataFrame) -> bool:
    return bool((rows["_status"] == INTERVAL).any())


def tally(rows: pd.DataFrame, min_models: int = 1) -> Verdict:
    """The verdict from annotated rows carrying `_sign` (+1: the claim says A above B)."""
    stop = _not_runnable(rows)
    if stop:
        return stop
    unc = _uncorrected(rows)
    if rows["model"].nunique() < min_models:
        return Verdict(NOT_RUN, f"{rows['model'].nunique()} model(s) run; the claim needs {min_models}", _rows(rows),
                       unc)
    dirs = [d * s if not _nan(d) else None for d, s in zip(rows["_dir"], rows["_sign"])]
    n, pro, con = len(dirs), dirs.count(1), dirs.count(-1)
    if dirs.count(None) == n:
        why = "; ".join(sorted({s for s in rows["_status"]}))
        return Verdict(NOT_TESTABLE, f"none of its {n} rows admits a test ({why}: each row says why)", _rows(rows))
    tail = _counted(rows) + _missed(rows) + _untested(rows)
    if con:
        return Verdict(CONTRADICTED, f"{con} of {n} rows detected against the claim{tail}", _rows(rows), unc)
    word = SUPPORTED if pro == n else NOT_DETECTED
    return Verdict(word, f"{pro} of {n} rows detected as claimed, none against{tail}", _rows(rows), unc)


def _named(df: pd.DataFrame, checks: tuple) -> pd.DataFrame:
    """The rows the checks name, each with its claimed sign, annotated (annotate)."""
    rows = pd.concat([select(df, c).assign(_sign=c.sign) for c in checks])
    return annotate(rows) if not rows.empty else rows.assign(_status=pd.Series(dtype=object))


def by_checks(df: pd.DataFrame, checks: tuple, min_models: int = 1) -> Verdict:
    return tally(_named(df, checks), min_models)


def _rows(df: pd.DataFrame) -> tuple:
    return tuple(r.drop(labels="_sign", errors="ignore") for _, r in df.iterrows())


def _size(model: str) -> float | None:
    m = re.search(r"-(\d+(?:\.\d+)?)([kmb])(?:\b|-)", model.lower())
    return float(m.group(1)) * {"k": 1e3, "m": 1e6, "b": 1e9}[m.group(2)] if m else None


def _ordered_models(rows: pd.DataFrame) -> list[str]:
    """The models by size parsed from their names (-0.5b, -100k, -4m), else in the file's order (ascending in
    every file)."""
    models = list(dict.fromkeys(rows["model"]))
    sizes = [_size(m) for m in models]
    return models if None in sizes else [m for _, m in sorted(zip(sizes, models))]


def _per_model(rows: pd.DataFrame, m: str) -> tuple[int, str]:
    """(+1 / -1 / 0, a note) for one model's annotated rows: +1 if some row is detected above (else -1 if some is
    detected below); the note names a nominal-only or uncorrected direction that did not count."""
    mine = rows[rows["model"] == m]
    dirs = [d for d in mine["_dir"] if not _nan(d)]
    sign = 1 if 1 in dirs else -1 if -1 in dirs else 0
    if sign:
        return sign, ""
    near = mine[(mine["_status"] == TESTED) & (mine["p_value"] < ALPHA)]
    if near.empty:
        return 0, ""
    up, down = (near["difference"] > 0).any(), (near["difference"] < 0).any()
    kinds = " and ".join(k for k, ok in (("gain", up), ("loss", down)) if ok)
    what = f"a nominal-only {kinds}" if (near["p_bh"] > Q).all() else f"a {kinds} with p < 0.05 that does not count"
    return 0, f" ({what}: BH p {', '.join(p_text(v) for v in near['p_bh'])})"


def boundary(df: pd.DataFrame) -> Verdict:
    """Per model, + if some ES row is detected above base (greedy), - if none is and some is detected below.
    Real checkpoints (>= 100M): contradicted by a + below 1.5B or a - above it. The zoo stands in for the size
    axis: contradicted by a + at a smaller size than a -; supported when every - sits below every + (both seen)."""
    rows = _named(df, (Check("trained vs base", ES, "greedy_acc"),))
    stop = _not_runnable(rows)
    if stop:
        return stop
    models = _ordered_models(rows)
    per = {m: _per_model(rows, m) for m in models}
    sign = {m: v[0] for m, v in per.items()}
    pos = [i for i, m in enumerate(models) if sign[m] == 1]
    neg = [i for i, m in enumerate(models) if sign[m] == -1]
    says = ", ".join(f"{m} {'+-0'[[1, -1, 0].index(sign[m])]}{per[m][1]}" for m in models)
    unc = _uncorrected(rows)
    if all((_size(m) or 0) >= 1e8 for m in models):
        bad = [m for m in models if (sign[m] == 1 and _size(m) < 1.5e9) or (sign[m] == -1 and _size(m) > 1.5e9)]
        if bad:
            return Verdict(CONTRADICTED, f"per model ({says}){_counted(rows)}: {', '.join(bad)} on the wrong side of "
                           "1.5B", _rows(rows), unc)
    elif pos and neg and min(pos) < max(neg):
        return Verdict(CONTRADICTED, f"per model ({says}){_counted(rows)}: a detected gain at a smaller size than a "
                       "detected loss", _rows(rows), unc)
    word = SUPPORTED if pos and neg else NOT_DETECTED
    return Verdict(word, f"per model ({says}){_counted(rows)}"
                   + ("" if pos and neg else ": needs a detected loss and a detected gain"), _rows(rows), unc)


def small_sigma(df: pd.DataFrame) -> Verdict:
    """The smallest model's ES row at the smallest sigma of the sweep, against base (greedy). Its BH-adjusted p
    is over its file; Holm over one row changes nothing."""
    rows = select(df, Check("trained vs base", ES, "greedy_acc"))
    sig = _a_side(rows).str.extract(r"sigma=([0-9.eE+-]+)")[0].astype(float) if not rows.empty else None
    if rows.empty or sig.isna().all():
        return Verdict(NOT_RUN, "no ES row with a sigma in comparisons.csv")
    rows = rows[rows["model"] == _ordered_models(rows)[0]]
    rows = rows[sig[rows.index] == sig[rows.index].min()]
    return by_checks(rows, (Check("trained vs base", ES, "greedy_acc"),))


def population(df: pd.DataFrame) -> Verdict:
    """Supported if some N < 30 is detected below N=30 on the smallest model and none on the largest; contradicted
    the other way round. Not detecting a loss is not equivalence (the note's criterion: within 0.5% of N=30)."""
    rows = _named(df, (Check("population N vs N=30", ES, "greedy_acc"),))
    stop = _not_runnable(rows)
    if stop:
        return stop
    models = _ordered_models(rows)
    per = {m: _per_model(rows, m) for m in models}
    worse = {m: bool((rows.loc[rows["model"] == m, "_dir"] == -1).any()) for m in models}
    says = ", ".join(f"{m}: {'an N < 30 detected below N=30' if worse[m] else 'no N < 30 detected below N=30'}"
                     f"{per[m][1] if not worse[m] else ''}" for m in models)
    small, large = worse[models[0]], worse[models[-1]]
    word = SUPPORTED if small and not large else CONTRADICTED if large and not small else NOT_DETECTED
    says = (says if len(models) > 1 else f"one model run ({says})") + _counted(rows)
    return Verdict(word, says, _rows(rows), _uncorrected(rows))


# ----------------------------------------------------------------------------- the claims

QIU, NOTE, HOY, RECORD = "Qiu et al. 2025 (arXiv 2509.24372)", "NOTE-076", "Hoy et al.", "the practice record"
TABLE1 = dict(cpu=("qiu2025_table1_cpu", "quickstart", "real_cpu"), gpu=("qiu2025_table1",))
PASSK = dict(cpu=("quickstart", "qiu2025_table1_cpu"), gpu=("gsm8k_passk",))
WEIGHTS = dict(cpu=("quickstart", "qiu2025_table1_cpu", "scale_ladder_cpu", "real_cpu", "numerics_cpu"),
               gpu=("gsm8k_passk", "numerics"))
SIGMA = dict(cpu=("scale_ladder_cpu", "sigma_sweep_cpu"), gpu=("sigma_sweep",))
VARIANTS = dict(cpu=("es_variants_cpu",), gpu=("es_variants",))
NULL = ("not decidable from comparisons: see analysis.md ({section}) beside its random-walk null, which checks the "
        "size and shape of ES's update (its arithmetic) and cannot tell learning from none at these iteration counts")
BASE = "trained vs base"

CLAIMS = (
    Claim("Q1", QIU, "Averaged over models, ES improves over the base model by 36.4%.", **TABLE1,
          rule="ES vs base, greedy_acc, detected above base on every model run",
          checks=(Check(BASE, ES, "greedy_acc"),)),
    Claim("Q2", QIU, "Averaged over models, PPO improves over the base model by 17.9%.", **TABLE1,
          rule="PPO vs base, greedy_acc, detected above base on every model run",
          checks=(Check(BASE, r"PPO", "greedy_acc"),)),
    Claim("Q3", QIU, "Averaged over models, GRPO improves over the base model by 21.3% (group 8) and 21.4% "
          "(group 30).", **TABLE1,
          rule="every GRPO column (GRPO, GRPO(8), GRPO(30)) vs base, greedy_acc, detected above base on every "
          "model run",
          checks=(Check(BASE, r"GRPO", "greedy_acc"),)),
    Claim("Q4", QIU, "ES is robust across base models.", cpu=("qiu2025_table1_cpu",), gpu=("qiu2025_table1",),
          rule="ES vs base, greedy_acc, detected above base on every model, with at least two models",
          checks=(Check(BASE, ES, "greedy_acc"),), min_models=2),
    Claim("Q5", QIU, "ES is less prone to reward hacking.", cpu=("conciseness_cpu",),
          gpu=("qiu2025_table2_conciseness",),
          undecidable="not decidable by one rule: reward hacking is a reading of reward beside KL to base across the "
          "columns (table.md, pareto.png); comparisons.py pairs each ES column with each GRPO column on both, "
          "and findings.md lists those intervals"),
    Claim("Q6", QIU, "ES is steadier across runs.", gpu=("qiu2025_table2_conciseness", "qiu2025_table1"),
          undecidable="not decidable from comparisons: they pair means, no comparison tests the spread over seeds; "
          "read the seed intervals in table.md"),
    Claim("Q7", QIU, "GRPO group size 8 vs 30 moves the average by 0.1 points.", cpu=("qiu2025_table1_cpu",),
          gpu=("qiu2025_table1",), undecidable="not decidable from comparisons: comparisons.py has no GRPO(8) vs "
          "GRPO(30) kind; table.md shows both columns, unpaired"),
    Claim("C1", NOTE, "GRPO improves pass@1 and degrades large-k pass@k, often below base (15 of 18).", **PASSK,
          rule="GRPO vs base: pass@1 detected above base and the largest pass@k measured detected below, "
          "on every model",
          checks=(Check(BASE, r"GRPO", "pass@1"), Check(BASE, r"GRPO", "pass@K", -1))),
    Claim("C2", NOTE, "ES improves pass@1, pass@16 and pass@32 together.", **PASSK,
          rule="ES vs base: pass@1, pass@16 and pass@32 (those measured) each detected above base, on every model",
          checks=(Check(BASE, ES, "pass@1"), Check(BASE, ES, "pass@16"), Check(BASE, ES, "pass@32"))),
    Claim("C4", NOTE, "ES's drift does not cause broad forgetting.", gpu=("gsm8k_passk",),
          undecidable="not decidable from comparisons: held-out scores are table.md blocks (Held-out task), unpaired"),
    Claim("C5", NOTE, "ES's gains live in a sparse, larger-magnitude coordinate subset.", **WEIGHTS,
          undecidable=NULL.format(section="Functional sparsity") + "; and NOTE-076's figure is not testable as "
          "defined: its threshold is one ES update's RMS, below which at most 68.3% of a walk's coordinates fall "
          "(P(|Z| < 1/sqrt(T)) after T updates), so an update the size and shape of the walk cannot reach 77.6-93.0%"),
    Claim("C6", NOTE, "ES adapts through normalization and attention parameters, GRPO through embeddings and the "
          "LM head.", **WEIGHTS, undecidable=NULL.format(section="Localisation")),
    Claim("C7", NOTE, "The population size ES needs falls with model scale.",
          cpu=("population_cpu",), gpu=("population",),
          rule="population N vs N=30, greedy_acc: some N < 30 detected below N=30 on the smallest model and none on "
          "the largest (contradicted the other way round; not detecting a loss is not the note's within-0.5% "
          "criterion)", decide=population),
    Claim("C8", NOTE, "Antithetic estimation does not pay on reasoning tasks.", **VARIANTS,
          rule="ES antithetic vs ES full, greedy_acc: contradicted if detected above full ES on any model, supported "
          "if detected below on every model (an interval spanning 0 does not show that it does not pay)",
          checks=(Check("variant vs full ES", r"ES antithetic", "greedy_acc", -1),)),
    Claim("C9", NOTE, "Sequential GRPO->ES buys both ends of the trade-off.", **VARIANTS,
          rule="GRPO then ES vs base: pass@1 and the largest pass@k measured both detected above base, on every model",
          checks=(Check(BASE, r"GRPO then ES", "pass@1"), Check(BASE, r"GRPO then ES", "pass@K"))),
    Claim("entropy", NOTE, "Token entropy declines under GRPO and changes modestly under ES.", **WEIGHTS,
          undecidable="not decidable from comparisons: see analysis.md (Token entropy); the twins measure it on "
          "training-task validation prompts, the note on held-out GPQA"),
    Claim("drift", NOTE, "Drift ratio ~40x (GRPO 0.0475 vs ES 1.933 on Qwen2.5-1.5B-Instruct).", **WEIGHTS,
          undecidable=NULL.format(section="Relative drift")),
    Claim("KL", HOY, "ES has lower KL to base on single-task Countdown (0.21 vs 0.38 nats) but not in sequential "
          "training (Math training moves Chemistry by 0.62 nats under ES vs 0.01 under GRPO).",
          undecidable="not decidable from comparisons: KL to base (eval.kl_to_base=true) is a table column, "
          "unpaired; no experiment file trains Math then Chemistry"),
    Claim("1.5B", RECORD, "Every negative ES result is at 1.5B or below and every positive at 1.5B or above.",
          **SIGMA, decide=boundary,
          rule="per model, ES (any sigma) vs base, greedy_acc: a detected gain is +, else a detected loss is -. "
          "GPU: no + below 1.5B, no - above it. Zoo (standing in for size): no + at a smaller size than a -; "
          "supported when both are seen"),
    Claim("1.5B-alt", RECORD, "Alternative reading: improvement is accessible at 0.5B provided the perturbation "
          "scale is small enough.", **SIGMA, decide=small_sigma,
          rule="the smallest model's ES at the file's smallest sigma vs base, greedy_acc, detected above base "
          "(where alpha is tied to sigma, alpha = sigma/2, the step size moves with it: read the file's header)"),
)


def verdict(claim: Claim, results: Path, exp: str, gpu: bool = False) -> Verdict:
    if claim.undecidable:
        return Verdict(claim.undecidable)
    df = load(results, exp, gpu)
    if isinstance(df, str):
        return Verdict(NOT_RUN, df)
    v = claim.decide(df) if claim.decide else by_checks(df, claim.checks, claim.min_models)
    if v.word == NOT_RUN and "predate" in v.detail:
        return Verdict(NOT_RUN, f"results/{exp} predate per-prompt scores: rerun {RERUN.format(exp=exp)}")
    return v


# ----------------------------------------------------------------------------- markdown


def _pts(v: float, metric: str) -> str:
    return "-" if pd.isna(v) else f"{100 * v:+.1f}" if is_percent(metric) else f"{v:+.3f}"


def quote(r) -> str:
    """One deciding row: its difference and interval, the ledger's call on it (with p, BH p and Holm p where the
    file has them), and its pairing."""
    a, b = (re.sub(r" \(chosen on validation: .*\)$", "", s) for s in r["comparison"].split(" vs ", 1))
    unit = " points" if is_percent(r["metric"]) else ""
    seeds = int(r["n_seeds"]) if not pd.isna(r["n_seeds"]) else 0
    prompts = "" if pd.isna(r["n_prompts"]) else f" / {int(r['n_prompts'])} prompts"
    how = f"{r['pairing'].split(' (')[0]}, {seeds} seed{'s' * (seeds != 1)}{prompts}"
    ci = "" if pd.isna(r["ci_low"]) else f" [{_pts(r['ci_low'], r['metric'])}, {_pts(r['ci_high'], r['metric'])}]"
    call = r["_call"] if "_call" in r else r["result"]
    return f"{r['model']}, {r['metric']}, {a} vs {b}: {_pts(r['difference'], r['metric'])}{unit}{ci}, {call} ({how})"


def _link(path: Path, out: Path, text: str) -> str:
    return f"[{text}]({os.path.relpath(path, out.parent)})" if path.exists() else text


HEAD = """# Claims ledger

Generated by `python -m harness.reporting.claims` from the committed `results/*/comparisons.csv`
(harness/reporting/comparisons.py); do not edit by hand, rerun it after a results folder changes.

Each published claim, as its source states it, is decided per experiment by a rule on paired
comparison rows (comparison kind, the compared rows, metric), one row per comparison: paired by seed
where the experiment has two or more seeds, else by prompt. A row counts as detected only when its p
survives Benjamini-Hochberg at q = 0.05 over its comparisons.csv (the file's BH p, as its findings.md
reports it) and Holm at 0.05 over the claim's deciding rows in that experiment (so that a claim decided
by several rows does not pick its evidence among them); a row with p < 0.05 that does not survive is
"nominal only" and counts as not detected. A comparisons.csv written before the p columns has
intervals and no p: its rows are read by whether their 95% interval excludes 0, and its verdicts are
marked **uncorrected: records needed to apply BH** (the per-prompt records are not committed;
correction can only remove detections, so an uncorrected "not detected" stands and an uncorrected
"supported" or "contradicted" may not). Rows that admit no test ("not testable": identical columns or a
quantity 0 by definition; "not paired": too few or identical seeds) count as not detected.

- **supported**: every deciding row is detected in the claimed direction;
- **contradicted**: some deciding row is detected against it;
- **not detected**: neither (an interval spanning 0 is not evidence of no difference);
- **not testable**: no deciding row admits a test (each row says why);
- **not run**: no paired comparisons for that experiment yet (why, and the command);
- **not decidable from comparisons**: no comparison kind decides the claim; the file to read is named.

Sizes the sources quote (36.4%, 15 of 18, ~40x) are quoted, not tested: the rules test directions.
The CPU twins run the zoo, which stands in for the sources' 0.5B-8B models: a verdict there is about
the twin, not the source's models.
"""


def _short(v: Verdict) -> str:
    word = "not decidable" if v.word.startswith("not decidable") else v.word
    return f"{word} (uncorrected)" if v.uncorrected else word


def _section(c: Claim, done: dict, results: Path, out: Path) -> str:
    head = f"## {c.id}: {c.text}\n\n{c.source[0].upper()}{c.source[1:].rstrip('.')}. "
    if c.undecidable:
        read = [e for e, _ in done if (results / e).is_dir()]
        name = "analysis.md" if "analysis.md" in c.undecidable else "table.md"
        files = [_link(results / e / name, out, f"results/{e}/{name}") for e in read]
        missing = [f"{e} ({'GPU' if gpu else 'CPU'})" for e, gpu in done if e not in read]
        return (head + c.undecidable[0].upper() + c.undecidable[1:] + "."
                + (f" Read: {', '.join(files)}." if files else "")
                + (f" Not run yet: {', '.join(missing)}." if missing else "")
                + ("" if done else " No experiment file tests it yet."))
    lines = [head + f"Rule: {c.rule}.\n"]
    for (e, gpu), v in done.items():
        name = _link(results.parent / "conf" / "experiment" / f"{e}.yaml", out, e)
        csv = results / e / "comparisons.csv"
        where = f" ({_link(csv, out, 'comparisons.csv')})" if csv.exists() else ""
        detail = f": {v.detail}" if v.detail else ""
        unc = f" ({UNCORRECTED})" if v.uncorrected else ""
        lines.append(f"- {'GPU' if gpu else 'CPU'} {name}: **{v.word}**{unc}{detail}{where}.")
        lines += [f"  - {quote(r)}" for r in v.rows]
    return "\n".join(lines)


def ledger(results: Path, out: Path) -> str:
    """docs/claims.md's text: the summary table, then one section per claim with its rule and deciding rows."""
    results, out = Path(results), Path(out)
    table = ["| claim | source | as the source states it | CPU twin | GPU file |", "|---|---|---|---|---|"]
    sections = []
    for c in CLAIMS:
        done = {(e, gpu): verdict(c, results, e, gpu) for gpu, exps in ((False, c.cpu), (True, c.gpu)) for e in exps}
        cells = [", ".join(f"{e}: {_short(done[e, gpu])}" for e in exps) or "none"
                 for gpu, exps in ((False, c.cpu), (True, c.gpu))]
        table.append(f"| {c.id} | {c.source} | {c.text} | {cells[0]} | {cells[1]} |")
        sections.append(_section(c, done, results, out))
    return HEAD + "\n" + "\n".join(table) + "\n\n" + "\n\n".join(sections) + "\n"


def write_ledger(results: Path, out: Path) -> Path:
    write_text_atomic(Path(out), ledger(results, out))
    return Path(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.reporting.claims", description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=Path("results"),
                    help="the curated results folder (default: results)")
    ap.add_argument("--out", type=Path, default=Path("docs/claims.md"), help="the ledger (default: docs/claims.md)")
    args = ap.parse_args(argv)
    if not args.results.is_dir():
        ap.error(f"{args.results} is not a folder; run from the repository root or pass --results")
    print(write_ledger(args.results, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
