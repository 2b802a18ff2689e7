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
    python -m harness.tools.gpu_check --quick --out results/bench/gpu_check_quick.json   # a short rental: < 8 min

--smoke runs every section on CPU (what a CPU cannot cover is printed with the results; SMOKE_NOT_COVERED);
the vLLM CI venv runs it on the first shape (tests/test_gpu_check.py), so a section that breaks fails CI.
A failed measurement reports the child's exception line and its traceback, without exit noise.

The member-reward check uses a token-level toy reward (random weights emit no task answers) and short
completions in fp32 on the first shape: the engines must then pick the same greedy tokens. bf16 shapes
report the reward difference without failing on it (kernel differences legitimately flip near-ties).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.core import paths

# torch is imported inside the functions that use it, so that --help answers before torch loads

SHAPES_DIR = paths.SHAPES_DIR
SHAPES = ("qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b", "qwen2.5-7b", "llama-3.1-8b")
SECTIONS = ("gen", "es-hf", "es-vllm", "grpo", "epg")
TAG = "GPU_CHECK_RESULT "
# What --smoke runs every code path of, but cannot measure on a CPU (printed with its results).
SMOKE_NOT_COVERED = (
    "GPU memory figures (peak allocated, device used) are not measured",
    "bf16: the smoke builds and runs fp32 only (the bf16 reward comparison runs on fp32 numbers)",
    "vLLM runs eager (enforce_eager, no CUDA graphs) with a fixed 1 GiB KV cache instead of gpu_memory_utilization",
    "epg: K Ray workers are K CPU processes (num_cpus=1); sharing one GPU (num_gpus=1/K, memory split K ways) "
    "is not exercised, and K=4 is not run",
    "grpo: no gradient checkpointing and no bf16 autocast (GPU-only settings of methods/grpo.py)",
    "shapes: each shape's architecture and vocabulary with a tiny body (2 layers, hidden 128), not its real size",
)


# ---- one measurement (runs in a child process) ----
def _shape_config(shape: str, smoke: bool) -> dict:
    """The shape's config.json fields; with `smoke`, the same architecture and vocabulary with a tiny body."""
    cfg = json.loads((SHAPES_DIR / f"{shape}.json").read_text())
    if smoke:
        # (a rope scaling's original context must stay below max_position_embeddings: Llama 3.1's is 8192)
        context = max(1024, (cfg.get("rope_scaling") or {}).get("original_max_position_embeddings", 0) + 1)
        cfg.update(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, max_position_embeddings=context)
        cfg.pop("head_dim", None)
    cfg.pop("torch_dtype", None)
    return cfg


def build_model(shape: str, out: Path, dtype: str, smoke: bool) -> Path:
    """A random-weight HF folder of `shape` (config + safetensors + the harness char tokenizer)."""
    import torch
    from harness.core.chartok import build_char_tokenizer
    model, _ = random_model(shape, dtype, "cuda" if torch.cuda.is_available() else "cpu", smoke)
    model.save_pretrained(out)
    tok = build_char_tokenizer()
    tok.save_pretrained(out)
    del model
    gc.collect()
    return out


def toy_reward(completion_ids: list[list[int]]) -> float:
    """Mean over completions of a token-level score in [0, 1] (random weights produce no task answers)."""
    return statistics.fmean(sum(t % 7 for t in ids) / (6 * max(len(ids), 1)) for ids in completion_ids)


def es_iteration(engine, prompts: list[str], new_tokens: int, population: int, sigma: float) -> dict:
    """One ES iteration, timed by phase, on the engine and ES's weight adapter (what ESWorker does per member)."""
    from methods.es.core import zscore
    from methods.es.weights import weights_for
    weights = weights_for(engine)
    seeds = list(range(1000, 1000 + population))
    t = {"perturb_restore": 0.0, "generate": 0.0, "reward": 0.0, "update": 0.0}
    rewards, tokens = [], 0
    t0 = time.perf_counter()
    weights.init_master()
    t_init = time.perf_counter() - t0
    start = time.perf_counter()
    for s in seeds:
        a = time.perf_counter()
        weights.perturb(s, sigma)
        b = time.perf_counter()
        g = engine.generate(prompts, greedy=True, max_new_tokens=new_tokens, batch_size=len(prompts))
        c = time.perf_counter()
        weights.restore()
        d = time.perf_counter()
        rewards.append(toy_reward([x[0] for x in g.completion_ids]))
        e = time.perf_counter()
        tokens += sum(x[0] for x in g.completion_tokens)
        t["perturb_restore"] += (b - a) + (d - c)
        t["generate"] += c - b
        t["reward"] += e - d
    a = time.perf_counter()
    z = zscore(rewards)
    if z is not None:
        weights.update(seeds, z, sigma / 2)
    checksum = weights.checksum()
    t["update"] = time.perf_counter() - a
    wall = time.perf_counter() - start
    return {"wall_s": wall, "split_s": t, "own_share": 1 - t["generate"] / wall, "decoded_tokens": tokens,
            "decode_tokens_per_s": tokens / t["generate"], "rewards": rewards, "init_master_s": t_init,
            "checksum_after_update": checksum}


def measure(job: dict) -> dict:
    """Run one (shape, section) job; returns its figures (and peak GPU memory)."""
    import torch
    from harness.engines import EngineConfig, make_engine
    from harness.core.policy import load_policy
    from methods.es.vllm_ext import EXTENSION
    from methods.es.workers import policy_shell
    from tasks.countdown import Countdown

    gpu = torch.cuda.is_available()
    if gpu:
        torch.cuda.reset_peak_memory_stats()
    section, P, T = job["section"], job["prompts"], job["new_tokens"]
    prompts = Countdown(source="zoo", template="compact", max_new_tokens=T).load("train")["prompt"][:P]
    spec = {"name_or_path": job["model_dir"], "dtype": job["dtype"], "chat_template": False, "system_prompt": None,
            "device": "cuda" if gpu else "cpu"}
    out: dict = {}
    if section == "gen":
        engine = make_engine(policy_shell(spec), EngineConfig(name="vllm", **job["engine"]))
        engine.generate(prompts[:8], max_new_tokens=8)  # warm-up
        times = []
        for _ in range(2):
            a = time.perf_counter()
            g = engine.generate(prompts, max_new_tokens=T)
            times.append(time.perf_counter() - a)
        toks = sum(c[0] for c in g.completion_tokens)
        out = {"s": min(times), "decoded_tokens": toks, "tokens_per_s": toks / min(times),
               "sequences": len(prompts), **_device_memory()}
        engine.close()
    elif section in ("es-hf", "es-vllm"):
        if section == "es-hf":
            engine = make_engine(load_policy(job["model_dir"], job["dtype"], device=spec["device"]))
        else:
            engine = make_engine(policy_shell(spec), EngineConfig(name="vllm", **job["engine"]), extension=EXTENSION)
        engine.generate(prompts[:8], max_new_tokens=8)  # warm-up
        out = es_iteration(engine, prompts, T, job["population"], job["sigma"])
        out.update(_device_memory())
        engine.close()
    elif section == "grpo":
        out = grpo_step(job, prompts)
    elif section == "epg":
        out = engines_per_gpu(job)
    elif section == "mem7b":
        out = es_memory(job)
    elif section == "e2e":
        out = end_to_end(job)
    if gpu:
        free, total = torch.cuda.mem_get_info()
        out["peak_torch_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
        out["device_used_at_end_gib"] = (total - free) / 2**30
    return out


def _device_memory() -> dict:
    """GPU memory in use now (all of this process's allocations, vLLM's KV cache included)."""
    import torch
    if not torch.cuda.is_available():
        return {}
    free, total = torch.cuda.mem_get_info()
    return {"device_used_gib": (total - free) / 2**30, "device_total_gib": total / 2**30}


def grpo_step(job: dict, prompts: list[str]) -> dict:
    """GRPO optimizer steps with TRL generating on a colocated vLLM: `method=grpo engine=vllm` as a run builds it."""
    import torch
    from harness.core.budget import Ledger
    from harness.core.policy import load_policy
    from methods import grpo
    from tasks.countdown import Countdown

    gpu = torch.cuda.is_available()
    if not gpu and (not job.get("real_settings") or job["grpo_engine"] == "vllm"):
        # CPU smoke with vLLM: settings TRL does not expose (as tests/test_engines.py does)
        import trl.generation.vllm_generation as trl_vllm
        real = trl_vllm.LLM
        trl_vllm.LLM = lambda **kw: real(**kw, enforce_eager=True, kv_cache_memory_bytes=2**30)
    policy = load_policy(job["model_dir"], job["dtype"], device="cuda" if gpu else "cpu")

    class Toy(Countdown):
        def reward(self, completions, completion_ids=None, **kw):
            return [sum(t % 7 for t in ids) / (6 * max(len(ids), 1)) for ids in completion_ids]

    if job.get("real_settings"):  # --quick: what a run's conf/method/grpo.yaml and conf/engine give (share computed)
        engine = {"name": job["grpo_engine"]}
        settings = dict(learning_rate=1e-6, beta=1e-3, gradient_checkpointing=False)
    else:
        engine = {"name": "vllm", "gpu_memory_utilization": job["grpo_vllm_memory"],
                  "max_model_len": job["max_model_len"]}
        settings = dict(learning_rate=1e-6, beta=0.0, gradient_checkpointing=gpu)
    if gpu:
        torch.cuda.reset_peak_memory_stats()
    method = grpo.GRPO(prompts_per_step=job["grpo_prompts"], num_generations=job["grpo_generations"],
                       max_completion_length=job["new_tokens"], max_steps=2, engine=engine, **settings)
    ledger = Ledger(limit=1e30)
    with tempfile.TemporaryDirectory() as d:
        a = time.perf_counter()
        summary = method.train(policy, Toy(source="zoo", template="compact", max_new_tokens=job["new_tokens"]),
                               ledger, Path(d))
        total = time.perf_counter() - a
    # the step log is the ledger's history (what a run keeps in its record); wall_s is cumulative train time
    walls = [s.wall_s for s in ledger.history]
    out = {"total_s": total, "steps": summary["steps"], "step_s": [b - a for a, b in zip([0.0] + walls, walls)],
           "token_cross_check": "held (GRPO raises otherwise)", "flops": ledger.flops, "engine": engine["name"],
           **settings}
    if job.get("real_settings"):  # the planner's estimate of the trainer beside what the process peaked at
        from harness.core import gpu_memory as gm
        shape = policy.model.config
        counts = gm.model_counts(shape)
        b = gm.dtype_bytes(job["dtype"])
        prompt = max(len(policy.tokenizer(p).input_ids) for p in prompts[:job["grpo_prompts"]])
        micro, gas = grpo.micro_batches(method.config, shape, 1, prompt, job["new_tokens"], b)
        out.update(micro_batch=micro, micro_batches=gas, trained_dtype=summary.get("trained_dtype"))
        # GRPO trains an fp32 copy (weights, gradients, AdamW at 4 B each) beside a reference in the model's dtype
        parts = gm.trainer_resident(shape, counts, param_bytes=4, reference_bytes=b, sequences=micro,
                                    tokens=prompt + job["new_tokens"], completion_tokens=job["new_tokens"],
                                    activation_dtype_bytes=b)
        out["predicted_gib"] = {k: v / 2**30 for k, v in parts.items()}
        out["predicted_total_gib"] = sum(parts.values()) / 2**30
    return out


def engines_per_gpu(job: dict) -> dict:
    """ES iterations with K = engines_per_gpu Ray workers sharing one GPU (the second iteration timed)."""
    from harness.core.budget import Ledger
    from methods.es import ES
    from methods.es.workers import policy_shell
    from tasks.countdown import Countdown

    k = job["epg"]
    # the driver only names parameters: a meta-device model (the weights live in the workers' engines)
    policy = policy_shell({"name_or_path": job["model_dir"], "dtype": job["dtype"], "chat_template": False,
                           "system_prompt": None})
    task = Countdown(source="zoo", template="compact", max_new_tokens=job["new_tokens"])
    pop = max(job["population"], k)
    engine = {"name": "vllm", **job["engine"], "engines_per_gpu": k, "workers": k}
    es = ES(population=pop, prompts_per_iteration=job["prompts"], sigma=job["sigma"], alpha=job["sigma"] / 2,
            generation_batch_size=job["prompts"], checkpoint_every=0, engine=engine, use_ray=True, threads=1)
    ledger = Ledger(limit=2 * pop * job["prompts"], kind="samples")
    with tempfile.TemporaryDirectory() as d:
        es.train(policy, task, ledger, Path(d))
    last = ledger.history[-1].extras  # the step log is the ledger's history (what a run keeps in its record)
    return {"workers": k, "population": pop, "iterations": ledger.steps, "iteration_s": last["step_s"],
            "sequences_per_s": pop * job["prompts"] / last["step_s"], "tokens_per_s": last["tokens"] / last["step_s"]}


# ---- --quick: the check a short rental fits (one H100/H200, under 8 minutes) ----
# What each --quick section measures, in order. Sections that need vLLM are skipped (and say so) where it is
# not installed; a global deadline (--deadline) skips whatever would start after it, so the JSON always comes back.
QUICK_SECTIONS = ("env", "es-hf", "gen", "es-vllm", "grpo", "mem7b", "e2e")
QUICK_SHAPE, QUICK_BIG, QUICK_E2E = "qwen2.5-1.5b", "qwen2.5-7b", "qwen2.5-0.5b"
CUDA13_HINT = ("the pinned wheels are CUDA 13 builds (torch 2.13.0, vllm 0.27.1): they need an NVIDIA driver >= 580; "
               "check `nvidia-smi` and CUDA_VISIBLE_DEVICES")


def environment() -> dict:
    """The machine, the driver and the stack: what a result was measured on, and whether a GPU is usable."""
    import torch
    from importlib.metadata import PackageNotFoundError, version

    out = {"torch": torch.__version__, "torch_cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available()}
    for pkg in ("transformers", "trl", "accelerate", "vllm", "ray", "hydra-core"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             text=True, capture_output=True, timeout=30)
        out["nvidia_smi"] = smi.stdout.strip() or smi.stderr.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        out["nvidia_smi"] = f"not runnable: {e}"
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        out.update(device=p.name, capability=f"{p.major}.{p.minor}", total_gib=p.total_memory / 2**30,
                   multiprocessors=p.multi_processor_count)
    return out


def random_model(shape: str, dtype: str, device: str, smoke: bool):
    """A random-weight model of `shape` built on `device` directly (no folder: the 7B shape is 15 GB in bf16)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = _shape_config(shape, smoke)
    config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    torch.manual_seed(0)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype)), config


def es_memory(job: dict) -> dict:
    """The ES master at the 7B shape on one GPU (engine=hf: weights + fp32 master + buffer + update temporaries):
    peak bytes measured beside the planner's model (harness/core/gpu_memory.py), and perturb/restore per member."""
    import torch
    from harness.core import gpu_memory as gm
    from methods.es.core import zscore
    from methods.es.weights import HFWeights

    gpu = torch.cuda.is_available()
    device = "cuda" if gpu else "cpu"
    model, config = random_model(job["shape"], job["dtype"], device, job["smoke"])
    counts = gm.model_counts(config)
    predicted = {"weights": counts.params * gm.dtype_bytes(job["dtype"]),
                 **gm.es_hf_resident(counts, gm.dtype_bytes(job["dtype"]))}
    weights = HFWeights(list(model.named_parameters()))
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    if gpu:
        torch.cuda.reset_peak_memory_stats()
    a = time.perf_counter()
    weights.init_master()
    sync()
    init_s = time.perf_counter() - a
    times = []
    for seed in range(3):
        a = time.perf_counter()
        weights.perturb(seed, 1e-3)
        weights.restore()
        sync()
        times.append(time.perf_counter() - a)
    a = time.perf_counter()
    weights.update([0, 1, 2], zscore([0.1, 0.5, 0.3]), 5e-4)
    sync()
    update_s = time.perf_counter() - a
    out = {"shape": job["shape"], "params": counts.params, "predicted_gib": {k: v / 2**30 for k, v in predicted.items()},
           "predicted_total_gib": sum(predicted.values()) / 2**30, "init_master_s": init_s,
           "perturb_restore_s_per_member": statistics.median(times), "update_s_3_members": update_s}
    if gpu:
        out["measured_peak_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
        out["measured_over_predicted"] = out["measured_peak_allocated_gib"] / out["predicted_total_gib"]
    return out


def end_to_end(job: dict) -> dict:
    """`python -m harness` runs on the device (base, es, grpo) on a random-weight model folder: the run path a
    user meets (config, driver, method, evaluation, record), each in its own process, seconds and exit status."""
    import torch
    runs = {
        "base": ["method=base"],
        "es": ["method=es", "method.population=4", "method.prompts_per_iteration=8", "budget.kind=samples",
               "budget.samples=64"],
        "grpo": ["method=grpo", "method.prompts_per_step=2", "method.num_generations=4", "budget.kind=samples",
                 "budget.samples=16", "method.checkpoint_every=0"],
        "ppo": ["method=ppo", "method.prompts_per_step=4", "method.rollout_batch_size=4", "budget.kind=samples",
                "budget.samples=8", "method.checkpoint_every=0"],
    }
    out = {}
    with tempfile.TemporaryDirectory(prefix="esbench-e2e-") as d:
        for name, overrides in [(k, v) for k, v in runs.items() if k in job.get("methods", runs)]:
            cmd = [sys.executable, "-m", "harness", f"model={job['model_dir']}", "task=countdown",
                   f"task.max_new_tokens={job['new_tokens']}", "eval.n_prompts=16", "eval.n_samples=2",
                   "eval.pass_ks=[1,2]", "eval.maj_ks=[2]", "eval.n_boot=50", "eval.maj_subsets=10",
                   f"runs_dir={d}/runs", f"results_dir={d}/out", "group=gpu_check", f"stamp=e2e-{name}",
                   "analysis.entropy_every_flops_fraction=null",
                   f"device={'cuda' if torch.cuda.is_available() else 'cpu'}", *overrides]
            a = time.perf_counter()
            p = subprocess.run(cmd, text=True, capture_output=True, timeout=job["timeout"])
            res = {"exit": p.returncode, "s": time.perf_counter() - a}
            if p.returncode:
                res["error"] = child_error(p.stderr + "\n" + p.stdout)["exception"]
            else:
                record = next(Path(d, "runs", "gpu_check").glob(f"e2e-{name}*/**/record.json"), None)
                if record is not None:  # what the run itself recorded (a missing key reads as None)
                    r = json.loads(record.read_text())
                    res.update(status=r.get("status"), device=r.get("config", {}).get("device"),
                               steps=r.get("budget", {}).get("steps"), wall_s=r.get("wall_s"),
                               test_greedy=r.get("metrics", {}).get("test", {}).get("greedy_acc", {}).get("mean"))
            out[name] = res
    return out


# ---- the orchestration (parent process) ----
# Lines a child prints that say nothing about why it failed: nanobind's leak report (triton's bindings,
# at every exit of a process that imported vLLM), traceback carets, progress bars, torch.distributed's
# "[rank0]: " prefix.
EXIT_NOISE = re.compile(r"^(nanobind: |See https://nanobind| - (leaked|\.\.\. skipped)|\s*[\^~]*\s*$)")
PROGRESS = re.compile(r"\d+%\|| \d+% Completed \|")
RANK = re.compile(r"^\[rank\d+\]: ")


def child_error(output: str, keep: int = 15) -> dict:
    """The real error of a failed child: its last exception line and the lines before it, exit noise removed."""
    lines = [RANK.sub("", x) for x in output.replace("\r", "\n").splitlines()]
    lines = [x for x in lines if not EXIT_NOISE.match(x) and not PROGRESS.search(x)]
    starts = [i for i, x in enumerate(lines) if x.startswith("Traceback (most recent call last)")]
    if starts:  # keep the last traceback: its frames, then the exception line(s) after them
        tb = lines[starts[-1]:]
        end = next((i for i in range(1, len(tb)) if not tb[i].startswith((" ", "\t"))), len(tb) - 1)
        exception = tb[end]
        return {"exception": exception, "tail": (tb[:end + 1])[-keep:]}
    return {"exception": lines[-1] if lines else "(no output)", "tail": lines[-keep:]}


def run_child(job: dict, timeout: int) -> dict:
    a = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-m", "harness.tools.gpu_check", "--one", json.dumps(job)], text=True,
                           capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout}s"}
    lines = [x[len(TAG):] for x in p.stdout.splitlines() if x.startswith(TAG)]
    if p.returncode or not lines:
        err = child_error(p.stderr + "\n" + p.stdout)
        return {"error": f"exit {p.returncode}: {err['exception']}", "tail": err["tail"]}
    res = json.loads(lines[-1])
    res["process_s"] = time.perf_counter() - a
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--sections", default=",".join(SECTIONS))
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
                    help="the short-rental check (under 8 min on one H100/H200): see QUICK_SECTIONS")
    ap.add_argument("--deadline", type=int, default=420, help="--quick: seconds after which no section starts")
    ap.add_argument("--quick-sections", default=",".join(QUICK_SECTIONS[1:]),
                    help="--quick: the sections to run (env always runs first)")
    ap.add_argument("--e2e-methods", default="base,es,grpo,ppo", help="--quick: the methods e2e runs")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    import torch
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engines in the measuring process: its memory counts
    if a.one:
        job = json.loads(a.one)
        torch.set_num_threads(job.get("threads", 1)) if not torch.cuda.is_available() else None
        print(TAG + json.dumps(measure(job)), flush=True)
        return 0
    if a.quick:
        return quick(a)
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
    sections = a.sections.split(",")
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
                import shutil
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


def quick(a) -> int:
    """--quick: env, ES on HF at the 1.5B shape (and on vLLM where installed), the 7B master's memory, one GRPO
    step at a run's settings, and `python -m harness` end to end; JSON rewritten after every section."""
    import torch
    from harness.engines import vllm_available

    start = time.perf_counter()
    if a.smoke:  # the deadline is a rental's; a CPU smoke on a busy machine takes what it takes
        a.deadline = max(a.deadline, 3600)
    out = Path(a.out or f"outputs/gpu_check/quick-{time.strftime('%Y%m%d-%H%M%S')}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    gpu = torch.cuda.is_available()
    no_vllm = vllm_available()
    results = {"mode": "quick" + (" (smoke: CPU, tiny bodies)" if a.smoke else ""), "env": environment(),
               "sections": {}, "settings": {}}

    def save() -> None:
        results["elapsed_s"] = time.perf_counter() - start
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(results, indent=1) + "\n")
        tmp.replace(out)

    if not gpu and not a.smoke:
        results["error"] = f"no GPU visible (torch.cuda.is_available() is False); {CUDA13_HINT}"
        save()
        print(f"gpu_check: {results['error']}")
        return 2
    prompts, tokens, population = (16, 16, 3) if a.smoke else (a.prompts, a.new_tokens, a.population)
    dtype = "float32" if a.smoke else a.dtype
    results["settings"] = {
        "es": f"{population} members x {prompts} prompts x {tokens} new tokens (random weights never stop early): "
              f"{population / 30 * tokens / 1024:.1%} of a paper iteration's 30 x 200 x <=1024",
        "grpo": f"{a.grpo_prompts} prompts x {a.grpo_generations} generations x {tokens} tokens, beta 1e-3, lr 1e-6, "
                "no gradient checkpointing (conf/method/grpo.yaml), engine " + ("hf" if no_vllm else "vllm"),
        "dtype": dtype, "vllm": no_vllm or "installed"}
    status = 0
    with tempfile.TemporaryDirectory(prefix="esbench-gpu-quick-") as tmp:
        models = {}
        for shape in (QUICK_SHAPE, QUICK_E2E):
            a_ = time.perf_counter()
            models[shape] = str(build_model(shape, Path(tmp) / shape, dtype, a.smoke))
            results["settings"][f"build_{shape}_s"] = time.perf_counter() - a_
        base = dict(prompts=prompts, new_tokens=tokens, population=population, sigma=a.sigma, dtype=dtype,
                    model_dir=models[QUICK_SHAPE], smoke=a.smoke, grpo_prompts=a.grpo_prompts,
                    grpo_generations=a.grpo_generations, real_settings=True, grpo_engine="hf" if no_vllm else "vllm",
                    engine={"max_model_len": 1024, "cpu_kvcache_gb": 1.0} if a.smoke else
                    {"max_model_len": None, "max_num_seqs": max(256, prompts)})
        jobs = {"es-hf": dict(base, section="es-hf"), "mem7b": dict(base, section="mem7b", shape=QUICK_BIG),
                "gen": dict(base, section="gen"), "es-vllm": dict(base, section="es-vllm"),
                "grpo": dict(base, section="grpo"),
                "e2e": dict(base, section="e2e", model_dir=models[QUICK_E2E], new_tokens=min(tokens, 64),
                            timeout=a.timeout, methods=a.e2e_methods.split(","))}
        wanted = a.quick_sections.split(",")
        unknown = set(wanted) - set(jobs)
        if unknown:
            print(f"gpu_check: --quick-sections has {sorted(unknown)}; use some of {', '.join(jobs)}")
            return 2
        for sec in [s for s in ("es-hf", "mem7b", "gen", "es-vllm", "grpo", "e2e") if s in wanted]:
            left = a.deadline - (time.perf_counter() - start)
            if sec in ("gen", "es-vllm") and no_vllm:
                res = {"skipped": no_vllm}
            elif left <= 0:
                res = {"skipped": f"deadline: {a.deadline}s had passed"}
            else:
                res = run_child(jobs[sec], int(min(a.timeout, max(left, 60))))
                status = max(status, 2 if "error" in res or any(
                    isinstance(v, dict) and v.get("exit") for v in res.values()) else 0)
            results["sections"][sec] = res
            save()
            print(sec, json.dumps({k: v for k, v in res.items() if k != "rewards"}), flush=True)
    if a.smoke:
        results["not_covered_on_cpu"] = list(SMOKE_NOT_COVERED)
    save()
    print(f"gpu_check --quick: {'ok' if status == 0 else 'a section failed (see error)'}; "
          f"{results['elapsed_s']:.0f} s; JSON: {out}")
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
