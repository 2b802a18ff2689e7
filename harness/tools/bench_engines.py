"""ES iteration time on the hf and vllm engines, ES's own share of it, and K workers against one.

Runs `--iterations` ES iterations (methods/es/loop.py, methods/es/workers.py) per configuration and reports the
iterations after the first (warm-up), median:
- hf K=1 and vllm K=1 (in process): wall time and its split (generate, perturb+restore, reward, update);
- vllm against pure vLLM generation of the same prompts (an engine with no ES around it, the same
  number of generate calls): ES's own share = 1 - pure / iteration (goal: <= 10%);
- K workers (Ray, one vLLM engine each) against K=1: the speedup (goal >= 1.6x for K=2 on an idle 2-core
  machine; a busy machine shows less). Engine start-up is excluded (first iteration dropped).

    python -m harness.tools.bench_engines --model zoo-4m --population 8 --prompts 64 --iterations 3 --workers 2

A real model at ES's batch shape, HF in bf16 and fp32 (vLLM from the venv that has it), its own task and
chat template; --out merges the figures into a JSON file that the model's card quotes:

    python -m harness.tools.bench_engines --model smollm2-135m-instruct --task arithmetic --engines hf \
        --dtypes bfloat16,float32 --threads 2 --workers 0 --out results/bench/smollm2-135m-instruct.json

--numerics exact,inplace also times the reference code's in-place arithmetic (method.numerics=inplace,
hf only: no fp32 master, restore by subtraction) beside the exact fp32 master at each dtype.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="zoo-4m")
    ap.add_argument("--population", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--sigma", type=float, default=0.01)
    ap.add_argument("--workers", type=int, default=2, help="K for the K-vs-1 comparison (0: skip it)")
    ap.add_argument("--engines", default="hf,vllm")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtypes", default="float32", help="model dtypes to time, e.g. bfloat16,float32")
    ap.add_argument("--task", default=None, help="a conf/task option (default: the zoo's compact Countdown)")
    ap.add_argument("--numerics", default="exact", help="ES arithmetics to time on hf: exact, inplace or both")
    ap.add_argument("--out", type=Path, default=None, help="merge the figures into this JSON file")
    return ap


if __name__ == "__main__" and any(a in ("-h", "--help") for a in sys.argv[1:]):
    _parser().parse_args()  # prints the help and exits, before the imports below (torch: 7-9 s)

import torch

from harness.core.budget import Ledger
from harness.core.policy import load_policy
from methods.es import ES
from tasks.countdown import Countdown

PHASES = ("generate", "perturb_restore", "reward", "update")


def bench_task(name: str | None, max_new_tokens: int):
    """The zoo's compact Countdown, or a conf/task option (its own prompts and grader)."""
    if name is None:
        return Countdown(source="zoo", template="compact", max_new_tokens=max_new_tokens)
    from harness.runner.run import build_task
    return build_task(name, {"max_new_tokens": max_new_tokens})


def run(model: str, engine: str, workers: int, population: int, prompts: int, iterations: int,
        max_new_tokens: int, sigma: float, dtype: str = "float32", task: str | None = None,
        numerics: str = "exact") -> list[dict]:
    policy = load_policy(model, dtype, chat_template="auto", device="cpu")
    task = bench_task(task, max_new_tokens)
    es = ES(population=population, prompts_per_iteration=prompts, sigma=sigma, alpha=sigma / 2,
            generation_batch_size=prompts, checkpoint_every=0, engine={"name": engine, "workers": workers},
            numerics=numerics)
    with tempfile.TemporaryDirectory() as d:
        ledger = Ledger(limit=iterations * population * prompts, kind="samples")
        es.train(policy, task, ledger, Path(d))
    # the step log is the ledger's history (a run keeps it as record.steps); its wall_s is cumulative
    walls = [0.0] + [s.wall_s for s in ledger.history]
    return [{**s.extras, "wall_s": walls[i + 1] - walls[i]} for i, s in enumerate(ledger.history)]


def pure_generation(model: str, population: int, prompts: int, max_new_tokens: int, repeats: int,
                    dtype: str = "float32", task: str | None = None) -> dict:
    """`population` greedy generate calls of the ES batch on an unperturbed vLLM engine (no ES around it)."""
    from harness.engines import make_engine
    policy = load_policy(model, dtype, chat_template="auto", device="cpu")
    batch = bench_task(task, max_new_tokens).load("train")["prompt"][:prompts]
    engine = make_engine(policy, {"name": "vllm"})
    engine.generate(batch, max_new_tokens=max_new_tokens)  # warm-up
    times, tokens = [], 0
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(population):
            g = engine.generate(batch, max_new_tokens=max_new_tokens)
        times.append(time.perf_counter() - t)
        tokens = population * (sum(g.prompt_tokens) + sum(c[0] for c in g.completion_tokens))
    engine.close()
    return {"s": statistics.median(times), "tokens": tokens}


def summary(rows: list[dict]) -> dict:
    rows = rows[1:] or rows  # drop the warm-up iteration
    med = lambda k: statistics.median(r[k] for r in rows)  # noqa: E731
    out = {"wall_s": med("wall_s"), "tokens": med("tokens")}
    out.update({p: med(f"time_{p}_s") for p in PHASES})
    return out


def main(argv=None) -> None:
    ap = _parser()
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = (a.population, a.prompts, a.iterations, a.max_new_tokens, a.sigma)
    res, dtypes = {}, a.dtypes.split(",")
    for dtype in dtypes:
        tag = "" if dtypes == ["float32"] else f" {dtype}"
        for engine in a.engines.split(","):
            for numerics in a.numerics.split(",") if engine == "hf" else ["exact"]:
                name = f"{engine}{tag}{'' if numerics == 'exact' else ' ' + numerics} K=1"
                res[name] = summary(run(a.model, engine, 1, *args, dtype=dtype, task=a.task, numerics=numerics))
        if "vllm" in a.engines:
            res[f"pure vllm{tag} generation"] = pure_generation(a.model, a.population, a.prompts, a.max_new_tokens,
                                                                2, dtype=dtype, task=a.task)
    if a.workers > 1:
        res[f"vllm K={a.workers}"] = summary(run(a.model, "vllm", a.workers, *args, task=a.task))
    print(f"\n{a.model}: population {a.population} x {a.prompts} prompts, {a.max_new_tokens} new tokens, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (a busy machine slows every figure)")
    for name, r in res.items():
        if "wall_s" in r:
            split = ", ".join(f"{p} {r[p]:.2f}s" for p in PHASES)  # phases: summed over workers
            print(f"  {name:22s} iteration {r['wall_s']:.2f}s ({split}); {r['tokens'] / r['wall_s']:.0f} tokens/s")
        else:
            print(f"  {name:22s} {r['s']:.2f}s for the same {a.population} generate calls; "
                  f"{r['tokens'] / r['s']:.0f} tokens/s")
    if "vllm K=1" in res and "pure vllm generation" in res:
        r, p = res["vllm K=1"], res["pure vllm generation"]
        pure = r["tokens"] / (p["tokens"] / p["s"])  # pure generation time of the iteration's own token count
        print(f"  ES's own share on vllm (1 - pure generation of the same tokens / iteration): "
              f"{1 - pure / r['wall_s']:.1%} (goal <= 10%); non-generate time inside the iteration: "
              f"{1 - r['generate'] / r['wall_s']:.1%}")
    if "hf bfloat16 K=1" in res and "hf float32 K=1" in res:
        print(f"  hf bf16 vs fp32 iteration: {res['hf float32 K=1']['wall_s'] / res['hf bfloat16 K=1']['wall_s']:.2f}x")
    if "hf K=1" in res and "vllm K=1" in res:
        print(f"  vllm vs hf iteration: {res['hf K=1']['wall_s'] / res['vllm K=1']['wall_s']:.2f}x")
    if f"vllm K={a.workers}" in res:
        print(f"  K={a.workers} vs K=1 (vllm): {res['vllm K=1']['wall_s'] / res[f'vllm K={a.workers}']['wall_s']:.2f}x "
              f"(goal >= 1.6x for K=2 on an idle 2-core machine)")
    print(json.dumps(res, indent=1))
    if a.out:
        from harness.core.atomic import write_json_atomic
        old = json.loads(a.out.read_text()) if a.out.is_file() else {}
        setting = (f"population {a.population} x {a.prompts} prompts, {a.max_new_tokens} new tokens, "
                   f"task {a.task or 'countdown (zoo, compact)'}, threads {a.threads}")
        command = "python -m harness.tools.bench_engines " + " ".join(argv if argv is not None else sys.argv[1:])
        same = {"load_average": os.getloadavg()[0], "torch": torch.__version__, "command": command}
        # merged per figure: each keeps the command and machine load of the run that measured it (ratios are
        # meaningful within one run only)
        old.setdefault(a.model, {}).setdefault(setting, {}).update({k: {**v, **same} for k, v in res.items()})
        a.out.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(a.out, old)


if __name__ == "__main__":
    main()
