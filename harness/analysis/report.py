"""Analyse an experiment's stored updates: analysis.md, analysis.json and drift/localisation/sparsity/entropy.png.

    python -m harness.analysis results/quickstart   (or runs/<group>/<stamp>, or one run folder)

Every successful trained run is analysed from its record and stored weights, against its base
model loaded again and checked by hash; a run that cannot be (no stored update, another base) and
every failed, interrupted or missing run are listed in analysis.md, never dropped.
"""
from __future__ import annotations

import json
import logging
import math
from pathlib import Path

from hydra.utils import instantiate

from harness.analysis.drift import drift
from harness.analysis.groups import GROUPS, group_label
from harness.analysis.localisation import localisation
from harness.analysis.null import Walk, null_figures, updated_counts, verdict, walk_of
from harness.analysis.numerics import numerics_of, section as numerics_section
from harness.analysis.settings import AnalysisConfig
from harness.analysis.sparsity import (fraction_below, member_step, sparsity_curve, sparsity_eval_config, step_size,
                                       thresholds, zeroable_at)
from harness.analysis.update import UpdateError, base_hash, check_base, deltas, load_update, named_params
from harness.core.atomic import write_json_atomic, write_text_atomic
from harness.core.method_facts import ES, RL, record_family, unknown_family
from harness.core.policy import load_policy
from harness.core.records import RECORD_NAME, read_records
from harness.reporting.aggregate import plan_of
from harness.reporting.report import output_name
from harness.reporting.stats import range_multiple
from harness.reporting.update_claims import run_family, refresh_findings, section as claims_section

log = logging.getLogger("esbench")

# arXiv 2608.27351 ("Understanding ES for LLM reasoning"): its figures as quoted second-hand.
PAPER = """## The paper's figures (arXiv 2608.27351)

| finding | model | GRPO | ES |
|---|---|---|---|
| relative drift ‖theta - theta0‖ / ‖theta0‖ | Qwen2.5-1.5B-Instruct | 0.0475 | 1.933 (ratio 41x) |
| relative drift | Llama-3.2-3B-Instruct | 0.0954 | 4.185 (ratio 44x) |
| largest updates | DeepSeek-R1-Distill-Qwen-1.5B | top 100 all LM head | 117 of top 144 norm weights, 24 attention biases |
| largest updates | Llama-3.2-3B-Instruct | top 100 all token embedding | norms 72-80 of top 100 |
| functional sparsity | both | - | 77.6-93.0% of nonzero coordinates below one ES step; pass@1 broadly stable |
| entropy on a held-out task | both | falls substantially | changes modestly |
"""


class RunSkipped(Exception):
    """A run that is listed, not analysed."""


def resolve(target: Path, runs_dir: Path = Path("runs")) -> tuple[Path, Path]:
    """(records folder, default output folder) for a run folder, a records folder, or a tables folder.

    A tables folder (results/<group>, outputs/<group>) holds no records: its versions.json names the
    experiment (group and stamp) that made it, and its records are runs/<group>/<stamp> under runs_dir,
    or an error saying they are not here: never another run's. The output is outputs/<group>/ whatever
    was given: the curated results/ are rewritten only when --out names them.
    """
    target = Path(target)
    if not target.is_dir():
        raise UpdateError(f"{target} is not a folder; pass results/<group>, runs/<group>/<stamp> or a run folder")
    if (target / RECORD_NAME).is_file() or any(target.rglob(RECORD_NAME)):
        return target, Path("outputs") / output_name(target)
    named = named_records(target)
    if named is None:
        raise UpdateError(f"{target} holds no run records and its versions.json does not name the experiment that "
                          "made it (tables written before it did); pass that experiment's records folder, "
                          "runs/<group>/<stamp>")
    folder = runs_dir / named["group"] / named["stamp"]
    if not (folder / "experiment.json").is_file():
        raise UpdateError(f"{target} was made from {folder}, which is not here (records are not committed: rerun "
                          f"the experiment with stamp={named['stamp']}, or pass --runs-dir where they are)")
    return folder, Path("outputs") / output_name(folder)


def named_records(tables: Path) -> dict | None:
    """{"group", "stamp"} of the experiment a tables folder's versions.json names; None when it names none."""
    try:
        rec = json.loads((Path(tables) / "versions.json").read_text()).get("records") or {}
    except (OSError, ValueError, AttributeError):
        return None
    ok = all(isinstance(rec.get(k), str) and rec[k] and "/" not in rec[k] and rec[k] != ".." for k in ("group", "stamp"))
    return {"group": rec["group"], "stamp": rec["stamp"]} if ok else None


def run_name(r) -> str:
    flops = r.budget.flops_used if r.budget else None
    return f"{r.model_key or r.model} · {r.label} · seed {r.seed} · {flops:.3g} FLOPs" if flops else \
        f"{r.model_key or r.model} · {r.label} · seed {r.seed}"


class Bases:
    """Base models loaded once per (model, dtype), with their theta_0 on CPU and hash."""

    def __init__(self):
        self.cache = {}

    def get(self, record):
        m = record.config.get("model", {})
        key = (m.get("name_or_path", record.model), m.get("dtype", "float32"))
        if key not in self.cache:
            policy = load_policy(key[0], key[1], m.get("chat_template", False), m.get("system_prompt"), "auto")
            theta0 = {n: p.detach().to("cpu", copy=True) for n, p in named_params(policy.model)}
            tied = bool(getattr(policy.model.config, "tie_word_embeddings", False))
            self.cache[key] = (policy, theta0, base_hash(policy.model), tied)
        return self.cache[key]


def analyse_run(record, cfg: AnalysisConfig, bases: Bases) -> dict:
    """Drift, localisation, sparsity (when cfg.sparsity_prompts), entropy and held-out of one run."""
    run_dir = Path(record.path).parent
    final = load_update(run_dir, record.update, record.label)
    policy, theta0, h, tied = bases.get(record)
    if record.update.get("base_sha256") != h:
        check_base(policy.model, record.update, record.label, record.model)
    delta = deltas(final, policy.model)
    family = record_family(record)  # kept in the record (its method's facts), else looked up (older records)
    walk, why = walk_of(record.method, record.config.get("method", {}), record.train, record.steps, family)
    step, rule = step_size(record, walk)
    out = {"name": run_name(record), "model": record.model_key or record.model, "method": record.method,
           "family": family, "label": record.label, "seed": record.seed,
           "flops": record.budget.flops_used if record.budget else None,
           "path": str(run_dir), "tied": tied, "entropy": list(record.entropy),
           "heldout": {t: {m: v.mean for m, v in h_["metrics"].items()} for t, h_ in record.heldout.items()},
           "numerics": numerics_of(record),
           **measure(delta, theta0, cfg, walk, why, (step, rule), member_step(record))}
    step = out["sparsity"]["step"]
    if cfg.sparsity_prompts and step > 0:
        task = instantiate(record.config["task"])
        ecfg = sparsity_eval_config(record, cfg.sparsity_prompts, cfg.sparsity_samples)
        rows = sparsity_curve(policy, task, theta0, final, delta, thresholds(step, cfg.sparsity_multiples), ecfg)
        out["sparsity"].update(rows=rows, prompts=cfg.sparsity_prompts, samples=cfg.sparsity_samples,
                               zeroable_1pt=zeroable_at(rows))
    return out


def measure(delta: dict, theta0: dict, cfg: AnalysisConfig, walk: Walk | None, why: str,
            step: tuple[float | None, str], member: tuple[float | None, str] = (None, "")) -> dict:
    """Drift, localisation and the fractions below one step (and one member's step), each beside its
    random-walk null when the run has one (`walk`; else `why` there is none: harness/analysis/null.py)."""
    out = {"drift": drift(delta, theta0), "localisation": localisation(delta, cfg.top_k, cfg.top_fraction)}
    step, rule = step
    if step is None:
        nz = [d.abs()[d != 0] for d in delta.values()]
        flat = [float(x.median()) for x in nz if x.numel()]
        step = sorted(flat)[len(flat) // 2] if flat else 0.0
    sp = {"step": step, "rule": rule, "below_one_step": fraction_below(delta, step)}
    if member[0]:
        sp.update(member_step=member[0], member_rule=member[1], below_member_step=fraction_below(delta, member[0]))
    out["sparsity"] = sp
    if walk is None or walk.t < 1:
        out["null"] = {"none": why or "no null: no applied update"}
        return out
    counts = updated_counts(delta)
    if not counts:
        out["null"] = {"none": "no null: no coordinate was updated"}
        return out
    below = {"one_step": (step, sp["below_one_step"])}
    if member[0]:
        below["member_step"] = (member[0], sp["below_member_step"])
    if walk.s1 > 0:  # NOTE-076's threshold: one update's range, its largest |coordinate| (analysis/null.py)
        span = walk.s1 * range_multiple(sum(counts.values()))
        sp.update(range=span, below_range=fraction_below(delta, span))
        below["range"] = (span, sp["below_range"])
    out["null"] = null_figures(walk, counts, out["drift"], out["localisation"], below)
    return out


def analyse(records_root: Path, out: Path, cfg: AnalysisConfig | None = None) -> dict:
    """Analyse every run under `records_root`; write analysis.md, analysis.json and the figures into `out`."""
    from harness.analysis.figures import write_figures

    cfg = cfg or AnalysisConfig()
    records, warnings = read_records(records_root)
    if not records:  # nothing to analyse: an empty analysis must not replace a good one
        raise UpdateError(f"no run records under {records_root}; pass runs/<group>/<stamp> or a run folder "
                          "(nothing was written)")
    manifest = plan_of(records_root, warnings)  # a damaged experiment.json: a warning, no plan
    bases, runs, skipped, not_ok = Bases(), [], [], []
    for r in records:
        if r.effective_status != "ok":
            not_ok.append(f"{run_name(r)}: {r.effective_status.upper()}" + (f" ({r.error})" if r.error else ""))
        elif r.trains:
            try:
                runs.append(analyse_run(r, cfg, bases))
                log.info("analysed %s", run_name(r))
                if runs[-1]["family"] is None:  # in no ES / RL pair: said, never dropped silently
                    warnings.append(f"{run_name(r)}: {unknown_family(r)}")
            except UpdateError as e:
                skipped.append(str(e))
    if manifest is not None:
        have = {r.run_key for r in records}
        not_ok += [f"{p.model or ''} | {p.label} | seed {p.seed}: MISSING (no record)" for p in manifest.runs
                   if p.key not in have]
    summary = {"records": str(records_root), "runs": runs, "skipped": skipped, "not_ok": not_ok,
               "warnings": warnings, "ratios": drift_ratios(runs)}
    write_json_atomic(Path(out) / "analysis.json", summary)
    write_text_atomic(Path(out) / "analysis.md", markdown(summary, cfg))
    refresh_findings(Path(out))  # findings.md (the tables') ends with these runs' NOTE-076 claims
    write_figures(runs, Path(out))
    return summary


def drift_ratios(runs: list[dict]) -> dict:
    """Whole-model drift of each ES-family cell over each RL cell, per model: {model: [{es, es_drift, rl, rl_drift,
    ratio}]}, each side the mean over that cell's analysed seeds. Per pair of cells, never pooled: an RL grid's
    points differ in drift by their learning rate, and a mean over them would match none of them."""
    out: dict[str, list[dict]] = {}
    for model in dict.fromkeys(r["model"] for r in runs):
        cells: dict[str, dict[str, list[float]]] = {ES: {}, RL: {}}
        for r in runs:
            fam = run_family(r)
            if r["model"] == model and fam in cells:
                cells[fam].setdefault(r["label"], []).append(r["drift"]["whole"])
        mean = {f: {k: sum(v) / len(v) for k, v in c.items()} for f, c in cells.items()}
        pairs = [{"es": e, "es_drift": x, "rl": g, "rl_drift": y, "ratio": x / y}
                 for e, x in mean[ES].items() for g, y in mean[RL].items() if y]
        if pairs:
            out[model] = pairs
    return out


def _row(cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _g(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3g}"


def markdown(s: dict, cfg: AnalysisConfig) -> str:
    runs = s["runs"]
    present = [g for g in GROUPS if any(g in r["drift"]["groups"] for r in runs)]
    tied = any(r["tied"] for r in runs)
    lab = {g: group_label(g, tied) for g in present}
    L = [f"# What training did to the model\n\nRecords: `{s['records']}`. {len(runs)} trained runs analysed from "
         "their stored weights (harness/analysis/); the base weights are the run's own model, checked by sha256.\n"]
    if tied:
        L.append("Zoo models tie the token embedding and the LM head: that tensor counts once, as "
                 "`embed = lm_head (tied)`.\n")
    if s["not_ok"] or s["skipped"]:
        L.append("## Runs not analysed\n")
        L += [f"- {x}" for x in s["not_ok"] + s["skipped"]]
        L.append("")
    L += null_section(runs)
    L += ["## Relative drift ‖delta‖ / ‖theta0‖\n",
          "Each ES cell: measured (null, measured/null). ‖delta‖ is the update's norm; its null alpha/N sqrt(d sum_t S_t).\n",
          _row(["run", "‖delta‖", "whole", *(lab[g] for g in present), "null"]), "|" + "---|" * (4 + len(present))]
    for r in runs:
        gs, nl = r["drift"]["groups"], r["null"]
        nd = nl.get("drift", {})
        norm = _vs(r["drift"]["delta_norm"], nl.get("delta_norm"))
        L.append(_row([r["name"], norm, _vs(r["drift"]["whole"], nd.get("whole")),
                       *(_vs(gs[g]["drift"], nd.get(g)) if g in gs else "-" for g in present),
                       _verdict(nl, "drift", nd)]))
    if s["ratios"]:
        L += ["", "ES / RL whole-model drift per pair of cells, each the mean over its seeds (paper, ES / GRPO: 41x on "
              "Qwen2.5-1.5B-Instruct, 44x on Llama-3.2-3B-Instruct). ES's side is the size of its walk, alpha sqrt(T/N) "
              "per coordinate, learned or not; the RL side scales with the learning rate:", ""]
        L += [f"- {m}: {p['es']} {_g(p['es_drift'])} / {p['rl']} {_g(p['rl_drift'])} = {p['ratio']:.1f}x"
              for m, pairs in s["ratios"].items() for p in pairs]
    unknown = [r["name"] for r in runs if run_family(r) is None]
    if unknown:
        L += ["", f"Not in any ES / RL pair, because the family of its method is unknown (neither its record nor a "
              f"conf/method option of its name says it): {', '.join(unknown)}."]
    for key, nkey, title in (("top_k_counts", "top_k", f"the top {cfg.top_k}"),
                             ("top_fraction_counts", "top_fraction", f"the top {cfg.top_fraction:.1%}")):
        L += ["", f"## Localisation: groups among {title} largest |delta| coordinates\n",
              "Each ES cell: count (null: k x the group's share of updated coordinates, count/null).\n",
              _row(["run", "coordinates", *(lab[g] for g in present), "null"]), "|" + "---|" * (3 + len(present))]
        for r in runs:
            loc, nl = r["localisation"], r["null"]
            n = loc["top_k"] if key == "top_k_counts" else loc["k_fraction"]
            cells = nl.get(nkey, {})
            L.append(_row([r["name"], n, *(_vs(loc[key].get(g, 0), cells.get(g), count=True) for g in present),
                           _verdict(nl, nkey, cells)]))
    L += ["", "## Largest |delta| per group\n", _row(["run", *(lab[g] for g in present)]), "|" + "---|" * (1 + len(present))]
    for r in runs:
        L.append(_row([r["name"], *(_g(r["localisation"]["max_abs"].get(g)) for g in present)]))
    L += ["", "## Maximum-|delta| set (every coordinate tied at the largest |delta|)\n",
          "NOTE-076 counts such a set (\"117 of 144 maximum-magnitude coordinates are LayerNorm weights\"); in "
          "bf16/fp16 |delta| takes few values, so the maximum is often shared. Each group: count (its share of "
          "all coordinates).\n", _row(["run", "max |delta|", "size", "by group"]), "|---|---|---|---|"]
    for r in runs:
        loc = r["localisation"]
        ms, share = loc.get("max_set") or {}, loc.get("group_share", {})
        L.append(_row([r["name"], _g(ms.get("max_abs")), ms.get("size", "-"),
                       ", ".join(f"{lab.get(g, group_label(g, tied))} {k} ({_share(share.get(g))})"
                                 for g, k in ms.get("by_group", {}).items()) or "-"]))
    L += numerics_section(runs)
    L += ["", "## Functional sparsity\n",
          "Coordinates with |delta| below a threshold are set back to theta0 and the model is re-evaluated on "
          f"the first {cfg.sparsity_prompts} test prompts (greedy accuracy; pass@1 over {cfg.sparsity_samples} samples). "
          "One step: ES one ES update, the RMS per coordinate of one applied iteration's update "
          "(alpha/sqrt(N) for z-scores); GRPO/PPO the learning rate (Adam's step). One update's range "
          "(NOTE-076's threshold, \"within the magnitude range of a single ES update\"): the largest |coordinate| "
          "one update reaches, c_d x its RMS (harness/analysis/null.py). One member's step: "
          "alpha/N x max abs(z) x E abs(eps), the largest single member's contribution in one iteration. "
          "Null: erf(t / (s sqrt 2)), s = the walk's RMS per coordinate. "
          "Paper: 77.6-93.0% of nonzero ES coordinates below one update's range.\n",
          _row(["run", "one step", "rule", "below one step (null, ratio)", "one update's range",
                "below it (null, ratio)", "one member's step", "below it (null, ratio)", "null",
                "largest share zeroed at < 1 pt greedy lost"]),
          "|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        sp, nl = r["sparsity"], r["null"]
        z = sp.get("zeroable_1pt")
        b = nl.get("below", {})
        L.append(_row([r["name"], _g(sp["step"]), sp["rule"], _pct_vs(sp["below_one_step"], b.get("one_step")),
                       _g(sp.get("range")),
                       _pct_vs(sp["below_range"], b.get("range")) if "below_range" in sp else "-",
                       _g(sp.get("member_step")),
                       _pct_vs(sp["below_member_step"], b.get("member_step")) if "below_member_step" in sp else "-",
                       _verdict(nl, list(b), b), "-" if z is None else f"{100 * z:.1f}%"]))
    for r in runs:
        rows = r["sparsity"].get("rows")
        if rows:
            L += ["", f"{r['name']}:", "", _row(["threshold", "zeroed", "greedy_acc", "pass@1"]), "|---|---|---|---|"]
            L += [_row([_g(x["threshold"]), f"{100 * x['fraction_zeroed']:.1f}%", _pct(x.get("greedy_acc")),
                        _pct(x.get("pass@1"))]) for x in rows]
    L += ["", "## Token entropy of the policy's samples during training\n",
          "Mean per-token entropy (nats) on a fixed held-out prompt set (validation), recorded every "
          f"{cfg.entropy_every_flops_fraction} of the budget, never charged (entropy.png).\n",
          _row(["run", "first", "last", "change"]), "|---|---|---|---|"]
    for r in runs:
        e = [x["entropy"] for x in r["entropy"] if x.get("entropy") is not None]
        L.append(_row([r["name"], *((_g(e[0]), _g(e[-1]), f"{e[-1] - e[0]:+.3g}") if e else ("-", "-", "-"))]))
    tasks = sorted({t for r in runs for t in r["heldout"]})
    if tasks:
        L += ["", "## Held-out tasks beside drift (test greedy accuracy, %)\n", _row(["run", "drift", *tasks]),
              "|" + "---|" * (2 + len(tasks))]
        for r in runs:
            L.append(_row([r["name"], _g(r["drift"]["whole"]),
                           *(_pct(r["heldout"].get(t, {}).get("greedy_acc")) for t in tasks)]))
    L += claims_section(runs)
    L += ["", PAPER]
    return "\n".join(L) + "\n"


def null_section(runs: list[dict]) -> list[str]:
    """The random-walk null's parameters per run (harness/analysis/null.py)."""
    L = ["## The random-walk null (harness/analysis/null.py)\n",
         "With no learning signal ES's update is a random walk: after T applied iterations every updated "
         "coordinate is N(0, s^2), s = alpha/N sqrt(sum_t S_t) (S_t = sum of the squared reward weights; "
         "z-scores: S_t = N, s = alpha sqrt(T/N)). Its predictions: ‖delta‖ = s sqrt(d); each group's share "
         "of the largest |delta| = its share of the updated coordinates; fraction below t = erf(t / (s sqrt 2)). "
         "Beside each ES figure: its null and measured/null. Tolerances: drift |ratio-1| <= max(2%, 3/sqrt(2n)) "
         "(the null's own spread over n coordinates); counts within 3 binomial sd + 1; fractions within "
         "max(1 point, 3 binomial sd). A row inside every tolerance is marked as matching the null; GRPO/PPO "
         "(Adam) have no random-walk null.\n",
         _row(["run", "normalisation", "alpha", "N", "T applied", "one ES update s1", "s (total RMS)", "notes"]),
         "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        w = r["null"].get("walk")
        if w is None:
            L.append(_row([r["name"], r["null"]["none"], "-", "-", "-", "-", "-", "-"]))
        else:
            L.append(_row([r["name"], w["rule"], _g(w["alpha"]), w["n"], w["t"], _g(w["s1"]), _g(w["s"]),
                           "; ".join(w["notes"]) or "-"]))
    return L + [""]


def _vs(obs, cell, count: bool = False) -> str:
    """`obs (null x, r x)`, or obs alone when there is no null."""
    o = str(obs) if count else _g(obs)
    if not cell or cell.get("null") is None:
        return o
    null = f"{cell['null']:.1f}" if count else _g(cell["null"])
    return f"{o} (null {null}, {_r(cell['ratio'])})"


def _pct_vs(obs, cell) -> str:
    o = f"{100 * obs:.1f}%"
    return o if not cell else f"{o} (null {100 * cell['null']:.1f}%, {_r(cell['ratio'])})"


def _r(x) -> str:
    return "inf" if x is None or math.isinf(x) else f"{x:.2f}x"


def _verdict(nl: dict, keys, cells: dict) -> str:
    """MATCH, where the row departs from the null, or why there is no null."""
    if "none" in nl:
        return nl["none"]
    keys = [keys] if isinstance(keys, str) else keys
    ok = all(nl["verdict"][k] for k in keys)
    bad = [f"{g} {_r(c['ratio'])}" for g, c in cells.items() if not c["ok"]]
    return verdict(ok, ", ".join(bad[:4]))


def _share(x) -> str:
    return "-" if x is None else f"{100 * x:.2g}%"


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def dump(summary: dict) -> str:
    return json.dumps(summary, indent=2, default=str)
