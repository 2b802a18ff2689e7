"""Where an ES iteration's time goes: generation vs reward vs perturb+restore vs update.

Runs a few ES iterations (methods/es/loop.py) on a zoo model or a local/hub model, with the compute
ledger set in samples so it stops after exactly --iterations, and prints each phase in seconds
and as a share of the iteration. ES's own overhead (perturb + restore + update + reward) should
stay under ~10% of an iteration: generation is the work that buys the reward signal.

    python -m harness.tools.bench_es --model zoo-1m --iterations 3 --population 30 --prompts 64 --threads 2
    python -m harness.tools.bench_es --model zoo-4m --noise-rank 4 --threads 1   # EGGROLL low-rank noise
    python -m harness.tools.bench_es --model zoo-4m --compare-noise-rank 4       # full vs low-rank, side by side

--params / --noise-rank / --antithetic select the ES variants (conf/method/es.yaml).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m harness.tools.bench_es", description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="zoo-1m", help="zoo name, local path or hub id")
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--population", type=int, default=30)
    ap.add_argument("--prompts", type=int, default=64, help="prompts per iteration")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--sigma", type=float, default=1e-3, help="alpha is sigma/2")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    ap.add_argument("--params", default="all", help="ES variant: tensors perturbed (all | norms | ... | regex)")
    ap.add_argument("--noise-rank", type=int, default=None, help="ES variant: low-rank noise of rank r")
    ap.add_argument("--antithetic", action="store_true", help="ES variant: mirrored pairs")
    ap.add_argument("--compare-noise-rank", type=int, default=None, metavar="R",
                    help="run full-rank then rank-R noise and print both and the difference")
    return ap


if __name__ == "__main__" and any(a in ("-h", "--help") for a in sys.argv[1:]):
    _parser().parse_args()  # prints the help and exits, before the imports below (torch: 7-9 s)

import torch

from harness.core.budget import Ledger
from harness.core.policy import load_policy
from methods.es import ES
from tasks.countdown import Countdown

PHASES = ("generate", "reward", "perturb_restore", "update")


def bench(model: str, iterations: int, population: int, prompts: int, max_new_tokens: int,
          sigma: float, dtype: str, **variant) -> list[dict]:
    """Run `iterations` ES iterations in a throwaway run_dir; return the per-iteration log rows.

    `variant`: ES variant settings (params, noise_rank, antithetic)."""
    policy = load_policy(model, dtype=dtype)
    task = Countdown(source="zoo", template="compact", max_new_tokens=max_new_tokens)
    method = ES(population=population, prompts_per_iteration=prompts, sigma=sigma, alpha=sigma / 2,
                generation_batch_size=prompts, checkpoint_every=0, **variant)
    with tempfile.TemporaryDirectory() as run_dir:
        ledger = Ledger(limit=iterations * population * prompts, kind="samples")
        method.train(policy, task, ledger, Path(run_dir))
        return [{**s.extras, "wall_s": s.extras["step_s"]} for s in ledger.history]


def report(rows: list[dict]) -> str:
    """A table of mean seconds and % of the iteration per phase (the first iteration is warm-up if >1)."""
    timed = rows[1:] if len(rows) > 1 else rows
    wall = statistics.fmean(r["wall_s"] for r in timed)
    lines = [f"{'phase':18s} {'s/iter':>8s} {'%':>6s}"]
    for p in PHASES:
        s = statistics.fmean(r[f"time_{p}_s"] for r in timed)
        lines.append(f"{p:18s} {s:8.3f} {100 * s / wall:6.1f}")
    overhead = sum(statistics.fmean(r[f"time_{p}_s"] for r in timed) for p in PHASES if p != "generate")
    lines.append(f"{'iteration (wall)':18s} {wall:8.3f} {100.0:6.1f}")
    lines.append(f"ES overhead (all but generate): {100 * overhead / wall:.1f}% of the iteration "
                 f"(goal < 10%), mean over {len(timed)} of {len(rows)} iterations")
    return "\n".join(lines)


def compare(full: list[dict], low: list[dict], rank: int) -> str:
    """ES's noise work (perturb+restore and update) per iteration, full-rank vs low-rank."""
    mean = lambda rows, k: statistics.fmean(r[k] for r in (rows[1:] if len(rows) > 1 else rows))  # noqa: E731
    lines = [f"{'s/iter':18s} {'full':>8s} {'rank-' + str(rank):>8s} {'low-full':>9s}"]
    for key in ("time_perturb_restore_s", "time_update_s", "wall_s"):
        a, b = mean(full, key), mean(low, key)
        lines.append(f"{key.removeprefix('time_').removesuffix('_s'):18s} {a:8.3f} {b:8.3f} {b - a:+9.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = _parser()
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    common = (args.model, args.iterations, args.population, args.prompts, args.max_new_tokens, args.sigma, args.dtype)
    variant = {"params": args.params, "antithetic": args.antithetic}
    if args.compare_noise_rank is None:
        print(report(bench(*common, noise_rank=args.noise_rank, **variant)))
        return
    full = bench(*common, noise_rank=None, **variant)
    low = bench(*common, noise_rank=args.compare_noise_rank, **variant)
    print("full-rank noise\n" + report(full) + f"\n\nrank-{args.compare_noise_rank} noise\n" + report(low))
    print("\n" + compare(full, low, args.compare_noise_rank))


if __name__ == "__main__":
    main()
