"""What each held-out task costs and scores: rows per split, and a base model's pass@k with its wall time.

    python -m harness.tools.bench_heldout                                   # every conf/task, zoo-1m, 200 prompts, pass@16
    python -m harness.tools.bench_heldout --tasks humaneval csqa --prompts 50 --model zoo-100k --out /tmp/h.json

Each task is evaluated as `eval.tasks=[...]` evaluates it after training (its test split, greedy plus
`--samples` sampled completions per prompt), on the untrained model; the wall time is what the task adds
to a run. Threads are fixed (`--threads`, default 1) so times compare within one run of this script.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from harness.core.paths import CONF_DIR


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="*", default=sorted(p.stem for p in (CONF_DIR / "task").glob("*.yaml")))
    ap.add_argument("--model", default="zoo-1m")
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", help="also write the rows as JSON here")
    return ap


if __name__ == "__main__" and any(a in ("-h", "--help") for a in sys.argv[1:]):
    _parser().parse_args()  # prints the help and exits, before the imports below (torch: 7-9 s)

import torch

from harness.core.atomic import write_json_atomic
from harness.core.policy import load_policy
from harness.evaluation.evaluate import EvalConfig, evaluate
from harness.runner.run import build_task

SPLITS = ("train", "validation", "test")


def rows_per_split(task) -> dict:
    out = {}
    for split in SPLITS:
        try:
            out[split] = len(task.load(split))
        except Exception as e:  # noqa: BLE001 - a task without that split: say why, keep going
            out[split] = f"none ({type(e).__name__})"
    return out


def measure(model: str, name: str, prompts: int, samples: int) -> dict:
    task = build_task(name)
    policy = load_policy(model, "float32", device="cpu")
    cfg = EvalConfig(n_samples=samples, pass_ks=[1, samples], maj_ks=[samples], n_prompts=prompts, n_boot=200,
                     maj_subsets=20, n_examples=0)
    t0 = time.perf_counter()
    res = evaluate(policy, task, "test", cfg)
    wall = time.perf_counter() - t0
    m = res.metrics
    return {"task": name, "rows": rows_per_split(task), "prompts": m["greedy_acc"]["n"], "wall_s": round(wall, 1),
            "run_info": task.run_info() if hasattr(task, "run_info") else None,
            **{k: round(100 * m[k]["mean"], 1) for k in ("greedy_acc", "pass@1", f"pass@{samples}", f"maj@{samples}")
               if k in m}}


def main(argv=None) -> None:
    ap = _parser()
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    rows = []
    print(f"| task | rows train/validation/test | prompts | greedy | pass@1 | pass@{a.samples} | maj@{a.samples} | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    for name in a.tasks:
        r = measure(a.model, name, a.prompts, a.samples)
        rows.append(r)
        split = "/".join(str(r["rows"][s]) for s in SPLITS)
        print(f"| {name} | {split} | {r['prompts']} | {r.get('greedy_acc')} | {r.get('pass@1')} | "
              f"{r.get(f'pass@{a.samples}')} | {r.get(f'maj@{a.samples}')} | {r['wall_s']} |", flush=True)
    if a.out:
        write_json_atomic(a.out, {"model": a.model, "prompts": a.prompts, "samples": a.samples,
                                  "threads": a.threads, "rows": rows})


if __name__ == "__main__":
    main()
