"""The claims ledger: each published claim, the experiment files that test it, and its verdict.

The claims themselves (sources, texts, files, rules by name with their thresholds) are data, in conf/claims.yaml;
this module is the engine that reads them, decides each and writes the ledger.

    python -m harness.reporting.claims                  # results/*/comparisons.csv -> docs/claims.md
    python -m harness.reporting.claims --results R --out F

docs/claims.md is generated, never edited: rerun this after a results/ folder changes. A claim is
decided only by the paired rows of comparisons.csv (harness/reporting/comparisons.py): per experiment,
the rows its rule names (comparison kind, the compared cells by their declared roles, metric), one row
per comparison and metric (paired by seed where the experiment has one, else by prompt); reading and
annotating them is harness/reporting/claim_rows.py. A row counts as `detected` only when its p survives
Benjamini-Hochberg at q = 0.05 over its comparisons.csv (the file's p_bh; its result "detected") AND Holm at
0.05 within the claim's deciding rows (Holm over those rows' p_value: a claim decided by several rows must not
pick its evidence from them); its direction is the sign of its difference. A row with p < 0.05 that does not
survive is `nominal only` and counts as not detected. A comparisons.csv older than the p columns (no p_bh)
has only intervals: its rows are read by whether their 95% interval excludes 0, and every verdict from it
says "uncorrected: records needed to apply BH" (BH can only remove those detections: a `not detected` there
stands, a `supported` or `contradicted` may not). Rows that admit no test (`not testable`: identical
columns, a quantity 0 by definition on the base; `not paired`: too few or identical seeds) count as not
detected and are named. Verdicts, per experiment, by each claim's rule (by default, claim_rows.tally):

- supported: every deciding row is detected in the claimed direction;
- contradicted: some deciding row is detected against it;
- not detected: neither;
- not testable: no deciding row admits a test (each row's reason is given);
- not run: no results, results without per-prompt scores, or no row the rule names (the reason and the
  command are given);
- not decidable from comparisons: no comparison kind decides the claim; the file to read is named.

The rules that are not a plain tally are in harness/reporting/claim_rules.py: the average over models (Q1-Q3),
GRPO's pass@k trade-off counted over models (C1), non-superiority and non-inferiority within a stated margin
(C8, C9), NOTE-076's within-0.5-points criterion (C7) and the 1.5B boundary. Every verdict line says what it
came from (models, seeds, prompts, pairing, the file's budget).

    python -m pytest tests/test_claims.py -q
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Callable

import pandas as pd
import yaml

from harness.core.atomic import write_text_atomic
from harness.reporting.claim_rows import (ES_ROLE, GRPO_ROLE, NOT_RUN, PPO_ROLE, UNCORRECTED, Check,  # noqa: F401
                                          Verdict, basis, budget, budget_text, by_checks, holm, load, pts, select)
from harness.reporting.claim_rules import (averaged, boundary, grpo_tradeoff, non_superior, population, sequential,
                                           small_sigma)
from harness.reporting.format import is_percent

ES = ES_ROLE              # the ES column (role es: "ES", "ES full", "ES sigma=..."), never a variant or a sequential cell
RERUN = "`python -m harness experiment={exp} results_dir=results +overwrite_results=true`"


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
    decide: Callable | None = None    # a custom rule (claim_rules.py) over the experiment's rows and its budget
    undecidable: str = ""             # why no comparison decides it, and what to read


# ----------------------------------------------------------------------------- the claims, from conf/claims.yaml

CLAIMS_FILE = Path(__file__).resolve().parents[2] / "conf" / "claims.yaml"
RULES = {f.__name__: f for f in (averaged, boundary, grpo_tradeoff, non_superior, population, sequential, small_sigma)}


def _check(d: dict) -> Check:
    return Check(d["kind"], tuple(d["a"]), d["metric"], d.get("sign", 1), tuple(d["b"]) if "b" in d else None)


def _claim(d: dict, sources: dict) -> Claim:
    """One entry of conf/claims.yaml; a rule name, source or key it does not know is an error naming it."""
    known = {"id", "source", "text", "cpu", "gpu", "rule", "checks", "min_models", "decide", "undecidable"}
    if set(d) - known:
        raise ValueError(f"conf/claims.yaml, claim {d.get('id')!r}: unknown keys {sorted(set(d) - known)}; "
                         f"known: {', '.join(sorted(known))}")
    if d.get("source") not in sources:
        raise ValueError(f"conf/claims.yaml, claim {d.get('id')!r}: source {d.get('source')!r} "
                         f"(sources: {', '.join(sources)})")
    decide = None
    if d.get("decide"):
        args = dict(d["decide"])
        name = args.pop("rule")
        if name not in RULES:
            raise ValueError(f"conf/claims.yaml, claim {d['id']!r}: no rule {name!r}; one of {', '.join(RULES)}")
        decide = partial(RULES[name], **{k: _check(v) if k == "check" else v for k, v in args.items()})
    return Claim(d["id"], sources[d["source"]], d["text"], tuple(d.get("cpu", ())), tuple(d.get("gpu", ())),
                 d.get("rule", ""), tuple(_check(c) for c in d.get("checks", ())), d.get("min_models", 1), decide,
                 d.get("undecidable", ""))


def load_claims(path: Path = CLAIMS_FILE) -> tuple[Claim, ...]:
    spec = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    return tuple(_claim(d, spec["sources"]) for d in spec["claims"])


CLAIMS = load_claims()


def verdict(claim: Claim, results: Path, exp: str, gpu: bool = False) -> Verdict:
    if claim.undecidable:
        return Verdict(claim.undecidable)
    df = load(results, exp, gpu)
    if isinstance(df, str):
        return Verdict(NOT_RUN, df)
    spent = budget(exp)
    v = claim.decide(df, spent) if claim.decide else by_checks(df, claim.checks, claim.min_models)
    if v.word == NOT_RUN and "predate" in v.detail:
        return Verdict(NOT_RUN, f"results/{exp} predate per-prompt scores: rerun {RERUN.format(exp=exp)}")
    return replace(v, basis=basis(v.rows, budget_text(spent)))


# ----------------------------------------------------------------------------- markdown


_pts = pts
AVERAGED = "normal approximation from the rows below: SE = sqrt(sum se_i^2)/k, se_i = 95% half-width/1.96"


def quote(r) -> str:
    """One deciding row: its difference and interval, the ledger's call on it (with p, BH p and Holm p where the
    file has them), and its pairing; or a mean over models (claim_rules.averaged) and how it was formed."""
    a, b = (re.sub(r" \(chosen on validation: .*\)$", "", s) for s in r["comparison"].split(" vs ", 1))
    unit = " points" if is_percent(r["metric"]) else ""
    seeds = int(r["n_seeds"]) if not pd.isna(r["n_seeds"]) else 0
    prompts = "" if pd.isna(r["n_prompts"]) else f" / {int(r['n_prompts'])} prompts"
    how = AVERAGED if r.get("_average") is True else \
        f"{r['pairing'].split(' (')[0]}, {seeds} seed{'s' * (seeds != 1)}{prompts}"
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

Each claim's section states its rule. By default:

- **supported**: every deciding row is detected in the claimed direction;
- **contradicted**: some deciding row is detected against it;
- **not detected**: neither (an interval spanning 0 is not evidence of no difference);
- **not testable**: no deciding row admits a test (each row says why);
- **not run**: no paired comparisons for that experiment yet (why, and the command);
- **not decidable from comparisons**: no comparison kind decides the claim; the file to read is named.

The rules that differ say so in their section: a claim about an average over models (Q1-Q3) is
decided on the mean of the models' differences, its interval a normal approximation from the rows'
intervals; GRPO's trade-off (C1) counts the models where the largest pass@k falls below base; a
claim of no gain or of no loss (C8, C9) is tested for non-superiority or non-inferiority within a
stated margin of 1 point, never read from an interval that spans 0; C7 uses NOTE-076's within-0.5-points
criterion where the intervals allow it. Cells are matched by their exact column label, so ES variants
and sequential cells never decide a claim about ES or GRPO. Every verdict line says what it came from:
models, seeds, test prompts, pairing and the file's budget.

Sizes the sources quote (36.4%, 15 of 18, ~40x) are quoted beside what was measured, not tested as
sizes. The CPU twins run the zoo, which stands in for the sources' 0.5B-8B models: a verdict there is
about the twin, not the source's models.
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
        came = f". From {v.basis}" if v.basis else ""
        lines.append(f"- {'GPU' if gpu else 'CPU'} {name}: **{v.word}**{unc}{detail}{came}{where}.")
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
    """Check every comparisons.csv the ledger reads (harness/reporting/ledger_check.py: an edited row fails,
    naming itself, before any claim is decided), then write the ledger."""
    import pandas as pd

    from harness.reporting.ledger_check import check_folder
    for csv in sorted(Path(results).glob("*/comparisons.csv")):
        check_folder(csv.parent, pd.read_csv(csv))
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
    from harness.core.errors import UserError
    try:
        print(write_ledger(args.results, args.out))
    except UserError as e:  # a committed comparisons.csv that disagrees with itself or its runs (ledger_check.py)
        print(f"esbench: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
