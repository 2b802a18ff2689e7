"""The claims ledger's rules beyond "every deciding row detected as claimed" (harness/reporting/claims.py names
which claim each decides; harness/reporting/claim_rows.py reads and annotates the rows). Each takes an
experiment's deciding rows and its budget (claim_rows.budget) and returns a Verdict:

- averaged: "averaged over models, X improves over base" (Q1-Q3), per column, the mean of the models'
  differences with a normal-approximation interval from their rows' intervals;
- grpo_tradeoff: C1, pass@1 above base everywhere and the largest pass@k below base on a majority;
- non_superior: C8, every row's upper 95% bound below a 1-point margin;
- sequential: C9, GRPO then ES non-inferior (1-point margin) to GRPO on pass@1 and to ES on the largest pass@k;
- population: C7, NOTE-076's within-0.5-points criterion where the rows allow it;
- boundary, small_sigma: the practice record's 1.5B boundary and its alternative reading.

    python -m pytest tests/test_claims.py -q
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from harness.reporting.claim_rows import (CONF, ANTITHETIC, read_yaml, CONTRADICTED, ES_ROLE, FIXED_ALPHA_ES, GRPO_ROLE,
                                          GRPO_THEN_ES, INTERVAL, NOT_DECIDABLE, NOT_DETECTED, NOT_RUN, NOT_TESTABLE,
                                          POPULATION_ES, SIGMA_ES, SUPPORTED, TESTED, Check, Verdict, _nan, as_tuple,
                                          by_checks, counted, holm, is_uncorrected, missed, named, not_runnable,
                                          ordered_models, pts, select, sides, size, untested)
from harness.reporting.findings import p_text
from harness.reporting.stats import ALPHA, Q, Z975

BASE = "trained vs base"
MARGIN = 0.01        # C8, C9: 1 point of accuracy (a fraction)
WITHIN = 0.005       # C7: NOTE-076's 0.5 points


# ----------------------------------------------------------------------------- Q1-Q3: the average over models


def mean_interval(rows: pd.DataFrame) -> tuple[float, float, float, float]:
    """(mean, low, high, p) of the per-model differences: SE = sqrt(sum se_i^2) / k with se_i = (ci_high - ci_low)
    / (2 x 1.959964), the models independent; a normal approximation from the rows' 95% intervals."""
    k = len(rows)
    se = math.sqrt(float(((rows["ci_high"] - rows["ci_low"]) / (2 * Z975)).pow(2).sum())) / k
    mean = float(rows["difference"].mean())
    p = math.erfc(abs(mean) / se / math.sqrt(2)) if se > 0 else (0.0 if mean else 1.0)
    return mean, mean - Z975 * se, mean + Z975 * se, p


def _mean_unit(mine: pd.DataFrame, check: Check, name: str) -> pd.Series:
    """A column's mean over its models as a row of its own (quote shows it): TESTED with its normal p, or no
    average where some model's row has no interval."""
    u = pd.Series(dict(model=f"mean over {len(mine)} models ({', '.join(mine['model'])})", kind=check.kind,
                       comparison=name, metric=check.metric, pairing="average", result="", _average=True,
                       p_bh=math.nan, n_seeds=math.nan, n_prompts=math.nan, _status=TESTED))
    no_ci = mine[mine["ci_low"].isna() | mine["ci_high"].isna()]
    if no_ci.empty:
        u["difference"], u["ci_low"], u["ci_high"], u["p_value"] = mean_interval(mine)
        return u
    u["difference"], u["ci_low"], u["ci_high"], u["p_value"] = float(mine["difference"].mean()), *[math.nan] * 3
    u["_status"], u["_dir"] = "no average", math.nan
    u["_call"] = "no average: " + "; ".join(f"{r['model']} has no interval ({r['result']})"
                                            for _, r in no_ci.iterrows())
    return u


def averaged(df: pd.DataFrame, budget: dict | None = None, *, check: Check) -> Verdict:
    """Per column the rule names (ES; PPO; GRPO(8) and GRPO(30) apart): over two or more models the mean of their
    differences with its normal-approximation interval (mean_interval), counted when its Holm p over the claim's
    columns is <= 0.05; with one model that model's row (BH in its file and Holm over the columns; an interval
    alone where the file has no p). Supported when every column is detected above base, contradicted when one is
    detected below."""
    rows = named(df, (check,))
    stop = not_runnable(rows)
    if stop:
        return stop
    a, b = sides(rows)
    units, shown = [], []
    for col in dict.fromkeys(a):
        mine = rows[a == col]
        if len(mine) == 1:
            units.append(mine.iloc[0].copy())
            shown.append(units[-1])
        else:
            units.append(_mean_unit(mine, check, f"{col} vs {b[mine.index[0]]}"))
            shown += [units[-1]] + [r for _, r in mine.assign(_call="in the mean above").iterrows()]
    tested = [u["_status"] == TESTED for u in units]
    hp = holm([float(u["p_value"]) if t else math.nan for u, t in zip(units, tested)])
    m = sum(tested)
    for u, h, t in zip(units, hp, tested):
        avg = u.get("_average") is True
        if not t or u["_status"] == INTERVAL:
            continue                            # an interval alone (annotate's call), or no test (its reason)
        ok = h <= ALPHA and (avg or float(u["p_bh"]) <= Q)
        u["_dir"] = (1 if u["difference"] > 0 else -1 if u["difference"] < 0 else 0) if ok else 0
        ps = f"normal p = {p_text(u['p_value'])}" if avg else f"p = {p_text(u['p_value'])}, BH p = {p_text(u['p_bh'])}"
        over = f"Holm p = {p_text(h)} over {m} column{'s' * (m != 1)}"
        late = "not after Holm over this claim's columns"
        call = ("detected" if ok else f"p < 0.05, {late}" if avg and u["p_value"] < ALPHA else
                f"detected in its file, {late}" if not avg and u["p_bh"] <= Q else
                "nominal only" if u["p_value"] < ALPHA else "not detected")
        u["_call"] = f"{call}; {ps}, {over}"
    dirs = [None if _nan(u["_dir"]) else int(u["_dir"]) for u in units]
    n, pro, con = len(units), dirs.count(1), dirs.count(-1)
    cols = f"{n} column{'s' * (n != 1)} ({', '.join(dict.fromkeys(a))})"
    if dirs.count(None) == n:
        why = "; ".join(sorted({str(u["_status"]) for u in units}))
        return Verdict(NOT_TESTABLE, f"no column admits a test ({cols}; {why}: each says why)", tuple(shown))
    k = sorted({int((a == c).sum()) for c in dict.fromkeys(a)})
    what = (f"the mean over {k[0]} models" if k == [k[0]] and k[0] > 1 else "the one model's row" + "s" * (n != 1)
            if k == [1] else "each column's mean over its models (its row where it has one)")
    singles = pd.DataFrame([u for u in units if u.get("_average") is not True])
    tail = ((counted(singles) + missed(singles) + untested(singles)) if k == [1] else
            " (each mean: a normal approximation from its rows' 95% intervals, not in its file's BH family; Holm "
            "over the claim's columns)")
    word = CONTRADICTED if con else SUPPORTED if pro == n else NOT_DETECTED
    unc = not singles.empty and is_uncorrected(singles)
    return Verdict(word, f"{what} detected above base in {pro} of {cols}, below in {con}{tail}", tuple(shown), unc)


# ----------------------------------------------------------------------------- C1, C8, C9


def grpo_tradeoff(df: pd.DataFrame, budget: dict | None = None) -> Verdict:
    """C1 per model and GRPO column (GRPO(8) and GRPO(30) counted apart): supported when pass@1 is detected above
    base on every one and the largest pass@k below base on more than half; contradicted when pass@1 is detected
    below base on any, or the largest pass@k above base on more than half."""
    rows = named(df, (Check(BASE, GRPO_ROLE, "pass@1"), Check(BASE, GRPO_ROLE, "pass@K", -1)))
    stop = not_runnable(rows)
    if stop:
        return stop
    one, big = rows[rows["metric"] == "pass@1"], rows[rows["metric"] != "pass@1"]
    if one.empty or big.empty:
        return Verdict(NOT_RUN, "no pass@k with k > 1 in comparisons.csv" if big.empty else "no pass@1 row",
                       as_tuple(rows))
    if rows["_dir"].isna().all():
        return Verdict(NOT_TESTABLE, "none of its rows admits a test (each row says why)", as_tuple(rows))
    k = big["metric"].iloc[0]
    pairs = "models" if sides(one)[0].nunique() == 1 else "model x GRPO column pairs"
    up1, down1 = int((one["_dir"] == 1).sum()), int((one["_dir"] == -1).sum())
    upk, downk = int((big["_dir"] == 1).sum()), int((big["_dir"] == -1).sum())
    says = (f"pass@1 detected above base on {up1} of {len(one)} {pairs} (below on {down1}); {k} detected below "
            f"base on {downk} of {len(big)} (above on {upk}), against the source's 15 of 18"
            + counted(rows) + missed(rows) + untested(rows))
    word = (CONTRADICTED if down1 or upk > len(big) / 2 else
            SUPPORTED if up1 == len(one) and downk > len(big) / 2 else NOT_DETECTED)
    return Verdict(word, says, as_tuple(rows), is_uncorrected(rows))


def _bounds(rows: pd.DataFrame, key: str) -> str:
    return ", ".join(f"{r['model']} {pts(r[key], r['metric'])}" for _, r in rows.iterrows())


def non_superior(df: pd.DataFrame, budget: dict | None = None, *, margin: float = MARGIN) -> Verdict:
    """C8, a claim of no gain, tested as non-superiority with a 1-point margin: supported when every model's "ES
    antithetic vs ES full" greedy row has its upper 95% bound below +1 point; contradicted when a row is detected
    above (BH in its file, Holm over these rows); else not detected."""
    rows = named(df, (Check("variant vs full ES", ANTITHETIC, "greedy_acc", b=ES_ROLE),))
    stop = not_runnable(rows)
    if stop:
        return stop
    has = rows["ci_high"].notna()
    if not has.any():
        return Verdict(NOT_TESTABLE, "no row has an interval (each row says why)", as_tuple(rows))
    under = int((rows["ci_high"] < margin).sum())
    above = int((rows["_dir"] == 1).sum())
    says = (f"upper 95% bounds ({_bounds(rows, 'ci_high')} points) below the +{100 * margin:g}-point margin on {under} of "
            f"{len(rows)} models; {above} detected above full ES{counted(rows)}{missed(rows)}{untested(rows)}")
    word = CONTRADICTED if above else SUPPORTED if has.all() and under == len(rows) else NOT_DETECTED
    return Verdict(word, says, as_tuple(rows), is_uncorrected(rows))


def sequential(df: pd.DataFrame, budget: dict | None = None, *, margin: float = MARGIN) -> Verdict:
    """C9: "GRPO then ES" against GRPO on pass@1 and against full ES on the largest pass@k, non-inferiority with a
    1-point margin: supported when every such row's lower 95% bound is above -1 point; contradicted when one is
    detected below (BH in its file, Holm over these rows); not decidable from comparisons when a comparison is
    missing (comparisons.py pairs a sequential cell with base and with full ES, never with an RL cell)."""
    checks = {"'GRPO then ES vs GRPO' row on pass@1": Check("", GRPO_THEN_ES, "pass@1", b=GRPO_ROLE),
              "'GRPO then ES vs ES full' row on the largest pass@k": Check("", GRPO_THEN_ES, "pass@K", b=ES_ROLE)}
    seq = df[df["_a_role"].isin(GRPO_THEN_ES)] if not df.empty else df
    if seq.empty:
        return Verdict(NOT_RUN, "no GRPO then ES row in comparisons.csv")
    rows = named(df, tuple(checks.values()))
    stop = not_runnable(rows) if not rows.empty else None
    if stop:
        return stop
    models = list(dict.fromkeys(seq["model"]))
    gaps = []
    for what, c in checks.items():
        have = set(select(df, c)["model"])
        lack = [m for m in models if m not in have]
        if lack:
            gaps.append(f"no {what}" + ("" if len(lack) == len(models) else f" for {', '.join(lack)}"))
    below = int((rows["_dir"] == -1).sum()) if not rows.empty else 0
    unc = is_uncorrected(rows) if not rows.empty else False
    shown = as_tuple(rows) if not rows.empty else ()
    if below:
        return Verdict(CONTRADICTED, f"{below} of {len(rows)} rows detected below{counted(rows)}"
                       + (f"; {'; '.join(gaps)}" if gaps else ""), shown, unc)
    over = int((rows["ci_low"] > -margin).sum()) if not rows.empty else 0
    lows = (f"lower 95% bounds {_bounds(rows, 'ci_low')} points, above the -{100 * margin:g}-point margin on {over} of {len(rows)}"
            if not rows.empty else "no row")
    if gaps:
        grpo = bool(df["_a_role"].isin(GRPO_ROLE).any() or df["_b_role"].isin(GRPO_ROLE).any())
        why = ("comparisons.py has no kind that pairs a sequential cell with an RL cell (only with base and with "
               "full ES)" + ("" if grpo else ", and this file has no GRPO cell"))
        return Verdict(NOT_DECIDABLE, f"{'; '.join(gaps)}: {why}; none detected below ({lows})", shown, unc)
    if rows["ci_low"].isna().all():
        return Verdict(NOT_TESTABLE, "no row has an interval (each row says why)", shown)
    word = SUPPORTED if over == len(rows) else NOT_DETECTED
    return Verdict(word, f"{lows}; none detected below"
                   + counted(rows) + missed(rows) + untested(rows), shown, unc)


# ----------------------------------------------------------------------------- C7, the 1.5B boundary


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


def population(df: pd.DataFrame, budget: dict | None = None, *, within: float = WITHIN) -> Verdict:
    """C7 with NOTE-076's criterion where the rows allow it: on a model N < 30 suffices when its difference to N=30
    has its lower 95% bound above -0.5 points, and falls short when detected below N=30. Supported when some N
    suffices on the largest model and falls short on the smallest, contradicted the other way round. When no N
    suffices on any model the criterion cannot be applied and the weaker reading decides: some N < 30 detected
    below N=30 on the smallest model and none on the largest (not detecting a loss is not being within 0.5)."""
    rows = named(df, (Check("population N vs N=30", POPULATION_ES, "greedy_acc"),))
    stop = not_runnable(rows)
    if stop:
        return stop
    models = ordered_models(rows)
    n = sides(rows)[0].str.extract(r"population=(\d+)")[0].astype(int)
    ok, short = (rows["ci_low"] > -within).fillna(False), rows["_dir"] == -1
    kind = (budget or {}).get("kind")
    spent = {"flops": "FLOPs", "samples": "completions scored"}.get(kind, kind or "its budget")
    matched = ("" if kind == "updates" else f"; this file matches {spent} where NOTE-076 matches updates: a smaller N "
               "runs more iterations here")

    def ns(m, mask) -> set:
        return set(n[(rows["model"] == m) & mask])

    def listed(s: set) -> str:
        return "/".join(str(v) for v in sorted(s)) or "none"
    pt = f"{100 * within:g}"
    small, large = models[0], models[-1]
    if ok.any():
        says = ", ".join(f"{m}: N = {listed(ns(m, ok))} within {pt} points, N = {listed(ns(m, short))}"
                         " detected below N=30" for m in models)
        pro, con = ns(large, ok) & ns(small, short), ns(small, ok) & ns(large, short)
        word = NOT_DETECTED if len(models) == 1 else SUPPORTED if pro and not con else CONTRADICTED if con and not pro \
            else NOT_DETECTED
        says += f" (within {pt} points: the lower 95% bound above -{pt} points)"
    else:
        per = {m: _per_model(rows, m) for m in models}
        worse = {m: bool(ns(m, short)) for m in models}
        says = ", ".join(f"{m}: {'an N < 30 detected below N=30' if worse[m] else 'no N < 30 detected below N=30'}"
                         f"{per[m][1] if not worse[m] else ''}" for m in models)
        s, b = worse[small], worse[large]
        word = SUPPORTED if s and not b else CONTRADICTED if b and not s else NOT_DETECTED
        lowest = pts(rows["ci_low"].min(), "greedy_acc")
        says += (f"; NOTE-076's criterion (within {pt} points of N=30) cannot be applied: no N < 30 has its lower "
                 f"95% bound above -{pt} points on any model (lowest {lowest} points), so the weaker reading decides "
                 "(a loss detected on the smallest model, none on the largest; not detecting a loss is not being "
                 f"within {pt} points)")
    says = (says if len(models) > 1 else f"one model run ({says})") + counted(rows) + matched
    return Verdict(word, says, as_tuple(rows), is_uncorrected(rows))


def boundary(df: pd.DataFrame, budget: dict | None = None) -> Verdict:
    """Per model, + if some ES row is detected above base (greedy), - if none is and some is detected below.
    Real checkpoints (>= 100M): contradicted by a + below 1.5B or a - above it. The zoo stands in for the size
    axis: contradicted by a + at a smaller size than a -; supported when every - sits below every + (both seen)."""
    rows = named(df, (Check(BASE, SIGMA_ES, "greedy_acc"),))
    stop = not_runnable(rows)
    if stop:
        return stop
    models = ordered_models(rows)
    per = {m: _per_model(rows, m) for m in models}
    sign = {m: v[0] for m, v in per.items()}
    pos = [i for i, m in enumerate(models) if sign[m] == 1]
    neg = [i for i, m in enumerate(models) if sign[m] == -1]
    says = ", ".join(f"{m} {'+-0'[[1, -1, 0].index(sign[m])]}{per[m][1]}" for m in models)
    unc = is_uncorrected(rows)
    if all((size(m) or 0) >= 1e8 for m in models):
        bad = [m for m in models if (sign[m] == 1 and size(m) < 1.5e9) or (sign[m] == -1 and size(m) > 1.5e9)]
        if bad:
            return Verdict(CONTRADICTED, f"per model ({says}){counted(rows)}: {', '.join(bad)} on the wrong side of "
                           "1.5B", as_tuple(rows), unc)
    elif pos and neg and min(pos) < max(neg):
        return Verdict(CONTRADICTED, f"per model ({says}){counted(rows)}: a detected gain at a smaller size than a "
                       "detected loss", as_tuple(rows), unc)
    word = SUPPORTED if pos and neg else NOT_DETECTED
    return Verdict(word, f"per model ({says}){counted(rows)}"
                   + ("" if pos and neg else ": needs a detected loss and a detected gain"), as_tuple(rows), unc)


def reference_sigma(model: str, conf: Path = CONF) -> float | None:
    """The model's own fixed ES sigma (conf/model/<model>.yaml es_sigma): the paper's 1e-3 on real checkpoints,
    the zoo's 1e-2 on the zoo and ladder."""
    spec = read_yaml(conf / "model" / f"{model}.yaml") or {}
    return float(spec["es_sigma"]) if "es_sigma" in spec else None


def validation(df: pd.DataFrame) -> dict[tuple[str, str], float]:
    """{(model, column label): validation score} from the table.csv beside the comparisons (claim_rows.load puts
    its folder in df.attrs); a row the file did not score on validation is absent."""
    path = Path(df.attrs.get("folder", "")) / "table.csv"
    if not df.attrs.get("folder") or not path.is_file():
        return {}
    t = pd.read_csv(path)
    if "val" not in t:
        return {}
    return {(m, c): float(v) for m, c, v in zip(t["model"], t["column"], t["val"]) if not pd.isna(v)}


def small_sigma(df: pd.DataFrame, budget: dict | None = None) -> Verdict:
    """"Improvement is accessible at 0.5B provided sigma is small enough", read as: on the smallest model, the ES
    row (the sweep's ES cell, not "ES alpha tied") whose sigma is at or below the model's own fixed sigma and
    that validation chooses, against base (greedy). Its BH-adjusted p is over its file; Holm over one row changes
    nothing. Without validation scores for those rows no sigma can be chosen honestly (choosing on test is
    choosing after looking): not testable, the command to fix it named."""
    check = Check(BASE, FIXED_ALPHA_ES, "greedy_acc")
    val = validation(df)
    rows = select(df, check)
    sig = sides(rows)[0].str.extract(r"sigma=([0-9.eE+-]+)")[0].astype(float) if not rows.empty else None
    if rows.empty or sig.isna().all():
        return Verdict(NOT_RUN, "no ES row with a sigma in comparisons.csv")
    model = ordered_models(rows)[0]
    ref = reference_sigma(model)
    keep = (rows["model"] == model) & (sig <= (ref if ref is not None else sig.min()) * (1 + 1e-9))
    rows, sig = rows[keep], sig[keep]
    if rows.empty:
        return Verdict(NOT_RUN, f"{model}: no ES row at or below its fixed sigma {ref:g}")
    col = sides(rows)[0]
    scored = {i: val.get((model, c)) for i, c in col.items()}
    ref_text = f"{model}'s fixed sigma {ref:g}" if ref is not None else "the smallest sigma (no fixed sigma found)"
    if any(v is None for v in scored.values()):
        return Verdict(NOT_TESTABLE, f"{model}: sigma {', '.join(f'{x:g}' for x in sorted(set(sig)))} (at or below "
                       f"{ref_text}) were not scored on validation, so none can be chosen on it; choosing on test "
                       "would be choosing after looking. Rerun with eval_splits=[validation,test] on the ES cell",
                       as_tuple(rows))
    best = max(scored, key=lambda i: (scored[i], -sig[i]))  # ties: the smaller sigma, the claim's side
    v = by_checks(rows.loc[[best]], (check,))
    chose = (f"{model}: sigma {sig[best]:g} chosen on validation ({100 * scored[best]:.1f}) among "
             f"{', '.join(f'{x:g}' for x in sorted(set(sig)))} (at or below {ref_text}); ")
    return Verdict(v.word, chose + v.detail, v.rows, v.uncorrected)
