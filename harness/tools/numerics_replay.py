"""Replay ES's weight arithmetic with no signal: where does each numerics put the largest changes?

For one model, each arithmetic (`exact`: fp32 master, methods/es/weights.HFWeights; `inplace-<dtype>`:
the reference code's in-place arithmetic in that dtype, methods/es/numerics.InplaceWeights) replays
`--iterations` ES iterations of `--population` members under each noise seeding (methods/es/core.py
tensor_seed): perturb, restore, then the update with z-scored *random* fitness (seeded Gaussian: no
generation, so every arithmetic sees the same seeds and the same z). With no signal in the fitness the
exact replay IS the random walk of ES's update rule (harness/analysis/null.py), so it is each inplace
row's null: any structure an inplace row adds comes from the arithmetic, not from learning. Reported
per row, with the analysis package's own definitions (harness/analysis/):
- relative drift ||delta|| / ||theta0|| (drift.py), beside the walk's closed form s sqrt(d) / ||theta0||;
- functional sparsity: the share of nonzero |delta| below one ES update s1 = alpha/sqrt(N) and its
  multiples (sparsity.py fraction_below, the analysis ladder), beside the walk's erf(t / (s sqrt 2));
- the top-100 and top-0.1% |delta| and the max-|delta| set with all its ties, by parameter group
  (localisation.py), each count against the group's share of the parameters;
- the share of coordinates exactly unchanged (bit for bit), the |delta| histogram in ulps and the
  per-iteration restore error (methods/es/numerics);
- wall seconds per iteration (perturb + restore of every member + update; no generation).
delta is the float64 difference of the final and initial weights in the working dtype, kept as fp32
(harness/analysis/update.py deltas): exact for 2-byte weights, so ties at the top are real there.

    python -m harness.tools.numerics_replay smollm2-135m-instruct --iterations 3 --population 30 \\
        --sigma 1e-3 --alpha 5e-4 --arith exact,inplace-bf16,inplace-fp16@iid \\
        --seeding iid,per_tensor_offset,per_tensor_same --out results/numerics/replay_smollm2-135m-instruct.json
    python -m pytest tests/test_numerics_replay.py -q

`--arith` items run under every `--seeding`, unless pinned with @<seeding>. Writes the JSON (with the
command, torch version and git sha) and a markdown report beside it (.md).
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path


def _parser(seedings=("the seedings of methods/es/core.py",)) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m harness.tools.numerics_replay", description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--population", type=int, default=30)
    ap.add_argument("--sigma", type=float, default=1e-3)
    ap.add_argument("--alpha", type=float, default=5e-4)
    ap.add_argument("--arith", default="exact,inplace-bf16,inplace-fp16",
                    help="comma list of exact | exact-<dtype> | inplace-<dtype>, each optionally @<seeding>")
    ap.add_argument("--seeding", default="iid", help=f"comma list of {', '.join(seedings)}: every unpinned --arith "
                                                     "item runs under each")
    ap.add_argument("--seed", type=int, default=0, help="seeds member seeds and the random fitness")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", required=True, help="the JSON path; the markdown goes beside it (.md)")
    return ap


if __name__ == "__main__" and any(a in ("-h", "--help") for a in sys.argv[1:]):
    _parser().parse_args()  # prints the help and exits, before the imports below (torch: 7-9 s)

import torch

from harness.analysis.drift import drift
from harness.analysis.groups import group_label
from harness.analysis.localisation import localisation, top_coordinates
from harness.analysis.null import Walk, frac_below
from harness.analysis.settings import AnalysisConfig
from harness.analysis.sparsity import fraction_below
from harness.core.atomic import write_json_atomic, write_text_atomic
from harness.core.errors import UserError
from harness.core.paths import CONF_DIR
from methods.es.core import SEEDINGS, NoiseSpec, normalize
from methods.es.numerics import InplaceWeights, delta_summary
from methods.es.weights import HFWeights

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
TOP, TOP_FRACTION = 100, 0.001
MULTIPLES = AnalysisConfig().sparsity_multiples  # the analysis's threshold ladder, in one ES update


class ReplayError(UserError, ValueError):
    """A bad argument: one line naming it and the fix."""


def parse_arith(spec: str) -> tuple[str, torch.dtype | None]:
    """'exact' (the model's own dtype) | 'exact-<dtype>' | 'inplace-<dtype>' -> (numerics, dtype or None)."""
    numerics, _, dt = spec.partition("-")
    if numerics not in ("exact", "inplace") or (dt and dt not in DTYPES) or (numerics == "inplace" and not dt):
        raise ReplayError(f"--arith {spec!r}: use exact, exact-<dtype> or inplace-<dtype> with dtype in "
                          f"{', '.join(DTYPES)}")
    return numerics, DTYPES.get(dt)


def parse_rows(arith: str, seeding: str) -> list[tuple[str, str]]:
    """(arithmetic, seeding) pairs: each --arith item under every --seeding, or under its own @<seeding>."""
    seedings = [s.strip() for s in seeding.split(",") if s.strip()]
    rows = []
    for item in (x.strip() for x in arith.split(",") if x.strip()):
        spec, _, pinned = item.partition("@")
        parse_arith(spec)
        for s in [pinned] if pinned else seedings:
            if s not in SEEDINGS:
                raise ReplayError(f"seeding {s!r} in {item!r}: use one of {', '.join(SEEDINGS)}")
            if (spec, s) not in rows:
                rows.append((spec, s))
    if not rows:
        raise ReplayError("--arith and --seeding give no rows; e.g. --arith exact,inplace-bf16 --seeding iid")
    return rows


def load_model(name: str):
    """The model as the harness loads it (conf/model/<name>.yaml's name_or_path, else a path or zoo name), fp32."""
    from omegaconf import OmegaConf

    from harness.core.policy import load_policy
    conf = CONF_DIR / "model" / f"{name}.yaml"
    path = OmegaConf.load(conf).name_or_path if conf.is_file() else name
    return load_policy(path, "float32", device="cpu").model


@torch.no_grad()
def localise(delta: dict[str, torch.Tensor], tied: bool) -> dict:
    """Top-TOP and top-TOP_FRACTION |delta| by group, the max-|delta| set by group (localisation.py), each
    group's share of parameters and count / (k x share), and how many coordinates tie at the TOP-th value."""
    loc = localisation(delta, TOP, TOP_FRACTION, n_list=0)
    share = loc["group_share"]

    def label(counts: dict, k: int) -> tuple[dict, dict]:
        out = {group_label(g, tied): c for g, c in sorted(counts.items(), key=lambda kv: -kv[1])}
        return out, {group_label(g, tied): c / (k * share[g]) for g, c in counts.items()}
    ranked = top_coordinates(delta, TOP)
    cut = ranked[-1][0]
    at_cut = sum(int((d.abs() == cut).sum()) for d in delta.values()) if cut > 0 else 0
    ms = loc["max_set"]
    top, top_r = label(loc["top_k_counts"], TOP)
    frac, frac_r = label(loc["top_fraction_counts"], loc["k_fraction"])
    mset, mset_r = label(ms["by_group"], max(ms["size"], 1))
    return {"group_share": {group_label(g, tied): v for g, v in share.items()},
            "top100_by_group": top, "top100_vs_share": top_r, "top100_cut": cut, "coordinates_at_cut_value": at_cut,
            "top_fraction": TOP_FRACTION, "top_fraction_k": loc["k_fraction"], "top_fraction_by_group": frac,
            "top_fraction_vs_share": frac_r, "max_abs_delta": ms["max_abs"], "max_set_size": ms["size"],
            "max_set_by_group": mset, "max_set_vs_share": mset_r}


def sparsity(delta: dict[str, torch.Tensor], walk: Walk) -> dict:
    """Share of nonzero |delta| below each multiple of one ES update (sparsity.py), beside the walk's erf."""
    rows = [{"multiple": m, "threshold": m * walk.s1, "fraction_below": fraction_below(delta, m * walk.s1),
             "walk_null": frac_below(walk.s, m * walk.s1)} for m in MULTIPLES]
    return {"step": walk.s1, "rule": f"one ES update: RMS per coordinate = alpha/sqrt(N) ({walk.rule})", "rows": rows}


def replay(model, arith: str, iterations: int, population: int, sigma: float, alpha: float, seeding: str,
           seed: int) -> dict:
    """One arithmetic under one seeding on a copy of `model` (fp32 in); returns its figures."""
    numerics, dtype = parse_arith(arith)
    work = _copy(model, dtype)
    named = list(work.named_parameters())
    w = (InplaceWeights(named, record=True) if numerics == "inplace" else HFWeights(named, record=True))
    w.set_noise(NoiseSpec(seeding=seeding))
    w.init_master()
    initial = [p.detach().clone() for _, p in named]
    per_iter = []
    for it in range(iterations):
        rng = random.Random(f"replay-{seed}-{it}")
        seeds = [rng.getrandbits(31) for _ in range(population)]
        z = normalize([rng.gauss(0.0, 1.0) for _ in range(population)], "zscore")
        t0 = time.perf_counter()
        for s in seeds:
            w.perturb(s, sigma)
            w.restore()
        t1 = time.perf_counter()
        norm = w.update(seeds, z, alpha, population)
        t2 = time.perf_counter()
        rec = w.numerics()
        per_iter.append({"iteration": it + 1, "wall_s": t2 - t0, "members_s": t1 - t0, "update_s": t2 - t1,
                         "update_norm": norm, **rec})
        print(f"numerics_replay: {arith} {seeding} iteration {it + 1}/{iterations}: {t2 - t0:.1f} s, "
              f"changed {rec['changed_share']:.4f}", flush=True)
    final = [p.detach() for _, p in named]
    summary = delta_summary(initial, final)
    base = {n: t for (n, _), t in zip(named, initial)}
    delta = {n: (f.double() - t.double()).float() for (n, t), f in zip(base.items(), final)}  # update.deltas' rule
    walk = Walk.zscore(alpha, population, iterations)
    dr = drift(delta, base)
    d = sum(t.numel() for t in delta.values())
    base_norm = sum(g["base_norm"] ** 2 for g in dr["groups"].values()) ** 0.5
    tied = bool(getattr(work.config, "tie_word_embeddings", False))
    return {"arith": arith, "seeding": seeding, "numerics": numerics,
            "dtype": str(final[0].dtype).removeprefix("torch."),
            "unchanged_share": 1 - summary["changed_share"],
            "drift": {"whole": dr["whole"], "delta_norm": dr["delta_norm"], "walk_null": walk.s * d ** 0.5 / base_norm,
                      "groups": {group_label(g, tied): v["drift"] for g, v in dr["groups"].items()}},
            "sparsity": sparsity(delta, walk), **localise(delta, tied),
            "ulp_histogram": summary["ulp_histogram"], "coordinates": summary["coordinates"],
            "s_per_iteration": sum(r["wall_s"] for r in per_iter) / max(len(per_iter), 1), "iterations": per_iter}


def _copy(model, dtype):
    import copy
    out = copy.deepcopy(model)
    return out.to(dtype) if dtype is not None else out


def null_of(rows: list[dict], r: dict) -> dict | None:
    """An inplace row's null: the exact row under the same seeding (None for exact rows, or when absent)."""
    if r["numerics"] == "exact":
        return None
    same = [x for x in rows if x["numerics"] == "exact" and x["seeding"] == r["seeding"]]
    return next((x for x in same if x["arith"] == "exact"), same[0] if same else None)


def _vs(value: float, r: dict, null: dict | None, get, fmt) -> str:
    """`value (exact v, ratio)` for an inplace row, `value (walk v)` for an exact one."""
    if r["numerics"] == "exact":
        return f"{fmt(value)} (walk {fmt(get(r, True))})"
    if null is None:
        return fmt(value)
    v = get(null, False)
    return f"{fmt(value)} (exact {fmt(v)}, {value / v:.2f}x)" if v else f"{fmt(value)} (exact {fmt(v)})"


def _groups(counts: dict, ratio: dict) -> str:
    return ", ".join(f"{g} {k} ({ratio[g]:.3g}x)" for g, k in counts.items()) or "-"


def markdown(result: dict) -> str:
    a, rows = result["args"], result["arithmetics"]
    rows = sorted(rows, key=lambda r: (r["seeding"] != "iid", r["seeding"], r["numerics"] != "exact"))
    walk = Walk.zscore(a["alpha"], a["population"], a["iterations"])
    pct = lambda x: f"{100 * x:.1f}%"  # noqa: E731
    lines = [f"# No-signal numerics replay: {a['model']}", "",
             f"{a['iterations']} iterations x {a['population']} members, sigma={a['sigma']:g}, alpha={a['alpha']:g}, "
             f"random z-scored fitness; {result['params']:,} parameters (tied head: {result['tied']}). One seed "
             f"({a['seed']}) of member seeds and fitness, shared by every row: each figure is one deterministic "
             f"replay, not a mean. `{result['command']}` (torch {result['torch']}, git {result['git_sha']})", "",
             "With random fitness the exact replay IS the random walk of ES's update rule "
             "(harness/analysis/null.py): every coordinate ends N(0, s^2), s = alpha sqrt(T/N) = "
             f"{walk.s:.3g}, and one ES update is s1 = alpha/sqrt(N) = {walk.s1:.3g}. So the exact row of a "
             "seeding is the null of the inplace rows under it (the row just above): an inplace cell reads "
             "`value (exact <the exact row's value>, ratio)`; an exact cell gives the walk's closed form "
             "(`walk ...`: drift s sqrt(d)/‖theta0‖, fraction below t erf(t/(s sqrt 2))), which it should match. "
             "Definitions are the analysis package's (drift.py, sparsity.py fraction_below, localisation.py).", "",
             "Parameter shares: " + ", ".join(f"{g} {100 * v:.2g}%" for g, v in
                                              sorted(rows[0]["group_share"].items(), key=lambda kv: -kv[1])), "",
             "## Drift and functional sparsity", "",
             "Relative drift ‖theta - theta0‖/‖theta0‖; below one step: the share of changed coordinates "
             f"(nonzero |delta|) with |delta| < s1 (NOTE-076: 77.6-93.0% below \"a single ES update\").", "",
             "| arithmetic | seeding | dtype | unchanged | relative drift | below one ES update | s/iter |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        nl = null_of(rows, r)
        dr = _vs(r["drift"]["whole"], r, nl, lambda x, w: x["drift"]["walk_null" if w else "whole"],
                 lambda v: f"{v:.3g}")
        one = r["sparsity"]["rows"][0]
        sp = _vs(one["fraction_below"], r, nl,
                 lambda x, w: x["sparsity"]["rows"][0]["walk_null" if w else "fraction_below"], pct)
        lines.append(f"| {r['arith']} | {r['seeding']} | {r['dtype']} | {pct(r['unchanged_share'])} | {dr} | {sp} | "
                     f"{r['s_per_iteration']:.1f} |")
    ladder = rows[0]["sparsity"]["rows"]
    lines += ["", "Share of changed coordinates below each multiple of one ES update (the analysis ladder):", "",
              "| arithmetic | seeding | " + " | ".join(f"{x['multiple']:g} x s1" for x in ladder) + " |",
              "|---|---|" + "---|" * len(ladder),
              "| walk (closed form) | any | " + " | ".join(pct(x["walk_null"]) for x in ladder) + " |"]
    for r in rows:
        lines.append(f"| {r['arith']} | {r['seeding']} | " + " | ".join(pct(x["fraction_below"])
                                                                       for x in r["sparsity"]["rows"]) + " |")
    k = rows[0]["top_fraction_k"]
    lines += ["", "## Where the largest |delta| land", "",
              "Each group: count (count / (k x the group's parameter share)): 1x is what the group's size alone "
              "predicts, and what the walk predicts (its coordinates are i.i.d.). The max set is every coordinate "
              "tied at the largest |delta| (NOTE-076's \"144 maximum-magnitude coordinates\"), k = its size.", "",
              f"| arithmetic | seeding | max abs delta | max-set size | max set by group | top 100 by group | "
              f"top {100 * TOP_FRACTION:g}% ({k:,}) by group |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['arith']} | {r['seeding']} | {r['max_abs_delta']:.3g} | {r['max_set_size']} | "
                     f"{_groups(r['max_set_by_group'], r['max_set_vs_share'])} | "
                     f"{_groups(r['top100_by_group'], r['top100_vs_share'])} | "
                     f"{_groups(r['top_fraction_by_group'], r['top_fraction_vs_share'])} |")
    for r in rows:
        if r["coordinates_at_cut_value"] > 1:
            lines.append(f"\n{r['arith']} {r['seeding']}: {r['coordinates_at_cut_value']} coordinates tie at the 100th "
                         f"value ({r['top100_cut']:.3g}), so which of them fill the top 100 is torch.topk's tie order; "
                         "the max-set counts are complete.")
    bins = list(rows[0]["ulp_histogram"])
    lines += ["", "|delta| in ulps of the initial weight (working dtype):", "",
              "| arithmetic | seeding | " + " | ".join(bins) + " |", "|---|---|" + "---|" * len(bins)]
    for r in rows:
        n = r["coordinates"]
        lines.append(f"| {r['arith']} | {r['seeding']} | "
                     + " | ".join(f"{100 * v / n:.2f}%" for v in r["ulp_histogram"].values()) + " |")
    lines += ["", "Restore error of each iteration's first member (share of coordinates not restored bit for bit):",
              ""]
    for r in rows:
        errs = ", ".join(f"{x['restore_not_exact_share']:.4f}" for x in r["iterations"])
        lines.append(f"- {r['arith']} {r['seeding']}: {errs}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    from harness.core.records import git_sha
    argv = sys.argv[1:] if argv is None else argv
    ap = _parser(SEEDINGS)
    a = ap.parse_args(argv)
    pairs = parse_rows(a.arith, a.seeding)  # every bad one fails before the model loads
    torch.set_num_threads(a.threads)
    model = load_model(a.model)
    result = {"command": "python -m harness.tools.numerics_replay " + " ".join(argv), "torch": torch.__version__,
              "git_sha": git_sha(), "args": vars(a), "params": sum(p.numel() for p in model.parameters()),
              "tied": bool(getattr(model.config, "tie_word_embeddings", False)), "arithmetics": []}
    for arith, seeding in pairs:
        result["arithmetics"].append(replay(model, arith, a.iterations, a.population, a.sigma, a.alpha, seeding,
                                            a.seed))
        out = Path(a.out)
        write_json_atomic(out, result)  # after every row: a stopped replay keeps what it measured
        write_text_atomic(out.with_suffix(".md"), markdown(result))
    return result


if __name__ == "__main__":
    main()
