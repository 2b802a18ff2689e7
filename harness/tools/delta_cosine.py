"""The cosine between two ES runs' updates: do ES and its placebo move the weights the same way?

Both arms of a placebo pair start from the same weights and, at the same seed, draw the same member seeds
every iteration; only the coefficients differ (ES: z-scored rewards; placebo: the rewards permuted across
members first). Their updates' norms are equal by construction of the update rule, so the weight figures of
analysis.md cannot tell them apart; their directions can. Each update is read from the run's fp32 master
(es_checkpoint/master.safetensors) minus theta_0, the base model as ES's master starts from it (loaded in the
run's model.dtype, then cast to fp32).

With independent coefficients the cosine of two T-step walks over the same N T directions is about 0, with
standard deviation about 1 / sqrt(N T) (0.046 at N = 30, T = 16): each step's coefficient vectors are two
unit-variance vectors with no link, and the N T noise directions are nearly orthogonal in d >> N T
dimensions.

    python -m harness.tools.delta_cosine runs/placebo_real_confirm/confirm1/ES/seed10 \\
        runs/placebo_real_confirm/confirm1/placebo/seed10 --out results/placebo_real_confirm/delta_cosine.json
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from harness.core.errors import UserError

MASTER = Path("es_checkpoint") / "master.safetensors"


def _record(run: Path) -> dict:
    try:
        return json.loads((run / "record.json").read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{run}: no readable record.json ({e}); pass a finished ES run folder") from None


def cosine(run_a: Path, run_b: Path, base: Path | None = None) -> dict:
    """{cosine, norm_a, norm_b, n, t, null_sd, ...} of the two runs' fp32-master updates."""
    import torch
    from safetensors.torch import load_file

    recs = [_record(r) for r in (run_a, run_b)]
    for r, rec in zip((run_a, run_b), recs):
        if rec.get("status") != "ok" or not (r / MASTER).is_file():
            raise UserError(f"{r}: not a finished ES run with its fp32 master ({MASTER}); wait for it to finish")
    cfg = recs[0].get("config") or {}
    dtype = getattr(torch, str(cfg.get("model", {}).get("dtype") or "float32"))
    name = str(cfg.get("model", {}).get("name_or_path"))
    if base is None:  # a materialised registry model is named by its option; its folder is in the models cache
        from harness.core.wheels import folder
        base = Path(name) if Path(name).is_dir() else folder(name)
    base = Path(base)
    files = sorted(base.glob("*.safetensors"))
    if not files:
        raise UserError(f"{base}: no *.safetensors; pass --base <the run's model folder>")
    theta0 = {}
    for f in files:
        theta0.update(load_file(str(f)))
    a, b = load_file(str(run_a / MASTER)), load_file(str(run_b / MASTER))
    missing = sorted(set(a) - set(theta0))
    if missing or set(a) != set(b):
        raise UserError(f"the masters and {base} name different tensors (e.g. {(missing or sorted(set(a) ^ set(b)))[0]})")
    dot = na = nb = 0.0
    for name in a:
        t0 = theta0[name].to(dtype).double()  # the working weights ES's master starts from
        da, db = a[name].double() - t0, b[name].double() - t0
        dot += float((da * db).sum())
        na += float((da * da).sum())
        nb += float((db * db).sum())
    method = cfg.get("method", {})
    n, t = int(method.get("population", 0)), int(recs[0].get("budget", {}).get("steps") or 0)
    return {"run_a": str(run_a), "run_b": str(run_b), "seed_a": recs[0].get("seed"), "seed_b": recs[1].get("seed"),
            "cosine": dot / math.sqrt(na * nb) if na and nb else math.nan, "norm_a": math.sqrt(na),
            "norm_b": math.sqrt(nb), "population": n, "updates": t,
            "null_sd": 1 / math.sqrt(n * t) if n and t else math.nan}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.tools.delta_cosine", description=__doc__.splitlines()[0])
    ap.add_argument("pairs", type=Path, nargs="+", help="run folders, two per pair: ES then its placebo")
    ap.add_argument("--base", type=Path, default=None, help="the model folder (default: the record's model path)")
    ap.add_argument("--out", type=Path, default=None, help="write the pairs' figures as JSON here")
    a = ap.parse_args(argv)
    if len(a.pairs) % 2:
        print("esbench: error: pass run folders in pairs (ES, then its placebo)", file=sys.stderr)
        return 2
    rows = []
    try:
        for run_a, run_b in zip(a.pairs[::2], a.pairs[1::2]):
            rows.append(cosine(run_a, run_b, a.base))
            r = rows[-1]
            print(f"seed {r['seed_a']}: cosine {r['cosine']:+.4f} (independent walks: 0 +- {r['null_sd']:.3f}); "
                  f"update norms {r['norm_a']:.4f} and {r['norm_b']:.4f}")
    except UserError as e:
        print(f"esbench: error: {e}", file=sys.stderr)
        return 2
    if a.out:
        from harness.core.atomic import write_json_atomic
        write_json_atomic(a.out, {"command": "python -m harness.tools.delta_cosine " + " ".join(argv or sys.argv[1:]),
                                  "pairs": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
