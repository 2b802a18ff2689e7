"""The claims ledger: each published claim, the experiment files that test it, and its verdict.

    python -m harness.reporting.claims                  # results/*/comparisons.csv -> docs/claims.md
    python -m harness.reporting.claims --results R --out F

docs/claims.md is generated, never edited: rerun this after a results/ folder changes. A claim is
decided only by the paired rows of comparisons.csv (harness/reporting/comparisons.py): per experiment,
the rows its rule names (comparison kind, the compared columns, each label matched whole, metric), one row
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

from harness.core.atomic import write_text_atomic
from harness.reporting.claim_rows import (ES_ROLE, GRPO_ROLE, NOT_RUN, PPO_ROLE, UNCORRECTED, Check,  # noqa: F401
                                          Verdict, basis, budget, budget_text, by_checks, holm, load, pts, select)
from harness.reporting.claim_rules import (BASE, averaged, boundary, grpo_tradeoff, non_superior, population,
                                           sequential, small_sigma)
from harness.reporting.format import is_percent

ES = ES_ROLE              # the ES column (role es: "ES", "ES full", "ES sigma=..."), never a variant or a sequential cell
RERUN = "`python -m harness experiment={exp} results_dir=results`"


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
AVERAGE = ("{what} vs base, greedy_acc, averaged over models, per column{cols}: the mean of the models' differences "
           "with a 95% interval from their rows' intervals (a normal approximation: SE = sqrt(sum se_i^2)/k, se_i = "
           "(ci_high - ci_low)/(2 x 1.959964), the models independent), counted when its Holm p over the claim's "
           "columns is <= 0.05; with one model, that model's row. Supported when every column's interval lies above 0, "
           "contradicted when one lies below, else not detected; a model whose row has no interval leaves the average "
           "not testable. The source's figure is relative to base accuracy; the mean here is in points")

CLAIMS = (
    Claim("Q1", QIU, "Averaged over models, ES improves over the base model by 36.4%.", **TABLE1,
          rule=AVERAGE.format(what="ES (the ES column: ES or ES sigma=..., no variant)", cols=""),
          decide=partial(averaged, check=Check(BASE, ES, "greedy_acc"))),
    Claim("Q2", QIU, "Averaged over models, PPO improves over the base model by 17.9%.", **TABLE1,
          rule=AVERAGE.format(what="PPO", cols=""),
          decide=partial(averaged, check=Check(BASE, PPO_ROLE, "greedy_acc"))),
    Claim("Q3", QIU, "Averaged over models, GRPO improves over the base model by 21.3% (group 8) and 21.4% "
          "(group 30).", **TABLE1,
          rule=AVERAGE.format(what="GRPO", cols=" (GRPO, GRPO(8), GRPO(30) each apart; not GRPO-LoRA or GRPO then ES)"),
          decide=partial(averaged, check=Check(BASE, GRPO_ROLE, "greedy_acc"))),
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
          rule="GRPO vs base (GRPO, GRPO(8), GRPO(30); each column on each model one case), pass@1 and the largest "
          "pass@k measured: supported when pass@1 is detected above base in every case and the largest pass@k is "
          "detected below base in more than half of them; contradicted when pass@1 is detected below base in any "
          "case, or the largest pass@k above base in more than half; else not detected. The count below base is "
          "given against the source's 15 of 18", decide=grpo_tradeoff),
    Claim("C2", NOTE, "ES improves pass@1, pass@16 and pass@32 together.", **PASSK,
          rule="ES vs base (the ES column, no variant): pass@1, pass@16 and pass@32 (those measured) each detected "
          "above base, on every model",
          checks=(Check(BASE, ES, "pass@1"), Check(BASE, ES, "pass@16"), Check(BASE, ES, "pass@32"))),
    Claim("C4", NOTE, "ES's drift does not cause broad forgetting.", gpu=("gsm8k_passk",),
          undecidable="not decidable from comparisons: held-out scores are table.md blocks (Held-out task), unpaired"),
    Claim("C5", NOTE, "ES's gains live in a sparse, larger-magnitude coordinate subset.", **WEIGHTS,
          undecidable=NULL.format(section="Functional sparsity") + "; NOTE-076's threshold, one update's range (its "
          "largest |coordinate|, c_d times its RMS), already has erf(c_d/sqrt(2T)) of a walk's coordinates below it "
          "after T updates (inside 77.6-93.0% at T = 8-16 on zoo-1m), so its figure is read against the walk and is "
          "not testable below the T the power line gives (findings.md, NOTE-076's claims)"),
    Claim("C6", NOTE, "ES adapts through normalization and attention parameters, GRPO through embeddings and the "
          "LM head.", **WEIGHTS, undecidable=NULL.format(section="Localisation")),
    Claim("C7", NOTE, "The population size ES needs falls with model scale.",
          cpu=("population_cpu",), gpu=("population",),
          rule="ES population=N vs N=30, greedy_acc, NOTE-076's criterion: N < 30 suffices on a model when its "
          "difference to N=30 has its lower 95% bound above -0.5 points, and falls short when detected below N=30; "
          "supported when some N suffices on the largest model and falls short on the smallest, contradicted the "
          "other way round. Where no N suffices on any model (intervals too wide) the criterion cannot be applied "
          "and a weaker reading decides: some N < 30 detected below N=30 on the smallest model and none on the "
          "largest (contradicted the other way round; not detecting a loss is not being within 0.5 points). "
          "NOTE-076 matches updates (300); a file that matches FLOPs gives a smaller N more iterations, and its "
          "verdict says so", decide=population),
    Claim("C8", NOTE, "Antithetic estimation does not pay on reasoning tasks.", **VARIANTS,
          rule="ES antithetic vs ES full, greedy_acc, non-superiority with a margin of 1 point: supported when every "
          "model's row has its upper 95% bound below +1 point; contradicted when a row is detected above full ES; "
          "else not detected", decide=non_superior),
    Claim("C9", NOTE, "Sequential GRPO->ES buys both ends of the trade-off.", **VARIANTS,
          rule="GRPO then ES against GRPO on pass@1 and against full ES on the largest pass@k measured (each end of "
          "the trade-off against the method that holds it, not against base), non-inferiority with a margin of 1 "
          "point: supported when every such row's lower 95% bound is above -1 point, contradicted when one is "
          "detected below; not decidable from comparisons when a comparison is missing (comparisons.py pairs a "
          "sequential cell with base and with full ES only)", decide=sequential),
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
          rule="per model, ES (any sigma, either ES cell) vs base, greedy_acc: a detected gain is +, else a detected "
          "loss is -. "
          "GPU: no + below 1.5B, no - above it. Zoo (standing in for size): no + at a smaller size than a -; "
          "supported when both are seen"),
    Claim("1.5B-alt", RECORD, "Alternative reading: improvement is accessible at 0.5B provided the perturbation "
          "scale is small enough.", **SIGMA, decide=small_sigma,
          rule="some sigma at or below the model's own fixed sigma (the paper's 1e-3; the zoo's 1e-2) improves, "
          "chosen on validation: on the smallest model, of the ES rows (the cell ES sigma=..., not ES alpha tied) at "
          "or below that sigma, the one with the best validation score (table.csv) vs base, greedy_acc, detected "
          "above base; not testable when those rows were not scored on validation "
          "(where alpha is tied to sigma, alpha = sigma/2, the step size moves with it: read the file's header)"),
)


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
