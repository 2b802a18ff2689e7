"""The same GRPO steps in 1 process and in 2 CPU processes (torchrun, gloo): FLOPs charged, steps and wall time.

    python -m harness.tools.bench_ddp                       # zoo-100k, tiny budget, writes under /tmp
    python -m harness.tools.bench_ddp --model zoo-1m --flops 2e10

Both runs use the same global batch (prompts_per_step x num_generations, split over the ranks in
the 2-process run) and completions cut at `--tokens` new tokens, so the charged FLOPs are equal
only if the ledger counts every rank's tokens (harness/core/distributed.py gather_lists). The 2-process
launch is `torchrun --nproc-per-node 2 -m harness ...` (accelerate's own MULTI_CPU launcher needs
mpirun; conf/accelerate/cpu2.yaml). Wall time is the record's training time (setup and
evaluation excluded) and the whole command's.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def grpo_args(model: str, flops: float, tokens: int, root: Path, group: str) -> list[str]:
    return [f"model={model}", "method=grpo", f"budget.flops={flops:g}", "method.prompts_per_step=4",
            "method.num_generations=4", f"method.max_completion_length={tokens}", "method.checkpoint_every=0",
            "method.learning_rate=1e-4", "eval_splits=[]", "device=cpu", f"runs_dir={root}/runs",
            f"results_dir={root}/out", f"group={group}", "stamp=bench"]


def run(nproc: int, model: str, flops: float, tokens: int, root: Path, port: int = 29561) -> dict:
    """Run GRPO in `nproc` processes; return the record's budget, steps, world size and wall times."""
    group = f"ddp{nproc}"
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
                 "--master-port", str(port), "-m", "harness"] if nproc > 1 else [sys.executable, "-m", "harness"])
    start = time.perf_counter()
    done = subprocess.run([*launcher, *grpo_args(model, flops, tokens, root, group)], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"{nproc}-process run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    from harness.core.records import RECORD_NAME, read_record

    rec = read_record(root / "runs" / group / "bench-grpo" / RECORD_NAME)
    return {"processes": nproc, "world_size": rec.train.world_size, "flops": rec.budget.flops_used,
            "samples": rec.budget.samples_used, "steps": rec.budget.steps,
            "step_flops": [s["flops"] for s in rec.steps], "train_s": rec.wall_s["train"],
            "command_s": round(wall, 1)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="zoo-100k")
    ap.add_argument("--flops", type=float, default=3e8)
    ap.add_argument("--tokens", type=int, default=4, help="max new tokens per completion")
    ap.add_argument("--out", type=Path, default=None, help="folder for the runs (default: a fresh temp folder)")
    a = ap.parse_args(argv)
    root = a.out or Path(tempfile.mkdtemp(prefix="bench_ddp_"))
    one, two = (run(n, a.model, a.flops, a.tokens, root) for n in (1, 2))
    for r in (one, two):
        print(json.dumps(r))
    same = one["step_flops"] == two["step_flops"]
    print(f"{a.model}: 1 process {one['flops']:.6g} FLOPs in {one['steps']} steps ({one['train_s']} s train, "
          f"{one['command_s']} s command); 2 processes {two['flops']:.6g} FLOPs in {two['steps']} steps "
          f"({two['train_s']} s train, {two['command_s']} s command); per-step FLOPs identical: {same}")


if __name__ == "__main__":
    main()
