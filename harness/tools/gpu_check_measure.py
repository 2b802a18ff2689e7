"""harness.tools.gpu_check's measurements: each runs in a child process (`--one JOB`), so memory is released
between them; harness/tools/gpu_check.py (the full check) and gpu_check_quick.py (--quick) orchestrate them.

Models are random-weight builds of the real shapes in harness/shapes/ (no download); with `smoke` the same
architecture and vocabulary with a tiny body, for CPU.
"""
from __future__ import annotations

import gc
import hashlib
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from harness.core import paths

# torch is imported inside the functions that use it, so that --help answers before torch loads

SHAPES_DIR = paths.SHAPES_DIR

# what a --smoke run on CPU cannot cover (printed with its results, by the full and the quick check)
SMOKE_NOT_COVERED = (
    "GPU memory figures (peak allocated, device used) are not measured",
    "bf16: the smoke builds and runs fp32 only (the bf16 reward comparison runs on fp32 numbers)",
    "vLLM runs eager (enforce_eager, no CUDA graphs) with a fixed 1 GiB KV cache instead of gpu_memory_utilization",
    "epg: K Ray workers are K CPU processes (num_cpus=1); sharing one GPU (num_gpus=1/K, memory split K ways) "
    "is not exercised, and K=4 is not run",
    "grpo: no gradient checkpointing and no bf16 autocast (GPU-only settings of methods/grpo.py)",
    "shapes: each shape's architecture and vocabulary with a tiny body (2 layers, hidden 128), not its real size",
)


def vllm_layout() -> str:
    """Where vLLM's engine core runs for engines this process builds (VLLM_ENABLE_V1_MULTIPROCESSING; vLLM's
    default is 1, its own process, which is what GPU runs use)."""
    return "in process" if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0" else "own process"


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
    rewards, outputs, tokens = [], [], 0
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
        outputs.append(hashlib.sha256(json.dumps(g.completion_ids).encode()).hexdigest()[:16])
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
            "decode_tokens_per_s": tokens / t["generate"], "rewards": rewards, "outputs_sha256": outputs,
            "init_master_s": t_init,
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
    section, P, T = job["section"], job.get("prompts", 0), job.get("new_tokens", 1)
    prompts = Countdown(source="zoo", template="compact", max_new_tokens=T).load("train")["prompt"][:P] if P else []
    spec = {"name_or_path": job.get("model_dir"), "dtype": job.get("dtype"), "chat_template": False,
            "system_prompt": None, "device": "cuda" if gpu else "cpu"}
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
    elif section == "build":  # --quick: the models, built here so that the orchestrating process holds no GPU memory
        for name, (shape, folder, dtype) in job["builds"].items():
            a = time.perf_counter()
            build_model(shape, Path(folder), dtype, job["smoke"])
            out[f"{name}_s"] = time.perf_counter() - a
    if section in ("gen", "es-vllm", "epg"):  # read after the engines started: on CPU they set it (CPU_ENV)
        out["vllm_layout"] = vllm_layout()
    if gpu:
        free, total = torch.cuda.mem_get_info()
        out["peak_torch_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
        out["device_used_at_end_gib"] = (total - free) / 2**30
    return out


def _device_memory() -> dict:
    """GPU memory in use now, device-wide: every process's allocations, an engine core's own process and its KV cache
    included."""
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
        # as the planner prices it (methods/grpo_config.py grpo_memory): GRPO trains an fp32 copy (weights,
        # gradients, AdamW at 4 B each) beside an fp32 reference (beta > 0, methods/grpo.py), and with several
        # micro-batches per step every gradient is alive through each forward
        parts = gm.trainer_resident(shape, counts, param_bytes=4, reference_bytes=4 if settings["beta"] > 0 else 0,
                                    sequences=micro, tokens=prompt + job["new_tokens"],
                                    completion_tokens=job["new_tokens"], activation_dtype_bytes=b, micro_batches=gas)
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
