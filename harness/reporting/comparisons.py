"""Paired comparisons of an experiment's rows, computed from its records (the tests: reporting/stats.py).

The tables put intervals side by side; this pairs. Input: aggregate()'s output (reporting/aggregate.py),
so the rows compared are the main table's rows, RL grids already reduced to their point chosen on
validation. Per model, these comparisons (A vs B, difference = A - B) on the test split:

- trained vs base: every successful trained row vs the model's untrained row (trains=False);
- ES vs RL: the ES row vs each RL grid's chosen row, or, when the model has no RL grid, vs each row of an
  RL method (GRPO, PPO: columns compared without selection, as in Table 2). The ES row is the full-ES
  reference below when the model has one, else every row of an ES method (e.g. each sigma of a sweep);
- variant vs full ES: the full-ES reference is the fixed cell (no grid, no axes) of an ES method that the
  experiment names with `es_reference: <cell label>`, else the one whose label the method's
  facts.reference_label matches (ES: exactly "ES", or starting with "ES full"); every other trained fixed
  cell of the model without axes (ES variants, GRPO-then-ES, ...) is compared to it. No such cell: no
  variant comparisons;
- reference points: rows of one cell with an axis over a setting the method names in facts.reference_points,
  each vs the row at that value (ES: population N vs N=30).
A row's method is known by its family (MethodFacts.family, harness/core/method_facts.py: es, rl, reference,
composite), read from the facts its records keep (Record.facts: a plugin's rows keep their pairs with the
plugin off PYTHONPATH), from its `_target_`'s declaration for records older than that, or through its name
and the conf/method options (a runs.csv); no method name or label is matched here. A trained run whose
family none of these finds is named in findings.md (and the report's warnings), never dropped silently.

Every comparison and metric (greedy_acc, pass@k, maj@k: whichever the records have; and the experiment's
`summary_metrics`, e.g. mean_reward and kl_to_base) gets (the tests: harness/reporting/stats.py):
- paired by seed, with >= 2 paired seeds: a Student-t 95% interval and t-test over the per-seed differences
  of the run means (seeds matched by value; an untrained row that ran once, unseeded, is the partner of every
  seed). This is the row's test: the seed is the unit of replication, and at the seed counts experiments use
  only this test holds its level (docs/architecture.md#calibration, results/bench/calibration.json);
- paired by prompt, each side's per-prompt scores averaged over its successful seeds first. 0/1 outcomes
  (greedy correctness of one run a side): the exact McNemar test on the prompts that changed gives p,
  Newcombe's paired score interval the 95% interval. Other scores: a paired bootstrap over the same test
  prompts, p from the same resamples, resampled until each bound's Monte-Carlo error is under 0.1 point.
  With one seed a side this is the test, and says it speaks to these runs, not to another seed; with two or
  more it is printed as descriptive, beside a crossed bootstrap of seeds and prompts, neither in m;
- one seed on one side and several on the other (both trained): refused, "not paired", in one line.
Benjamini-Hochberg at q = 0.05 runs over every tested row (m of them): a difference is `detected` only when
it survives, `nominal only` when p < 0.05 does not survive, otherwise "not detected". Not testable, and not
in m: columns identical on every
prompt (0 vs 0), two constant columns of a score that is not 0/1, and a quantity that is 0 by definition on
the base (kl_to_base: the base's distance to itself). Per-seed differences that are all equal give a
zero-width Student-t interval, which is not evidence: that row is "not paired" and says why. Records made
before per-prompt scores were kept get a row saying so, never an unpaired substitute. Runs evaluated on
different test prompt sets are refused (PromptSetMismatch, one line); the report writes that line instead
of the comparisons.

Written by report.py: comparisons.md, comparisons.csv, findings.md (reporting/findings.py: the multiplicity
header, then detected, nominal only and not detected rows, each with its interval and p).

From a committed runs.csv (no records): `python -m harness.reporting.comparisons results/<exp>/runs.csv`
(or comparisons_from_runs_csv(path, out_dir)) writes the same three files from the runs table alone
(one row per run, its test means): the same rows (points_frame and choose of reporting/aggregate.py,
so grids are reduced to their point chosen on validation exactly as the report does), the same
pairs, paired by seed only (the Student-t interval and t-test above over the per-seed differences of run
means), Benjamini-Hochberg over those rows; the file headers and every row say so. A comparison with fewer
than 2 paired seeds is "not paired", never an unpaired substitute.

    python -m pytest tests/test_comparisons.py tests/test_comparisons_runs_csv.py tests/test_stats.py -q
"""
from __future__ import annotations

import argparse
import ast
import math
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from harness.core.atomic import write_text_atomic
from harness.core.errors import UserError
from harness.core.method_facts import ES, RL, MethodFacts, declared_by_name, record_facts, unknown_family
from harness.core.records import Manifest, Record
from harness.evaluation.metrics import per_prompt_values
from harness.reporting import stats
from harness.reporting.aggregate import NO_UPDATE, choose, metric_names, points_frame, t975
from harness.reporting.endpoints import from_manifest
from harness.reporting.findings import (BOOTSTRAP, CROSSED, DESCRIPTIVE, DETECTED, MCNEMAR, NOMINAL,
                                        NOT_DETECTED, STUDENT, comparisons_markdown, counts, findings_markdown, fmt)
from harness.reporting.format import is_percent, isnan
from harness.reporting.placebo import placebo_pairs
from harness.reporting.update_claims import with_claims

N_BOOT = stats.N_BOOT
SEED = 0
PAIRED_METRICS = ("greedy_acc", "pass@", "maj@")
ZERO_AT_BASE = ("kl_to_base",)   # measured against the base: the base's own value is 0 by definition
PER_PROMPT_SINCE = "evaluation recorded per-prompt scores"
DEGENERATE = ("not paired by seed: its {n} per-seed differences are all {d}, so a Student-t interval has no "
              "spread to estimate (zero width); more seeds are needed")
NO_PER_PROMPT = "no per-prompt scores in these records (made before {since}); rerun to pair"
ONE_SEED = "one seed: paired by prompt only; speaks to these runs, not to another seed"
MIXED_SEEDS = ("not paired: {one} has one seed and the other side {n}; a seed-level test needs the same seeds on "
               "both sides (run them), a prompt-level one would pass one run off as the seeds' mean")
NOT_TESTABLE = "not testable: {why}"
FILES = ("comparisons.md", "comparisons.csv", "findings.md")
COLUMNS = ["model", "kind", "comparison", "metric", "difference", "ci_low", "ci_high", "n_seeds", "n_prompts",
           "pairing", "result", "note", "p_value", "p_bh", "n_up", "n_down", "n_boot", "mc_error"]


class PromptSetMismatch(UserError, ValueError):
    """Two runs to be paired were evaluated on different test prompt sets."""


def paired_bootstrap(a, b, n_boot: int = N_BOOT, seed: int = SEED, level: float = 0.95) -> tuple[float, float, float]:
    """(mean of a - b, low, high): percentile bootstrap over prompts, both sides resampled with the same ids
    (stats.paired_bootstrap, which also gives p and the bounds' Monte-Carlo error)."""
    r = stats.paired_bootstrap(np.asarray(a, dtype=float) - np.asarray(b, dtype=float), seed, level, n_boot)
    return r.mean, r.low, r.high


def t_interval(diffs) -> tuple[float, float, float]:
    """(mean, low, high): 95% Student-t interval of the mean of per-seed differences (>= 2 of them)."""
    d = np.asarray(diffs, dtype=float)
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    half = t975(d.size - 1) * sd / math.sqrt(d.size)
    return mean, mean - half, mean + half


def multiplicity(df: pd.DataFrame, q: float = stats.Q) -> pd.DataFrame:
    """Benjamini-Hochberg over the rows with a p (the file's m tests): each gets its adjusted p and its result,
    `detected` (survives), `nominal only` (p < 0.05, does not survive) or `not detected`."""
    df = df.astype({"result": object})
    tested = df["p_value"].to_numpy(dtype=float).copy()
    tested[(df["result"] == DESCRIPTIVE).to_numpy()] = np.nan  # prompt-level rows of multi-seed comparisons
    adj, survives = stats.benjamini_hochberg(tested, q)
    df["p_bh"] = adj
    for i, (p, keep) in enumerate(zip(tested, survives)):
        if not isnan(p):
            df.iat[i, df.columns.get_loc("result")] = DETECTED if keep else NOMINAL if p < stats.ALPHA else NOT_DETECTED
    return df


def _run_rows(row: pd.Series, runs: pd.DataFrame) -> pd.DataFrame:
    """The successful runs (rows of the runs frame) of a main-table row (a grid row: its chosen point's
    runs), matched on model, cell and grid point (labels may carry notes)."""
    point = row.get("point") if isinstance(row.get("point"), dict) else {}
    same = [(m == row["model"] and c == row["cell"] and (p if isinstance(p, dict) else {}) == point
             and s == "ok") for m, c, p, s in zip(runs["model"], runs["cell"], runs["point"], runs["status"])]
    return runs[same]


def _runs(row: pd.Series, runs: pd.DataFrame, by_path: dict[str, Record]) -> list[tuple[int | None, Record]]:
    """(seed, record) of every successful run of a main-table row (see _run_rows)."""
    out = []
    for _, r in _run_rows(row, runs).iterrows():
        rec = by_path.get(r.get("path"))
        if rec is not None:
            out.append((None if isnan(r.get("seed")) else int(r["seed"]), rec))
    return out


def _name(row: pd.Series) -> str:
    if isinstance(row.get("grid"), str):
        return f"{row['column']} (chosen on validation: {row.get('point_label') or row['label']})"
    return str(row["label"])


def _facts(row: pd.Series, known: dict[str, MethodFacts] | None) -> MethodFacts | None:
    """The declared facts of a row's method: `known` ({method name: facts} its records keep, known_facts), else
    by its name among the conf/method options (a runs.csv, which holds the name alone)."""
    name = row.get("method")
    if not isinstance(name, str):
        return None
    return (known or {}).get(name) or declared_by_name(name)


def known_facts(records: list[Record]) -> tuple[dict[str, MethodFacts], list[str]]:
    """({method name: its data facts} from the records (record_facts: kept in the record, else its `_target_`'s
    declaration), [one line per method whose family none of that finds, for a trained run])."""
    known, unknown = {}, {}
    for r in records:
        facts = record_facts(r) if r.method else None
        if facts is not None:
            known.setdefault(r.method, facts)
        elif r.method and r.trains:
            unknown.setdefault(r.method, unknown_family(r))
    return known, [line for name, line in unknown.items() if name not in known]


def rows_by_name(runs: pd.DataFrame, select_by: str = "greedy_acc") -> dict[tuple[str, str], pd.Series]:
    """{(model, side name as comparisons.csv writes it): main-table row} of a runs frame, grids at their point
    chosen on validation as the report chose it: how a committed row's sides are found again in runs.csv."""
    main, _ = choose(points_frame(runs, select_by))
    return {(r["model"], _name(r)): r for _, r in main[main["status"] == "ok"].iterrows()}


def _family(row: pd.Series, known: dict[str, MethodFacts] | None) -> str | None:
    facts = _facts(row, known)
    return facts.family if facts else None


def _is_es_reference(row: pd.Series, named: str | None = None, known: dict[str, MethodFacts] | None = None) -> bool:
    label, facts = str(row["label"]), _facts(row, known)
    if facts is None or facts.family != ES or isinstance(row.get("grid"), str) or row.get("point"):
        return False
    if named:
        return label == named
    return bool(facts.reference_label) and re.fullmatch(facts.reference_label, label) is not None


def _reference_pairs(cell_rows: list[pd.Series], known: dict[str, MethodFacts] | None
                     ) -> list[tuple[str, pd.Series, pd.Series]]:
    """Rows of one cell over an axis the method names in facts.reference_points, each vs the row at that value."""
    def points(row) -> dict:
        facts = _facts(row, known)
        return dict(facts.reference_points or {}) if facts else {}
    pts = [(k.split(".")[-1], v, r, points(r)) for r in cell_rows if isinstance(r.get("point"), dict)
           for k, v in r["point"].items()]
    pts = [(s, v, r, p[s]) for s, v, r, p in pts if s in p]
    out = []
    for setting in dict.fromkeys(s for s, *_ in pts):
        value = next(at for s, _, _, at in pts if s == setting)
        ref = next((r for s, v, r, _ in pts if s == setting and v == value), None)
        if ref is not None:
            out += [(f"{setting} N vs N={value}", r, ref) for s, v, r, _ in pts if s == setting and r is not ref]
    return out


def paired_metrics(present: list[str], summary: list[str]) -> list[str]:
    """Accuracy metrics (PAIRED_METRICS), then the experiment's own summary metrics (e.g. conciseness's
    mean_reward and kl_to_base), each once and only where the runs measured it."""
    out = [m for m in present if m.startswith(PAIRED_METRICS)]
    return out + [m for m in summary if m in present and m not in out]


def pairs(main: pd.DataFrame, es_reference: str | None = None, manifest: Manifest | None = None,
          known: dict[str, MethodFacts] | None = None) -> list[tuple[str, pd.Series, pd.Series]]:
    """(kind, A row, B row) for every comparison of the module docstring, per model, successful rows only;
    `es_reference`: the full-ES cell's label when the experiment names it; `manifest`: the cells' overrides,
    which pair each placebo with its ES twin (reporting/placebo.py); `known`: {method name: facts} from the
    records (known_facts; else the conf/method options say, by name). A placebo is compared with base and with its twin
    only: it is ES's null, not another ES to set against RL or the full-ES reference."""
    placebo = placebo_pairs(main, manifest)
    placebo_cells = {(b["model"], b["cell"]) for _, _, b in placebo}
    out = []
    ok = main[main["status"] == "ok"]
    for model in dict.fromkeys(ok["model"]):
        rows = [r for _, r in ok[ok["model"] == model].iterrows()]
        base = next((r for r in rows if not bool(r.get("trains", True))), None)
        nulls = [r for r in rows if (model, r["cell"]) in placebo_cells]
        trained = [r for r in rows if bool(r.get("trains", True)) and (model, r["cell"]) not in placebo_cells]
        if base is not None:
            out += [("trained vs base", r, base) for r in trained + nulls]
        ref = next((r for r in trained if _is_es_reference(r, es_reference, known)), None)
        rl = [r for r in trained if isinstance(r.get("grid"), str)]
        if not rl:  # RL as plain columns, no grid (Table 2: one GRPO run per beta, no selection): each is a side
            rl = [r for r in trained if _family(r, known) == RL and not isinstance(r.get("grid"), str)]
        es = [ref] if ref is not None else [r for r in trained if _family(r, known) == ES
                                            and not isinstance(r.get("grid"), str)]
        out += [("ES vs RL", e, g) for e in es for g in rl]
        if ref is not None:
            out += [("variant vs full ES", r, ref) for r in trained if r is not ref and all(r is not g for g in rl)
                    and not isinstance(r.get("grid"), str) and not r.get("point")]
        for cell in dict.fromkeys(r["cell"] for r in trained):
            out += _reference_pairs([r for r in trained if r["cell"] == cell], known)
    return out + placebo


def _scores(runs: list[tuple[int | None, Record]], metric: str) -> tuple[list | None, Record | None]:
    """([(seed, prompt set id, per-prompt scores)] of the runs, None) ; (None, a run without per-prompt scores);
    ([], None) when a run never measured `metric` (e.g. a greedy-only run: nothing to pair)."""
    out = []
    for seed, rec in runs:
        entry = rec.metrics.get("test", {}).get(metric)
        if entry is None:
            return [], None
        values = per_prompt_values(entry.to_dict(), metric)
        if values is None or entry.prompts is None:
            return None, rec
        out.append((seed, entry.prompts, values))
    return out, None


def _seed_diffs(a: list, b: list, b_once: bool) -> list[float]:
    """Per-seed differences of run means (seeds matched; `b_once`: B's single run partners every seed)."""
    def by_seed(side):
        seeds: dict = {}
        for seed, _, v in side:
            seeds.setdefault(seed, []).append(float(v.mean()))
        return {s: float(np.mean(m)) for s, m in seeds.items()}
    sa, sb = by_seed(a), by_seed(b)
    if b_once and len(sb) == 1:
        only = next(iter(sb.values()))
        return [m - only for s, m in sa.items()]
    return [sa[s] - sb[s] for s in sa if s in sb]


def untestable(ma: np.ndarray, mb: np.ndarray, metric: str, b_is_base: bool) -> str:
    """Why A vs B on these per-prompt columns admits no test ('' when it does): nothing in them can differ."""
    def const(c):
        return float(np.ptp(c)) == 0.0
    unit = " points" if is_percent(metric) else ""
    if np.array_equal(ma, mb):
        same = f"both {fmt(ma[0], metric).lstrip('+')}{unit} on all {ma.size} prompts" if const(ma) else \
            "the same value on each prompt"
        return f"the two columns are identical ({same}): no test can find a difference"
    if metric in ZERO_AT_BASE and b_is_base and const(mb) and mb[0] == 0:
        return (f"the base's {metric} is 0 by definition (its distance to itself), so the difference is A's own "
                f"{metric}, above 0 after any update; read A's value in table.md")
    if const(ma) and const(mb) and not stats.is_binary(ma, mb):
        return "both columns are constant: the differences have no spread to resample"
    return ""


def _by_prompt(base: dict, ma: np.ndarray, mb: np.ndarray, b_is_base: bool, seeds: int, note: str,
               n_boot: int, seed: int) -> dict:
    """The row paired by prompt: exact McNemar with Newcombe's interval for 0/1 columns, else the bootstrap."""
    row = {**base, "n_seeds": seeds, "n_prompts": len(ma), "note": note, "result": ""}
    why = untestable(ma, mb, base["metric"], b_is_base)
    if why:
        return {**row, "difference": float(np.mean(ma - mb)), "ci_low": math.nan, "ci_high": math.nan,
                "pairing": "none", "result": NOT_TESTABLE.format(why=why), "p_value": math.nan}
    if stats.is_binary(ma, mb):
        both, up, down, neither = stats.discordant(ma, mb)
        d, lo, hi = stats.newcombe_paired(both, up, down, neither)
        return {**row, "difference": d, "ci_low": lo, "ci_high": hi, "pairing": MCNEMAR,
                "p_value": stats.mcnemar_exact(up, down), "n_up": up, "n_down": down}
    r = stats.paired_bootstrap(ma - mb, seed, n_boot=n_boot)
    return {**row, "difference": r.mean, "ci_low": r.low, "ci_high": r.high, "pairing": BOOTSTRAP,
            "p_value": r.p, "n_boot": r.n_boot, "mc_error": r.mc_error}


def compare(kind: str, a_row: pd.Series, b_row: pd.Series, runs: pd.DataFrame, by_path: dict, metric: str,
            n_boot: int = N_BOOT, seed: int = SEED) -> list[dict]:
    """The comparison rows (paired by prompt; by seed when >= 2 seeds pair) of A vs B on `metric`; each
    testable row has its p (the result is set by multiplicity(), over the whole file)."""
    base = dict(model=a_row["model"], kind=kind, comparison=f"{_name(a_row)} vs {_name(b_row)}", metric=metric)
    (a, old_a), (b, old_b) = _scores(_runs(a_row, runs, by_path), metric), _scores(_runs(b_row, runs, by_path), metric)
    if a == [] or b == []:
        return []
    if a is None or b is None:
        old = old_a or old_b
        made = f"{PER_PROMPT_SINCE}; this one at git {(old.git_sha or 'unknown')[:12]}"
        return [{**base, "difference": math.nan, "ci_low": math.nan, "ci_high": math.nan, "n_seeds": None,
                 "n_prompts": None, "pairing": "none", "result": NO_PER_PROMPT.format(since=made), "note": ""}]
    ids = {(p, len(v)) for _, p, v in a + b}
    if len(ids) > 1:
        (p1, n1), (p2, n2) = sorted(ids)[:2]
        raise PromptSetMismatch(
            f"refusing to pair {base['comparison']} ({a_row['model']}, {metric}): its runs were evaluated on different "
            f"test prompt sets ({p1}, {n1} prompts vs {p2}, {n2} prompts); evaluate every run on the same task, split "
            "and eval.n_prompts")
    ma = np.mean([v for _, _, v in a], axis=0)
    mb = np.mean([v for _, _, v in b], axis=0)
    b_is_base = not bool(b_row.get("trains", True))
    na, nb = len({s for s, *_ in a}), len({s for s, *_ in b})
    if not b_is_base and min(na, nb) == 1 and max(na, nb) > 1:
        return [{**base, "difference": float(np.mean(ma - mb)), "ci_low": math.nan, "ci_high": math.nan,
                 "n_seeds": min(na, nb), "n_prompts": len(ma), "pairing": "none", "note": "",
                 "result": MIXED_SEEDS.format(one="A" if na == 1 else "B", n=max(na, nb)), "p_value": math.nan}]
    diffs = _seed_diffs(a, b, b_once=b_is_base)
    seeds = max(na, len(diffs))
    if len(diffs) < 2:
        return [_by_prompt(base, ma, mb, b_is_base, seeds, ONE_SEED, n_boot, seed)]
    prompt_row = _by_prompt(base, ma, mb, b_is_base, seeds, "seeds averaged per prompt first", n_boot, seed)
    if metric in ZERO_AT_BASE and b_is_base and prompt_row["pairing"] == "none":
        return [prompt_row]
    # the seed is the unit of replication: the seed-level row is the test; prompt-level rows describe
    rows = [_by_seed(base, diffs, len(ma), "per-seed differences of run means")]
    d = _seed_matrix(a, b, b_once=b_is_base)
    if prompt_row["pairing"] != "none" and d is not None and float(np.ptp(d)) > 0:
        rows.append(_descriptive(_crossed(base, d, n_boot, seed)))
    rows.append(_descriptive(prompt_row))
    return rows


def _descriptive(row: dict) -> dict:
    """A prompt-level row of a multi-seed comparison: shown with its interval and p, never a test (not in m)."""
    return row if row["pairing"] == "none" else {**row, "result": DESCRIPTIVE}


def _seed_matrix(a: list, b: list, b_once: bool) -> np.ndarray | None:
    """Seeds x prompts differences A - B (seeds matched; `b_once`: B's single run partners every seed);
    None with fewer than two seeds."""
    def by_seed(side):
        seeds: dict = {}
        for s, _, v in side:
            seeds.setdefault(s, []).append(np.asarray(v, dtype=float))
        return {s: np.mean(vs, axis=0) for s, vs in seeds.items()}
    sa, sb = by_seed(a), by_seed(b)
    if b_once and len(sb) == 1:
        only = next(iter(sb.values()))
        rows = [v - only for v in sa.values()]
    else:
        rows = [sa[s] - sb[s] for s in sa if s in sb]
    return np.array(rows) if len(rows) >= 2 else None


def _crossed(base: dict, d: np.ndarray, n_boot: int, seed: int) -> dict:
    """The row paired by seed and prompt: a crossed bootstrap (both sources of variance resampled)."""
    r = stats.crossed_bootstrap(d, seed, n_boot=n_boot)
    few = f"; {d.shape[0]} seeds: few to resample, the interval is rough" if d.shape[0] <= 3 else ""
    return {**base, "difference": r.mean, "ci_low": r.low, "ci_high": r.high, "n_seeds": d.shape[0],
            "n_prompts": d.shape[1], "pairing": CROSSED, "result": "", "p_value": r.p, "n_boot": r.n_boot,
            "mc_error": r.mc_error, "note": "seeds and prompts resampled independently" + few}


def _by_seed(base: dict, diffs: list[float], n_prompts, note: str) -> dict:
    """The Student-t row over per-seed differences; identical differences (e.g. +1 prompt in each of two
    seeds) leave no spread to estimate, and a zero-width interval is not evidence: that row is not paired."""
    d, lo, hi = t_interval(diffs)
    if float(np.std(diffs)) == 0.0:
        each = fmt(d, base["metric"]) + (" points" if is_percent(base["metric"]) else "")
        return {**base, "difference": d, "ci_low": math.nan, "ci_high": math.nan, "n_seeds": len(diffs),
                "n_prompts": n_prompts, "pairing": "none", "note": note, "p_value": math.nan,
                "result": DEGENERATE.format(n=len(diffs), d=each)}
    if len(diffs) <= 3:  # a t-interval over 2-3 values is all assumption
        note += f"; {len(diffs)} seeds: the interval leans on normality"
    return {**base, "difference": d, "ci_low": lo, "ci_high": hi, "n_seeds": len(diffs), "n_prompts": n_prompts,
            "pairing": STUDENT, "result": "", "note": note, "p_value": stats.t_test(diffs)}


def comparisons(agg: dict, n_boot: int = N_BOOT, seed: int = SEED) -> pd.DataFrame:
    """Every comparison row of an aggregated experiment (aggregate()'s output), Benjamini-Hochberg over the
    rows with a p; raises PromptSetMismatch."""
    main, runs = agg["main"], agg["runs"]
    if main.empty or "status" not in main:
        return pd.DataFrame(columns=COLUMNS)
    by_path = {r.path: r for r in agg["records"] if r.path}
    man = agg.get("manifest")
    named = getattr(man, "es_reference", None)
    known, _ = known_facts(agg["records"])
    metrics = paired_metrics(metric_names(runs), getattr(man, "summary_metrics", None) or [])
    rows = [row for kind, a, b in pairs(main, named, man, known) for m in metrics
            for row in compare(kind, a, b, runs, by_path, m, n_boot, seed)]
    return multiplicity(pd.DataFrame(rows, columns=COLUMNS))


def write_comparisons(agg: dict, out_dir: Path, title: str) -> list[str]:
    """Write comparisons.md, comparisons.csv and findings.md; a PromptSetMismatch is written as its one line
    (and added to agg["warnings"]) instead of the comparisons. Returns the file names written."""
    out_dir = Path(out_dir)
    try:
        df = comparisons(agg)
    except PromptSetMismatch as e:
        agg["warnings"].append(str(e))
        for name in ("comparisons.md", "findings.md"):
            write_text_atomic(out_dir / name, f"# {title}: paired comparisons\n\n{e}\n")
        write_text_atomic(out_dir / "comparisons.csv", pd.DataFrame(columns=COLUMNS).to_csv(index=False))
        return list(FILES)
    write_text_atomic(out_dir / "comparisons.md", comparisons_markdown(df, title))
    write_text_atomic(out_dir / "comparisons.csv", df.to_csv(index=False))
    decl = from_manifest(agg.get("manifest"))  # primary endpoints first, exploratory arms apart
    unknown = unknown_line(known_facts(agg["records"])[1])
    if unknown:
        agg["warnings"].append(unknown)
    preface = "\n\n".join(p for p in (not_updated(agg.get("main")), unknown) if p)
    write_text_atomic(out_dir / "findings.md", with_claims(findings_markdown(df, title, preface, decl), out_dir))
    return list(FILES)


def unknown_line(lines: list[str]) -> str:
    """The paragraph naming the runs' methods whose family is unknown (known_facts), or ''."""
    return ("Not in any ES-vs-RL comparison, because the family of its method is unknown: " + "; ".join(lines) + "."
            if lines else "")


def not_updated(main: pd.DataFrame | None) -> str:
    """The rows left out because their runs never applied an update (their numbers are the base model's)."""
    if main is None or main.empty or "status" not in main:
        return ""
    rows = main[main["status"] == NO_UPDATE]
    if rows.empty:
        return ""
    names = "; ".join(f"{r['model']} {r['label']}" for _, r in rows.iterrows())
    return (f"Not compared, because no update was ever applied (every iteration's population tied, so the "
            f"weights are the base model's and the numbers are not a result): {names}.")


# ----------------------------------------------------------------------------- from a committed runs.csv

SEED_ONLY = "paired by seed only: the records predate per-prompt scores (rerun for prompt pairing)"
NOT_PAIRED_SEEDS = "not paired: {n} paired seed{s} (a seed interval needs 2); " + SEED_ONLY
RUNS_CSV_HEAD = ("**{cap}.** Computed from `{src}` alone (one row per run: its test means) by "
                 "`python -m harness.reporting.comparisons {src}{flags}`{prompts}: the same rows (RL grids at their "
                 "point chosen on validation) and the same pairs as the report makes from records, each a Student-t "
                 "95% interval over the per-seed differences of run means with its t-test p, Benjamini-Hochberg over "
                 "them; none is paired by prompt.")


def read_runs_csv(path: Path) -> pd.DataFrame:
    """A committed runs.csv as the runs frame aggregate.runs_frame makes: grid points back to dicts,
    `trains` to bools (a missing run's empty cell reads as trains)."""
    runs = pd.read_csv(path)
    missing = [c for c in ("model", "seed", "cell", "label", "status") if c not in runs]
    if missing:
        raise UserError(f"{path} is not a runs.csv written by the report: no column {', '.join(missing)}")

    def point(p, row: int):
        if isinstance(p, dict):
            return p
        try:
            value = ast.literal_eval(p) if isinstance(p, str) and p.strip() else {}
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            value = None
        if not isinstance(value, dict):  # a damaged cell is named, never a traceback from the parser
            raise UserError(f"{path} row {row + 2}: point {str(p)[:60]!r} is not a grid point ({{key: value}}); "
                            "rebuild the folder's runs.csv from its records")
        return value

    runs["point"] = ([point(p, i) for i, p in enumerate(runs["point"])] if "point" in runs
                     else [{} for _ in range(len(runs))])
    if "trains" in runs:
        runs["trains"] = pd.Series([t if isinstance(t, bool) else str(t).strip().lower() != "false"
                                    for t in runs["trains"].tolist()], index=runs.index, dtype=object)
    return runs


def _check_n_prompts(runs: pd.DataFrame, n_prompts: int) -> None:
    """Every run's greedy accuracy must be a multiple of 1/n_prompts (else the count is not the runs')."""
    vals = runs["greedy_acc"].dropna() if "greedy_acc" in runs else pd.Series(dtype=float)
    off = [v for v in vals if abs(v * n_prompts - round(v * n_prompts)) > 1e-6]
    if off:
        raise UserError(f"n_prompts={n_prompts} does not fit these runs: greedy_acc {off[0]} is not a multiple of "
                        f"1/{n_prompts}")


def compare_by_seed(kind: str, a_row: pd.Series, b_row: pd.Series, runs: pd.DataFrame, metric: str,
                    n_prompts: int | None = None) -> list[dict]:
    """One row (paired by seed only) of A vs B on `metric` from the runs frame's per-run test means."""
    base = dict(model=a_row["model"], kind=kind, comparison=f"{_name(a_row)} vs {_name(b_row)}", metric=metric)

    def side(row):
        rows = _run_rows(row, runs)
        if metric not in rows or rows[metric].isna().any():
            return []  # a run never measured `metric` (greedy-only): nothing to pair
        return [(None if isnan(s) else int(s), None, np.asarray([float(v)]))
                for s, v in zip(rows["seed"], rows[metric])]
    a, b = side(a_row), side(b_row)
    if a == [] or b == []:
        return []
    diffs = _seed_diffs(a, b, b_once=not bool(b_row.get("trains", True)))
    n = math.nan if n_prompts is None else n_prompts
    if len(diffs) < 2:
        return [{**base, "difference": math.nan, "ci_low": math.nan, "ci_high": math.nan, "n_seeds": len(diffs),
                 "n_prompts": n, "pairing": "none",
                 "result": NOT_PAIRED_SEEDS.format(n=len(diffs), s="s" * (len(diffs) != 1)), "note": SEED_ONLY,
                 "p_value": math.nan}]
    return [_by_seed(base, diffs, n, SEED_ONLY)]


def comparisons_by_seed(runs: pd.DataFrame, select_by: str = "greedy_acc", n_prompts: int | None = None
                        ) -> pd.DataFrame:
    """Every comparison of a runs frame (no records), paired by seed only: the report's rows
    (points_frame, choose) and pairs(), one Student-t row per comparison and metric, Benjamini-Hochberg over
    them."""
    if runs.empty:
        return pd.DataFrame(columns=COLUMNS)
    if n_prompts is not None:
        _check_n_prompts(runs, n_prompts)
    main, _ = choose(points_frame(runs, select_by))
    metrics = [m for m in metric_names(runs) if m.startswith(PAIRED_METRICS)]
    rows = [row for kind, a, b in pairs(main) for m in metrics
            for row in compare_by_seed(kind, a, b, runs, m, n_prompts)]
    return multiplicity(pd.DataFrame(rows, columns=COLUMNS))


def unknown_by_name(runs: pd.DataFrame) -> list[str]:
    """One line per method of a runs frame's trained runs that no conf/method option names (a runs.csv holds
    the method's name alone): its rows are in no ES-vs-RL comparison, and the files say so."""
    if runs.empty or "method" not in runs:
        return []
    trains = runs["trains"] if "trains" in runs else pd.Series(True, index=runs.index)
    names = dict.fromkeys(str(m) for m, t in zip(runs["method"], trains) if isinstance(m, str) and bool(t))
    return [f"method {n}: its family is unknown (runs.csv holds its name alone, and no conf/method option has it; "
            "the report from its records reads it there)" for n in names if declared_by_name(n) is None]


def comparisons_from_runs_csv(path: Path, out_dir: Path | None = None, title: str | None = None,
                              select_by: str = "greedy_acc", n_prompts: int | None = None) -> pd.DataFrame:
    """Write comparisons.md, comparisons.csv and findings.md (default: beside runs.csv) from a committed
    runs.csv, paired by seed only; returns the comparison rows. `n_prompts`: the test prompt count of the
    runs (the experiment file's eval.n_prompts), checked against their greedy accuracies; else left blank."""
    path = Path(path)
    out_dir = Path(out_dir) if out_dir is not None else path.parent
    title = title or path.parent.name
    df = comparisons_by_seed(read_runs_csv(path), select_by, n_prompts)
    try:
        src = path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        src = path.as_posix()
    head = RUNS_CSV_HEAD.format(
        cap=SEED_ONLY[0].upper() + SEED_ONLY[1:], src=src, flags=f" --n-prompts {n_prompts}" if n_prompts else "",
        prompts=f" ({n_prompts} test prompts per run: the experiment's eval.n_prompts, every greedy accuracy a "
                f"multiple of 1/{n_prompts})" if n_prompts else "")
    unknown = unknown_line(unknown_by_name(read_runs_csv(path)))
    head += f"\n\n{unknown}" if unknown else ""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out_dir / "comparisons.md", comparisons_markdown(df, title, head))
    write_text_atomic(out_dir / "comparisons.csv", df.to_csv(index=False))
    write_text_atomic(out_dir / "findings.md", with_claims(findings_markdown(df, title, head), out_dir))
    return df


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.reporting.comparisons",
                                 description="Seed-paired comparisons from a committed runs.csv (no records).")
    ap.add_argument("runs_csv", type=Path, help="results/<experiment>/runs.csv")
    ap.add_argument("--out", type=Path, default=None, help="output folder (default: the folder of runs.csv)")
    ap.add_argument("--title", default=None, help="title (default: the folder's name)")
    ap.add_argument("--select-by", default="greedy_acc", help="validation metric that chose grid points")
    ap.add_argument("--n-prompts", type=int, default=None,
                    help="test prompts per run (the experiment's eval.n_prompts); checked against greedy_acc")
    args = ap.parse_args(argv)
    if not args.runs_csv.is_file():
        print(f"esbench: error: {args.runs_csv} is not a file; pass results/<experiment>/runs.csv", file=sys.stderr)
        return 2
    try:
        df = comparisons_from_runs_csv(args.runs_csv, args.out, args.title, args.select_by, args.n_prompts)
    except UserError as e:
        print(f"esbench: error: {e}", file=sys.stderr)
        return 2
    c = counts(df)
    print(f"{len(df)} comparisons, m = {c['m']} tests, {c['nominal']} nominal (p < 0.05), {c['bh']} detected "
          f"(Benjamini-Hochberg, q = 0.05), {c['not_paired']} not paired: {args.out or args.runs_csv.parent}/"
          f"{{{','.join(FILES)}}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
