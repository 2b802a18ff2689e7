"""GPU readiness check for engine=vllm: throughput, ES iteration split, GRPO colocate step, memory.

Builds random-weight models from the real shapes in harness/shapes/ (no download) and, per shape:
  gen      pure vLLM greedy generation at ES's batch shape (prompts x new tokens): tokens/s
  es-hf    one ES iteration on the HF engine: time split (generate, perturb+restore, reward, update)
  es-vllm  the same iteration on vLLM, same member seeds; member rewards compared with es-hf
  grpo     two GRPO steps with TRL's vLLM colocate mode (method=grpo engine=vllm, as methods/grpo.py builds it)
  epg      K = engine.engines_per_gpu = engine.workers = 1, 2, 4: K ES workers (Ray actors, one vLLM engine each), one GPU
and the peak GPU memory of each. Each measurement runs in its own process (memory is released between them).
Exit status 1 when vLLM and HF disagree on member rewards (the first shape, in fp32, is the strict check),
2 when a measurement failed.

    python -m harness.tools.gpu_check                                   # every shape (long: budget ~1 h on one H200)
    python -m harness.tools.gpu_check --shapes qwen2.5-0.5b,qwen2.5-7b --sections gen,es-hf,es-vllm
    python -m harness.tools.gpu_check --smoke                           # CPU: tiny versions of the shapes, code path only
    python -m harness.tools.gpu_check --quick --out results/bench/gpu_check_quick.json   # a short lease: 8 min
    python -m harness.tools.gpu_check --quick --sections check,es-vllm                     # some of --quick's sections

--smoke runs every section on CPU (what a CPU cannot cover is printed with the results; SMOKE_NOT_COVERED);
the vLLM CI venv runs it on the first shape (tests/test_gpu_check.py), so a section that breaks fails CI.
A failed measurement reports the child's exception line and its traceback, without exit noise. --quick is
harness/tools/gpu_check_quick.py; the measurements are gpu_check_measure.py, the child processes (each in a
process group of its own, killed whole at its timeout) gpu_check_children.py.

vLLM runs in the layout GPU runs use: its engine core in a process of its own (VLLM_ENABLE_V1_MULTIPROCESSING
unset, vLLM's default); on CPU the engine sets 0 unless told otherwise (harness/engines/vllm.py CPU_ENV).

The member-reward check uses a token-level toy reward (random weights emit no task answers) and short
completions in fp32 on the first shape: the engines must then pick the same greedy tokens. bf16 shapes
report the reward difference without failing on it (kernel differences legitimately flip near-ties).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from harness.tools.gpu_check_children import TAG, child_error, run_child  # noqa: F401 (child_error: tests)
from harness.tools.gpu_check_measure import build_model, measure
from harness.tools.gpu_check_measure import SMOKE_NOT_COVERED  # noqa: F401 - re-exported
from harness.tools.gpu_check_quick import E2E_METHODS, QUICK_SECTIONS, quick

# torch is imported inside the functions that use it, so that --help answers before torch loads

SHAPES = ("qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b", "qwen2.5-7b", "llama-3.1-8b")
SECTIONS = ("gen", "es-hf", "es-vllm", "grpo", "epg")
# What --smoke runs every code path of, but cannot measure on a CPU (printed with its results).


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--sections", default=None, help=f"the sections to run: some of {', '.join(SECTIONS)} (default "
                    f"all); with --quick some of {', '.join(QUICK_SECTIONS[1:])} (default all; env always runs)")
    ap.add_argument("--prompts", type=int, default=200, help="ES batch: prompts per member (the paper's 200)")
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--population", type=int, default=4, help="members in the timed ES iteration")
    ap.add_argument("--sigma", type=float, default=1e-3)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--check-tokens", type=int, default=16, help="new tokens of the strict fp32 reward check")
    ap.add_argument("--engines-per-gpu", default="1,2,4")
    ap.add_argument("--grpo-prompts", type=int, default=8)
    ap.add_argument("--grpo-generations", type=int, default=8)
    ap.add_argument("--grpo-vllm-memory", type=float, default=0.3)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per measurement")
    ap.add_argument("--out", default=None, help="also write the results as JSON here")
    ap.add_argument("--smoke", action="store_true", help="CPU: tiny bodies, few prompts (checks the code path)")
    ap.add_argument("--quick", action="store_true",
                    help="the short-lease check (8 min on one H100/H200): harness/tools/gpu_check_quick.py")
    ap.add_argument("--deadline", type=int, default=420,
                    help="--quick: seconds after the start by which every section has ended (a section whose budget "
                         "does not fit is skipped; a running one is killed with its process group)")
    ap.add_argument("--quick-sections", default=None, help=argparse.SUPPRESS)  # the older name of --sections
    ap.add_argument("--e2e-methods", default=",".join(E2E_METHODS),
                    help="--quick: the methods e2e runs (ppo when named)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    import torch
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if a.one:
        job = json.loads(a.one)
        torch.set_num_threads(job.get("threads", 1)) if not torch.cuda.is_available() else None
        print(TAG + json.dumps(measure(job)), flush=True)
        return 0
    if a.quick:
        return quick(a)
    unknown = sorted(set((a.sections or ",".join(SECTIONS)).split(",")) - set(SECTIONS))
    if unknown:
        print(f"gpu_check: --sections has {', '.join(unknown)}; use some of {', '.join(SECTIONS)} "
              "(or pass --quick for its sections)")
        return 2
    if not torch.cuda.is_available() and not a.smoke:
        print("gpu_check: no GPU visible (torch.cuda.is_available() is False); run it on a GPU node, "
              "or pass --smoke to exercise the code path on CPU")
        return 2
    if a.smoke:
        a.prompts, a.new_tokens, a.population, a.dtype = min(a.prompts, 16), min(a.new_tokens, 16), 3, "float32"
        a.grpo_prompts, a.grpo_generations = min(a.grpo_prompts, 2), min(a.grpo_generations, 4)
        a.engines_per_gpu = "1,2" if a.engines_per_gpu == "1,2,4" else a.engines_per_gpu
    engine = {"gpu_memory_utilization": a.gpu_memory_utilization,
              "max_model_len": None, "max_num_seqs": max(256, a.prompts)}
    if a.smoke:
        engine = {"max_model_len": 1024, "cpu_kvcache_gb": 1.0}
    results, status = {"args": vars(a), "device": torch.cuda.get_device_name(0) if torch.cuda.is_available()
                       else "cpu (smoke)", "shapes": {}}, 0
    sections = (a.sections or ",".join(SECTIONS)).split(",")
    with tempfile.TemporaryDirectory(prefix="esbench-gpu-check-") as tmp:
        for i, shape in enumerate(a.shapes.split(",")):
            res = results["shapes"][shape] = {}
            strict = i == 0
            dtypes = {"float32"} | ({a.dtype} if not a.smoke else set()) if strict else {a.dtype}
            dirs = {}
            for dt in sorted(dtypes):
                dirs[dt] = str(build_model(shape, Path(tmp) / f"{shape}-{dt}", dt, a.smoke))
            base = dict(prompts=a.prompts, new_tokens=a.new_tokens, population=a.population, sigma=a.sigma,
                        engine=engine, max_model_len=(1024 if a.smoke else 4096), grpo_prompts=a.grpo_prompts,
                        grpo_generations=a.grpo_generations, grpo_vllm_memory=a.grpo_vllm_memory)
            main_job = dict(base, model_dir=dirs[a.dtype], dtype=a.dtype)
            for sec in sections:
                if sec == "epg":
                    for k in [int(x) for x in a.engines_per_gpu.split(",")]:
                        res[f"epg={k}"] = run_child(dict(main_job, section="epg", epg=k), a.timeout)
                        print(shape, f"epg={k}", json.dumps(res[f"epg={k}"]), flush=True)
                elif sec in SECTIONS:
                    res[sec] = run_child(dict(main_job, section=sec), a.timeout)
                    print(shape, sec, json.dumps({k: v for k, v in res[sec].items() if k != "rewards"}), flush=True)
            if "es-hf" in sections and "es-vllm" in sections:
                res["reward_check"] = compare(res.get("es-hf", {}), res.get("es-vllm", {}), strict=False)
                if strict:  # fp32, short completions: must agree
                    job = dict(base, model_dir=dirs["float32"], dtype="float32", new_tokens=a.check_tokens,
                               prompts=min(a.prompts, 64))
                    if job == main_job:  # (the smoke) the iterations above were already this check
                        h, v = res.get("es-hf", {}), res.get("es-vllm", {})
                    else:
                        h, v = (run_child(dict(job, section="es-hf"), a.timeout),
                                run_child(dict(job, section="es-vllm"), a.timeout))
                    res["reward_check_fp32"] = compare(h, v, strict=True)
                    print(shape, "reward check (fp32)", json.dumps(res["reward_check_fp32"]), flush=True)
                    if not res["reward_check_fp32"].get("agree"):
                        status = max(status, 1)
            for dt, d in dirs.items():
                shutil.rmtree(d, ignore_errors=True)
            if any("error" in v for v in res.values() if isinstance(v, dict)):
                status = 2 if status == 0 else status
    if a.smoke:
        results["not_covered_on_cpu"] = list(SMOKE_NOT_COVERED)
    print(json.dumps(results, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(results, indent=1) + "\n")
    for shape, res in results["shapes"].items():
        print(f"{shape}: " + ", ".join(f"{k} {_verdict(k, v)}" for k, v in res.items()))
    if a.smoke:
        print("gpu_check --smoke: every code path ran on CPU; not covered:\n  - " + "\n  - ".join(SMOKE_NOT_COVERED))
    print({0: "gpu_check: ok", 1: "gpu_check: vLLM and HF DISAGREE on member rewards",
           2: "gpu_check: a measurement failed (see 'error')"}[status])
    return status


def _verdict(key: str, v: dict) -> str:
    if "error" in v:
        return "FAILED"
    return ("agree" if v.get("agree") else "DISAGREE") if key.startswith("reward_check") else "ok"


def compare(h: dict, v: dict, strict: bool) -> dict:
    if "rewards" not in h or "rewards" not in v:
        return {"agree": False, "error": "a side failed", "hf": h.get("error"), "vllm": v.get("error")}
    diff = max(abs(x - y) for x, y in zip(h["rewards"], v["rewards"]))
    same_update = h.get("checksum_after_update") == v.get("checksum_after_update")
    return {"agree": diff == 0.0 if strict else diff < 0.05, "max_abs_reward_diff": diff,
            "hf": h["rewards"], "vllm": v["rewards"], "same_master_after_update": same_update}


if __name__ == "__main__":
    sys.exit(main())
