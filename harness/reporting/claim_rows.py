"""The claims ledger's reading of a comparisons.csv (harness/reporting/claims.py writes the ledger,
harness/reporting/claim_rules.py holds the rules beyond a plain tally): the rows a rule names, the ledger's call
on each, the tally most rules share, and where a verdict came from (models, seeds, prompts, pairing, budget).

Cells are matched by the role their experiment file declares beside them (`role:` on a cell or grid,
harness/reporting/roles.py), never by their labels: ES is the role `es` ("ES", "ES full", "ES sigma=1e-2 (zoo
set)"), never an ES variant, a placebo, a population cell or a sequential cell; GRPO is `grpo` ("GRPO(8)",
"GRPO(30)"), never `grpo_lora` or `grpo_then_es`. A column is a comparison's side without "(chosen on
validation: ...)" or the update flag; its role is its cell's or grid's (roles.role_of).

    python -m pytest tests/test_claims.py -q
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from harness.reporting.findings import CROSSED, DESCRIPTIVE, p_text
from harness.reporting.format import is_percent
from harness.reporting.roles import declared, role_of
from harness.reporting.stats import ALPHA, Q
from harness.reporting.update_claims import MARK

SUPPORTED, CONTRADICTED, NOT_DETECTED, NOT_TESTABLE, NOT_RUN = (
    "supported", "contradicted", "not detected", "not testable", "not run")
NOT_DECIDABLE = "not decidable from comparisons"
UNCORRECTED = "uncorrected: records needed to apply BH"
BY_SEED = "by seed (Student-t)"
RERUN = "`python -m harness experiment={exp} results_dir=results +overwrite_results=true`"
CONF = Path(__file__).resolve().parents[2] / "conf"
# what a row of comparisons.csv admits (row_status)
PREDATE, UNTESTABLE, UNPAIRED, TESTED, INTERVAL = "predate", "not testable", "not paired", "tested", "interval"

# the roles the claims read (harness/reporting/roles.py), each a tuple of roles a side may have
ES_ROLE = ("es",)                       # ES itself, never a variant, placebo, population or sequential cell
GRPO_ROLE = ("grpo",)                   # GRPO at a group size, never GRPO-LoRA or GRPO then ES
PPO_ROLE = ("ppo",)
SIGMA_ES = ("es_sweep", "es_tied")        # either ES cell of a sigma sweep, at any sigma
FIXED_ALPHA_ES = ("es_sweep",)            # the sweep's ES cell (alpha fixed where the file fixes it)
POPULATION_ES = ("es_population",)
ANTITHETIC = ("es_antithetic",)
GRPO_THEN_ES = ("grpo_then_es",)
CHOSEN = re.compile(r" \(chosen on validation: .*\)$")
FLAG = re.compile(r" \[(?:NO UPDATE|\d+% skipped[^\]]*|\d+ of \d+ seeds [^\]]*)\]$")  # aggregate.py's update flag


@dataclass(frozen=True)
class Check:
    """Rows of comparisons.csv: `kind` ("" for any kind), the A side's role in `a` (and the B side's in `b`, when
    given), `metric` ("pass@K": the largest pass@k, k > 1, the experiment measured); `sign` +1 claims A above B,
    -1 below."""
    kind: str
    a: tuple
    metric: str
    sign: int = 1
    b: tuple | None = None


@dataclass(frozen=True)
class Verdict:
    word: str
    detail: str = ""
    rows: tuple = ()          # the deciding rows (pandas Series), each with the ledger's call on it (_call)
    uncorrected: bool = False  # some deciding row has an interval and no p (a comparisons.csv older than BH)
    basis: str = ""           # what it came from: models, seeds, prompts, pairing, budget (claims.verdict)


# ----------------------------------------------------------------------------- reading rows


def column(side: str) -> str:
    """A comparison side's column label: 'GRPO(8) (chosen on validation: ...)' -> 'GRPO(8)', and
    'ES [67% skipped]' -> 'ES' (the flag says how often ES made no update; the column is still ES)."""
    return FLAG.sub("", CHOSEN.sub("", str(side)))


def sides(df: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """The A and B columns of each row (column labels, see `column`)."""
    parts = df["comparison"].astype(str).str.split(" vs ", n=1)
    return parts.str[0].map(column), parts.str[1].fillna("").map(column)


def deciding(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, kind, comparison, metric): the row that is the comparison's test, paired by seed
    where there is one, else by prompt; a descriptive prompt-level row (comparisons.csv written since seed-level
    tests became the primary) never decides, nor does a crossed row of an older file when a seed row is there."""
    pref = df["pairing"].map({BY_SEED: 0, CROSSED: 1}).fillna(2).astype(int)
    pref = pref.where(df["result"].astype(str) != DESCRIPTIVE, 3)
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


def largest_k(df: pd.DataFrame) -> str | None:
    """'pass@16': the largest pass@k with k > 1 the file measured, or None."""
    ks = [int(m[5:]) for m in df["metric"].unique() if re.fullmatch(r"pass@\d+", str(m)) and int(m[5:]) > 1]
    return f"pass@{max(ks)}" if ks else None


def select(df: pd.DataFrame, check: Check) -> pd.DataFrame:
    """The rows `check` names: its kind (any when ""), its metric, its A column (and B column) matched whole."""
    if df.empty:
        return df
    metric = (largest_k(df) or check.metric) if check.metric == "pass@K" else check.metric
    keep = (df["metric"] == metric) & df["_a_role"].isin(check.a)
    if check.kind:
        keep &= df["kind"] == check.kind
    if check.b is not None:
        keep &= df["_b_role"].isin(check.b)
    return df[keep]


def with_roles(df: pd.DataFrame, roles: dict[str, tuple]) -> pd.DataFrame:
    """The rows with each side's role (`_a_role`, `_b_role`; "" where its cell declares none)."""
    a, b = sides(df)
    return df.assign(_a_role=a.map(lambda c: role_of(c, roles)), _b_role=b.map(lambda c: role_of(c, roles)))


def read_yaml(path: Path) -> dict | None:
    """A conf/ file as a mapping ({} when empty), or None when it is missing or unreadable."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return None


def roles(exp: str, conf: Path | None = None) -> dict[str, tuple]:
    """{cell label or grid name: (role, axis keys)} declared in conf/experiment/<exp>.yaml ({} when unreadable)."""
    return declared(read_yaml((conf or CONF) / "experiment" / f"{exp}.yaml") or {})


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
    out = with_roles(deciding(df), roles(exp))
    out.attrs["folder"] = str(folder)  # a rule that chooses on validation reads table.csv beside it
    return out


# ----------------------------------------------------------------------------- the tally most rules share

PREDATES = "its records predate per-prompt scores (comparisons.csv says so): rerun it"


def not_runnable(rows: pd.DataFrame) -> Verdict | None:
    """NOT_RUN when no row is named or some row's records predate per-prompt scores."""
    if rows.empty:
        return Verdict(NOT_RUN, "no row this rule names in comparisons.csv")
    if (rows["_status"] == PREDATE).any():
        return Verdict(NOT_RUN, PREDATES)
    return None


def untested(rows: pd.DataFrame) -> str:
    """'; 2 not testable, 1 not paired' for the rows that admit no test ('' when none)."""
    parts = [f"{int((rows['_status'] == s).sum())} {s}" for s in (UNTESTABLE, UNPAIRED) if (rows["_status"] == s).any()]
    return f"; {', '.join(parts)} (no test: counted as not detected)" if parts else ""


def missed(rows: pd.DataFrame) -> str:
    """'; not counted: 2 nominal only, 1 detected in its file but not after Holm ...' for tested rows not counted."""
    tested = rows[(rows["_status"] == TESTED) & (rows["_dir"] == 0)]
    holm_only = int((tested["p_bh"] <= Q).sum())
    nominal = int(((tested["p_bh"] > Q) & (tested["p_value"] < ALPHA)).sum())
    parts = [f"{nominal} nominal only"] * bool(nominal) + \
        [f"{holm_only} detected in its file but not after Holm over these rows"] * bool(holm_only)
    return f"; not counted: {', '.join(parts)}" if parts else ""


def counted(rows: pd.DataFrame) -> str:
    """How a detection was counted here: BH and Holm, or uncorrected intervals."""
    if (rows["_status"] == INTERVAL).any():
        return " (by 95% interval alone: this comparisons.csv has no p, so neither BH nor Holm applies)"
    n = int((rows["_status"] == TESTED).sum())
    return f" (counted: BH-surviving in its file and Holm-surviving over {'this row' if n == 1 else f'these {n} rows'})"


def is_uncorrected(rows: pd.DataFrame) -> bool:
    return bool((rows["_status"] == INTERVAL).any())


def as_tuple(df: pd.DataFrame) -> tuple:
    return tuple(r.drop(labels="_sign", errors="ignore") for _, r in df.iterrows())


def tally(rows: pd.DataFrame, min_models: int = 1) -> Verdict:
    """The verdict from annotated rows carrying `_sign` (+1: the claim says A above B): supported when every row
    is detected in the claimed direction, contradicted when some row is detected against it."""
    stop = not_runnable(rows)
    if stop:
        return stop
    unc = is_uncorrected(rows)
    if rows["model"].nunique() < min_models:
        return Verdict(NOT_RUN, f"{rows['model'].nunique()} model(s) run; the claim needs {min_models}",
                       as_tuple(rows), unc)
    dirs = [d * s if not _nan(d) else None for d, s in zip(rows["_dir"], rows["_sign"])]
    n, pro, con = len(dirs), dirs.count(1), dirs.count(-1)
    if dirs.count(None) == n:
        why = "; ".join(sorted({s for s in rows["_status"]}))
        return Verdict(NOT_TESTABLE, f"none of its {n} rows admits a test ({why}: each row says why)", as_tuple(rows))
    tail = counted(rows) + missed(rows) + untested(rows)
    if con:
        return Verdict(CONTRADICTED, f"{con} of {n} rows detected against the claim{tail}", as_tuple(rows), unc)
    word = SUPPORTED if pro == n else NOT_DETECTED
    return Verdict(word, f"{pro} of {n} rows detected as claimed, none against{tail}", as_tuple(rows), unc)


def named(df: pd.DataFrame, checks: tuple) -> pd.DataFrame:
    """The rows the checks name, each with its claimed sign, annotated (annotate)."""
    rows = pd.concat([select(df, c).assign(_sign=c.sign) for c in checks])
    return annotate(rows) if not rows.empty else rows.assign(_status=pd.Series(dtype=object))


def by_checks(df: pd.DataFrame, checks: tuple, min_models: int = 1) -> Verdict:
    return tally(named(df, checks), min_models)


def size(model: str) -> float | None:
    m = re.search(r"-(\d+(?:\.\d+)?)([kmb])(?:\b|-)", model.lower())
    return float(m.group(1)) * {"k": 1e3, "m": 1e6, "b": 1e9}[m.group(2)] if m else None


def ordered_models(rows: pd.DataFrame) -> list[str]:
    """The models by size parsed from their names (-0.5b, -100k, -4m), else in the file's order (ascending in
    every file)."""
    models = list(dict.fromkeys(rows["model"]))
    sizes = [size(m) for m in models]
    return models if None in sizes else [m for _, m in sorted(zip(sizes, models))]


def pts(v: float, metric: str) -> str:
    return "-" if pd.isna(v) else f"{100 * v:+.1f}" if is_percent(metric) else f"{v:+.3f}"


# ----------------------------------------------------------------------------- where a verdict came from


def budget(exp: str, conf: Path = CONF) -> dict:
    """The budget conf/experiment/<exp>.yaml sets for its runs: {'kind', 'updates', 'own'} ({} when unreadable);
    `own`: some cell overrides the budget."""
    spec = read_yaml(conf / "experiment" / f"{exp}.yaml")
    if spec is None:
        return {}
    name = next((v for d in spec.get("defaults") or [] if isinstance(d, dict)
                 for k, v in d.items() if str(k).endswith("/budget")), None)
    base = (read_yaml(conf / "budget" / f"{name}.yaml") if name else None) or {}
    merged = {**base, **(spec.get("budget") or {})}
    own = any("budget" in str(c.get("overrides", "")) for c in spec.get("cells") or [] if isinstance(c, dict))
    return {"kind": merged.get("kind"), "updates": merged.get("updates"), "own": own}


def budget_text(b: dict) -> str:
    """'budget: flops (equal FLOPs)', 'budget: updates (300 updates a run)', or ''."""
    kind = b.get("kind")
    if not kind:
        return ""
    what = {"flops": "equal FLOPs", "samples": "equal completions scored"}.get(kind, "")
    if kind == "updates" and isinstance(b.get("updates"), (int, float)):
        what = f"{int(b['updates'])} updates a run"
    own = "; some cells set their own: read the file" if b.get("own") else ""
    return f"budget: {kind}{f' ({what}{own})' if what or own else ''}"


def basis(rows: tuple, budget_line: str = "") -> str:
    """What a verdict came from: its rows' models, seeds, prompts and pairing, and the file's budget."""
    real = [r for r in rows if r.get("_average") is not True]
    if not real:
        return ""
    models = list(dict.fromkeys(str(r["model"]) for r in real))

    def span(key: str, unit: str) -> str:
        v = sorted({int(r[key]) for r in real if not _nan(r.get(key))})
        return "" if not v else f"{v[0]}{'' if len(v) == 1 else f'-{v[-1]}'} {unit}{'s' * (v[-1] != 1)}"
    pairings = list(dict.fromkeys(str(r["pairing"]) for r in real if r["pairing"] != "none"))
    parts = [f"model{'s' * (len(models) != 1)} {', '.join(models)}", span("n_seeds", "seed"),
             span("n_prompts", "test prompt"), f"paired {' and '.join(pairings)}" if pairings else "not paired",
             budget_line]
    return "; ".join(p for p in parts if p)
