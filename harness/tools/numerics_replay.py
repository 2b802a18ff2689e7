"""Replay ES's weight arithmetic with no signal: where does each numerics put the largest changes?

For one model, each arithmetic (`exact`: fp32 master, methods/es_weights.HFWeights; `inplace-<dtype>`:
the reference code's in-place arithmetic in that dtype, methods/es_numerics.InplaceWeights) replays
`--iterations` ES iterations of `--population` members: perturb, restore, then the update with z-scored
*random* fitness (seeded Gaussian: no generation, so every arithmetic sees the same seeds and the same
z). With no signal in the fitness, any structure in where |delta| = |final - initial| lands comes
from the arithmetic, not from learning. Reported per arithmetic:
- the 100 largest |delta| counted by parameter group (harness/analysis/groups.py, as the analyses);
- the maximum-|delta| set with its ties: every coordinate whose |delta| equals the max, by group;
- the share of coordinates exactly unchanged (bit for bit), and the max |delta|;
- the |delta| histogram in ulps and the per-iteration restore error / changed share (methods/es_numerics);
- wall seconds per iteration (perturb + restore of every member + update; no generation).
Deltas are in the working dtype against the initial weights cast to it. Ties at the top are real in
bf16/fp16: |delta| takes few distinct values there.

    python -m harness.tools.numerics_replay smollm2-135m-instruct --iterations 3 --population 30 \\
        --sigma 1e-3 --alpha 5e-4 --arith exact,inplace-bf16,inplace-fp16 --seeding iid \\
        --out results/numerics/replay_smollm2-135m-instruct.json
    python -m pytest tests/test_numerics_replay.py -q

Writes the JSON (with the command, torch version and git sha) and a markdown table beside it (.md).
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from pathlib import Path

import torch

from harness.analysis.groups import group_label, group_of
from harness.core.atomic import write_json_atomic, write_text_atomic
from harness.core.errors import UserError
from harness.core.paths import CONF_DIR
from methods.es_core import SEEDINGS, normalize
from methods.es_numerics import InplaceWeights, delta_summary
from methods.es_weights import HFWeights

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
TOP = 100


class ReplayError(UserError, ValueError):
    """A bad argument: one line naming it and the fix."""


def parse_arith(spec: str) -> tuple[str, torch.dtype | None]:
    """'exact' (the model's own dtype) | 'exact-<dtype>' | 'inplace-<dtype>' -> (numerics, dtype or None)."""
    numerics, _, dt = spec.partition("-")
    if numerics not in ("exact", "inplace") or (dt and dt not in DTYPES) or (numerics == "inplace" and not dt):
        raise ReplayError(f"--arith {spec!r}: use exact, exact-<dtype> or inplace-<dtype> with dtype in "
                          f"{', '.join(DTYPES)}")
    return numerics, DTYPES.get(dt)


def load_model(name: str):
    """The model as the harness loads it (conf/model/<name>.yaml's name_or_path, else a path or zoo name), fp32."""
    from omegaconf import OmegaConf

    from harness.core.policy import load_policy
    conf = CONF_DIR / "model" / f"{name}.yaml"
    path = OmegaConf.load(conf).name_or_path if conf.is_file() else name
    return load_policy(path, "float32", device="cpu").model


@torch.no_grad()
def localise(names: list[str], initial: list[torch.Tensor], final: list[torch.Tensor], tied: bool) -> dict:
    """Top-TOP |delta| by group and the max-|delta| set (all coordinates equal to the max) by group.

    Two passes, one tensor's |delta| (float64, exact) at a time: memory stays one tensor, not a model."""
    def delta(i):
        return (final[i].double() - initial[i].double()).abs().reshape(-1)

    cand = []  # (value, tensor index) of each tensor's TOP largest: the global TOP is among them
    for i in range(len(initial)):
        d = delta(i)
        cand += [(float(x), i) for x in torch.topk(d, min(TOP, d.numel())).values]
    cand.sort(key=lambda t: -t[0])
    label = [group_label(group_of(n), tied) for n in names]
    top = Counter(label[i] for _, i in cand[:TOP])
    mx, cut = cand[0][0], cand[min(TOP, len(cand)) - 1][0]
    at_max, at_cut = Counter(), 0
    for i in range(len(initial)):
        d = delta(i)
        at_cut += int((d == cut).sum())
        if mx > 0 and (k := int((d == mx).sum())):
            at_max[label[i]] += k
    return {"top100_by_group": dict(top.most_common()), "top100_cut": cut, "coordinates_at_cut_value": at_cut,
            "max_abs_delta": mx, "max_set_size": sum(at_max.values()), "max_set_by_group": dict(at_max.most_common())}


def replay(model, arith: str, iterations: int, population: int, sigma: float, alpha: float, seeding: str,
           seed: int) -> dict:
    """One arithmetic on a copy of `model` (fp32 in); returns its figures."""
    numerics, dtype = parse_arith(arith)
    work = _copy(model, dtype)
    named = list(work.named_parameters())
    names = [n for n, _ in named]
    w = (InplaceWeights(named, record=True) if numerics == "inplace" else HFWeights(named, record=True))
    w.set_noise(seeding=seeding)
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
        print(f"numerics_replay: {arith} iteration {it + 1}/{iterations}: {t2 - t0:.1f} s, "
              f"changed {rec['changed_share']:.4f}", flush=True)
    final = [p.detach() for _, p in named]
    summary = delta_summary(initial, final)
    loc = localise(names, initial, final, bool(getattr(work.config, "tie_word_embeddings", False)))
    return {"arith": arith, "numerics": numerics, "dtype": str(final[0].dtype).removeprefix("torch."),
            "unchanged_share": 1 - summary["changed_share"], **loc,
            "ulp_histogram": summary["ulp_histogram"], "coordinates": summary["coordinates"],
            "s_per_iteration": sum(r["wall_s"] for r in per_iter) / max(len(per_iter), 1), "iterations": per_iter}


def _copy(model, dtype):
    import copy
    out = copy.deepcopy(model)
    return out.to(dtype) if dtype is not None else out


def markdown(result: dict) -> str:
    a = result["args"]
    lines = [f"# No-signal numerics replay: {a['model']}", "",
             f"{a['iterations']} iterations x {a['population']} members, sigma={a['sigma']:g}, alpha={a['alpha']:g}, "
             f"seeding={a['seeding']}, random z-scored fitness (seed {a['seed']}); {result['params']:,} parameters "
             f"(tied head: {result['tied']}). `{result['command']}` (torch {result['torch']}, git {result['git_sha']})",
             "", "| arithmetic | dtype | unchanged | max abs delta | max-set size (by group) | top-100 by group | s/iter |",
             "|---|---|---|---|---|---|---|"]
    for r in result["arithmetics"]:
        groups = ", ".join(f"{g} {k}" for g, k in r["max_set_by_group"].items()) or "-"
        top = ", ".join(f"{g} {k}" for g, k in r["top100_by_group"].items())
        lines.append(f"| {r['arith']} | {r['dtype']} | {100 * r['unchanged_share']:.2f}% | {r['max_abs_delta']:.3g} | "
                     f"{r['max_set_size']} ({groups}) | {top} | {r['s_per_iteration']:.1f} |")
    for r in result["arithmetics"]:
        if r["coordinates_at_cut_value"] > 1:
            lines.append(f"\n{r['arith']}: {r['coordinates_at_cut_value']} coordinates tie at the 100th value "
                         f"({r['top100_cut']:.3g}), so which of them fill the top 100 is torch.topk's tie order; "
                         "the max-set counts are complete.")
    lines += ["", "|delta| in ulps of the initial weight (working dtype):", "",
              "| arithmetic | " + " | ".join(result["arithmetics"][0]["ulp_histogram"]) + " |",
              "|---|" + "---|" * len(result["arithmetics"][0]["ulp_histogram"])]
    for r in result["arithmetics"]:
        n = r["coordinates"]
        lines.append(f"| {r['arith']} | " + " | ".join(f"{100 * v / n:.2f}%" for v in r["ulp_histogram"].values())
                     + " |")
    lines += ["", "Restore error of each iteration's first member (share of coordinates not restored bit for bit):",
              ""]
    for r in result["arithmetics"]:
        errs = ", ".join(f"{x['restore_not_exact_share']:.4f}" for x in r["iterations"])
        lines.append(f"- {r['arith']}: {errs}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    from harness.core.records import git_sha
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m harness.tools.numerics_replay", description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--population", type=int, default=30)
    ap.add_argument("--sigma", type=float, default=1e-3)
    ap.add_argument("--alpha", type=float, default=5e-4)
    ap.add_argument("--arith", default="exact,inplace-bf16,inplace-fp16")
    ap.add_argument("--seeding", default="iid", choices=SEEDINGS)
    ap.add_argument("--seed", type=int, default=0, help="seeds member seeds and the random fitness")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", required=True, help="the JSON path; the markdown goes beside it (.md)")
    a = ap.parse_args(argv)
    ariths = [x.strip() for x in a.arith.split(",") if x.strip()]
    for x in ariths:
        parse_arith(x)  # every bad one fails before the model loads
    torch.set_num_threads(a.threads)
    model = load_model(a.model)
    result = {"command": "python -m harness.tools.numerics_replay " + " ".join(argv), "torch": torch.__version__,
              "git_sha": git_sha(), "args": vars(a), "params": sum(p.numel() for p in model.parameters()),
              "tied": bool(getattr(model.config, "tie_word_embeddings", False)), "arithmetics": []}
    for x in ariths:
        result["arithmetics"].append(replay(model, x, a.iterations, a.population, a.sigma, a.alpha, a.seeding, a.seed))
        out = Path(a.out)
        write_json_atomic(out, result)  # after every arithmetic: a stopped replay keeps what it measured
        write_text_atomic(out.with_suffix(".md"), markdown(result))
    return result


if __name__ == "__main__":
    main()
