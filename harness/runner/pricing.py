"""Price an experiment before it runs: FLOPs, GPU-hours and per-GPU memory of every planned run.

    python -m harness experiment=qiu2025_table1 +plan=true                      # H100, MFU 0.35
    python -m harness experiment=qiu2025_table1 +plan.gpu=a100 +plan.mfu=0.4
    python -m harness experiment=sigma_sweep +plan.measured=gpu_check.json      # throughput measured by harness.tools.gpu_check

Per run: the FLOPs budget the ledger will spend (budget.flops; a samples budget is priced as that
many completions of plan.prompt_tokens + task.max_new_tokens, an updates budget as the completions
that many of the method's updates score), GPU-hours = FLOPs / (peak dense
bf16 FLOP/s x MFU), and the memory its method holds on one GPU (bytes per parameter in the model's
dtype, model.dtype; harness/core/gpu_memory.py holds the parts the code allocates):
  base (evaluation)  weights + KV cache at the evaluation batch (plan.eval_batch sequences)
  es, engine=hf      weights + the fp32 master (4 bytes/param), its noise buffer and the update's
                     temporaries (largest tensor), + KV cache at method.generation_batch_size sequences
  es, engine=vllm    per GPU, what the code requests: the driver's HF copy, per engine its process's
                     master, two buffers and update temporaries, a reserve per process, and what vLLM
                     is given (gpu_memory_utilization x the GPU, computed from the rest: gpu_memory.py
                     es_vllm_plan); GPUs = engine.workers / engine.engines_per_gpu
  grpo, engine=vllm  per GPU: the trainer (weights, gradients, AdamW in the trained dtype, a reference
                     when beta > 0, activations of one micro-batch, estimated) + the colocated engine's
                     share (gpu_memory.py grpo_vllm_plan, what methods/grpo.py requests); GPUs = the
                     smallest FSDP count at which it fits
  grpo (hf), ppo     16 bytes/param (bf16 weights 2, bf16 grads 2, fp32 master 4, AdamW m and v 8)
                     + a bf16 reference model when beta > 0 + KV at prompts_per_step x num_generations;
                     PPO adds a value model at 16 bytes/param and uses rollout_batch_size
  method.peft=lora   bf16 frozen weights + 16 bytes per LoRA parameter (rank x (in + out) per target
                     matrix); the reference is the base with the adapter off (no second copy)
KV cache = 2 (K, V) x layers x kv heads x head dim x dtype bytes x sequences x (prompt + completion).
On engine=hf activations are not modelled: a run "fits" when its states take at most plan.headroom
(0.9) of the GPU's memory, and GPUs needed = the smallest count whose FSDP shards (states and KV
divided evenly) fit. On engine=vllm a run fits when gpu_memory.py's plan fits (GPUs "no" otherwise,
with the reason).

Stated assumptions: peak dense bf16 FLOP/s H100 SXM 989e12, H200 989e12, A100 312e12; MFU 0.35
(generation-heavy work: decoding is memory-bound, so utilisation stays well below training's ~0.5).
Model shapes come from harness/shapes/ and the zoo (harness/core/model_shapes.py), so no network.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from hydra import compose
from omegaconf import DictConfig, OmegaConf

from harness.core.errors import UserError
from harness.runner.experiment import ExperimentError, _cli, list_runs
from harness.core import gpu_memory as gm
from harness.core.flops import generation_flops, head_params
from harness.core.model_shapes import ShapeError, load_shape, shape_name

GPUS = {"h100": (989e12, 80.0), "h200": (989e12, 141.0), "a100": (312e12, 80.0)}  # peak bf16 FLOP/s, GB
DEFAULTS = {"gpu": "h100", "mfu": 0.35, "gpus": 8, "prompt_tokens": 150, "eval_batch": 64, "headroom": 0.9,
            "measured": None}
GB = 1e9
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class PricingError(UserError, ValueError):
    """The plan cannot be priced (unknown GPU, unreadable model config); the message names the fix."""


@dataclass
class RunCost:
    index: int
    model: str
    label: str
    method: str
    flops: float
    gpu_hours: float
    memory: dict[str, float] = field(default_factory=dict)  # part -> bytes
    gpus_needed: int = 1  # 0: does not fit at any count (`note` says why)
    note: str | None = None

    @property
    def total_bytes(self) -> float:
        return sum(self.memory.values())


def options(cfg: DictConfig) -> dict:
    """plan.* settings: +plan=true takes the defaults, +plan.KEY=VALUE sets one."""
    raw = cfg.get("plan")
    given = OmegaConf.to_container(raw) if isinstance(raw, DictConfig) else {}
    bad = sorted(set(given) - set(DEFAULTS))
    if bad:
        raise PricingError(f"plan.{bad[0]} is unknown; plan keys: {', '.join(sorted(DEFAULTS))}")
    opts = {**DEFAULTS, **given}
    if opts["gpu"] not in GPUS:
        raise PricingError(f"plan.gpu={opts['gpu']!r} is unknown; use one of {', '.join(GPUS)} (peak dense bf16 FLOP/s "
                        "989e12, 989e12, 312e12)")
    if not 0 < float(opts["mfu"]) <= 1:
        raise PricingError(f"plan.mfu={opts['mfu']} must be in (0, 1], e.g. plan.mfu=0.35")
    return opts


def param_count(shape) -> int:
    """All parameters as `named_parameters()` lists them: layers' matmuls and biases, the embedding, an
    untied head, the RMSNorm vectors (harness/core/gpu_memory.py model_counts)."""
    return gm.model_counts(shape).params


def lora_param_count(shape, rank: int, targets=LORA_TARGETS) -> int:
    """LoRA's trainable parameters: rank x (in + out) for every targeted matrix of every layer."""
    d, i = shape.hidden_size, shape.intermediate_size
    hd = getattr(shape, "head_dim", None) or d // shape.num_attention_heads
    q, kv = shape.num_attention_heads * hd, shape.num_key_value_heads * hd
    dims = {"q_proj": (d, q), "k_proj": (d, kv), "v_proj": (d, kv), "o_proj": (q, d),
            "gate_proj": (d, i), "up_proj": (d, i), "down_proj": (i, d)}
    targets = LORA_TARGETS if targets == "all-linear" or list(targets) == ["all-linear"] else targets
    unknown = [t for t in targets if t not in dims]
    if unknown:
        raise PricingError(f"LoRA target module {unknown[0]!r} is not a Qwen2/Llama projection; use {', '.join(dims)}")
    return shape.num_hidden_layers * sum(rank * sum(dims[t]) for t in targets)


def kv_cache_bytes(shape, sequences: int, tokens: int, dtype_bytes: int = 2) -> float:
    return float(gm.kv_cache_bytes(shape, sequences, tokens, dtype_bytes))


def model_dtype(model: DictConfig | dict | None, shape) -> str:
    """model.dtype, with "auto" read from the shape (its torch_dtype), bfloat16 when neither says."""
    dtype = str((model or {}).get("dtype", "bfloat16"))
    if dtype == "auto":
        dtype = str(getattr(shape, "dtype", None) or getattr(shape, "torch_dtype", None) or "bfloat16")
    return dtype.removeprefix("torch.")


def method_memory(method: DictConfig, shape, tokens: int, eval_batch: int, **kwargs) -> dict[str, float]:
    """Bytes per part for one run of this method on one GPU (see the module docstring); kwargs: memory_plan's."""
    return memory_plan(method, shape, tokens, eval_batch, **kwargs)[0]


def memory_plan(method: DictConfig, shape, tokens: int, eval_batch: int, *, dtype: str = "bfloat16",
                engine: dict | None = None, gpu_gb: float = 80.0, headroom: float = 0.9,
                prompt_tokens: int = DEFAULTS["prompt_tokens"]) -> tuple[dict[str, float], int, str | None]:
    """(bytes per part on one GPU, GPUs needed (0: none fits), a note) for one run of this method.

    `tokens` = prompt + completion per sequence; `engine` the run's conf/engine (a plain dict; None: hf);
    `gpu_gb` the GPU's memory (decimal GB, as GPUS), `dtype` the model's."""
    name = str(method.get("_target_", "")).rsplit(".", 1)[-1].lower()
    engine = dict(engine or {"name": "hf"})
    on_vllm = engine.get("name") == "vllm"
    total = int(gpu_gb * GB)
    b = gm.dtype_bytes(dtype)
    counts = gm.model_counts(shape)
    P = counts.params
    if name == "es" and on_vllm:
        plan = gm.es_vllm_plan(shape, dtype, total, engine, driver_on_device=True,
                               wanted_sequences=int(method.get("generation_batch_size", 200)), wanted_tokens=tokens)
        engines = max(1, math.ceil(int(engine.get("workers", 1) or 1) / int(engine.get("engines_per_gpu", 1) or 1)))
        return ({k: float(v) for k, v in plan.parts().items()}, engines if plan.fits else 0,
                plan.warning() if plan.fits else plan.error())
    if name == "grpo" and on_vllm:
        return _grpo_vllm(method, shape, dtype, total, engine, tokens, prompt_tokens)
    mem: dict[str, float] = {}
    if name == "es":
        if method.get("peft") == "lora":  # ES on the adapters' tensors only (engine=hf)
            lora = method.get("lora") or {}
            n = lora_param_count(shape, int(lora.get("r", 8)), lora.get("target_modules", "all-linear"))
            d, i, _, q, _ = gm._dims(shape)
            es = gm.es_hf_resident(gm.ModelCounts(n, int(lora.get("r", 8)) * max(d, i, q), 0), b)
        else:
            es = gm.es_hf_resident(counts, b, str(method.get("numerics", "exact")))
        mem = {"weights": float(b * P), **{k: float(v) for k, v in es.items()}}
        sequences = int(method.get("generation_batch_size", 200))
    elif name in ("grpo", "ppo"):
        if method.get("peft") == "lora":
            lora = method.get("lora") or {}
            rank = int(lora.get("r", method.get("lora_r", 16)))
            targets = lora.get("target_modules", method.get("lora_target_modules", LORA_TARGETS))
            n = lora_param_count(shape, rank, targets)
            mem["weights"] = 2.0 * P
            mem["lora_states"] = 16.0 * n
        else:
            mem["weights"], mem["grads"], mem["fp32_master"], mem["adamw"] = 2.0 * P, 2.0 * P, 4.0 * P, 8.0 * P
            if name == "grpo" and float(method.get("beta", 0)) > 0 or name == "ppo":
                mem["reference"] = 2.0 * P
        if name == "ppo":
            mem["value_model"] = 16.0 * (P - head_params(shape) + shape.hidden_size)
            sequences = int(method.get("rollout_batch_size", 64))
        else:
            sequences = int(method.get("prompts_per_step", 8)) * int(method.get("num_generations", 8))
    else:  # evaluation only
        mem["weights"] = 2.0 * P
        sequences = eval_batch
    mem["kv_cache"] = kv_cache_bytes(shape, sequences, tokens, b if name == "es" else 2)
    if name == "es" and sum(mem.values()) > headroom * gpu_gb * GB:  # ES holds everything on one GPU: no sharding
        return mem, 0, (f"method=es engine=hf keeps the model, its fp32 master and the KV cache on one GPU: "
                        f"{sum(mem.values()) / GB:.1f} GB > {headroom:.0%} of {gpu_gb:.0f} GB; lower "
                        "method.generation_batch_size, or use engine=vllm")
    return mem, gpus_needed(sum(mem.values()), gpu_gb, headroom), None


def _grpo_vllm(method, shape, dtype: str, total: int, engine: dict, tokens: int,
               prompt_tokens: int) -> tuple[dict[str, float], int, str | None]:
    """GRPO with the colocated vLLM: the smallest GPU count (FSDP beyond one) whose plan fits."""
    batch = int(method.get("prompts_per_step", 8)) * int(method.get("num_generations", 8))
    gas = int(method.get("gradient_accumulation_steps", 1))
    lora_params = 0
    if method.get("peft") == "lora":
        lora = method.get("lora") or {}
        lora_params = lora_param_count(shape, int(lora.get("r", 16)), lora.get("target_modules", "all-linear"))
    first = None
    for n in range(1, 65):
        plan = gm.grpo_vllm_plan(shape, dtype, total, engine, sequences=max(1, math.ceil(batch / (gas * n))),
                                 steps_per_generation=gas, prompt_tokens=prompt_tokens,
                                 completion_tokens=tokens - prompt_tokens, beta=float(method.get("beta", 0)),
                                 lora_params=lora_params, checkpointing=bool(method.get("gradient_checkpointing")),
                                 fsdp_shards=n if n > 1 else 0)
        first = first or plan
        if plan.fits:
            return {k: float(v) for k, v in plan.parts().items()}, n, plan.warning()
        if lora_params:  # LoRA is never sharded here (check_fsdp refuses it): one GPU or none
            break
    return {k: float(v) for k, v in first.parts().items()}, 0, first.error()


def gpus_needed(total_bytes: float, gpu_gb: float, headroom: float) -> int:
    """Smallest GPU count whose even FSDP shards of `total_bytes` fit in headroom x memory."""
    return max(1, math.ceil(total_bytes / (headroom * gpu_gb * GB)))


def flops_per_second(opts: dict, model: str, shape, prompt: int, completion: int) -> float:
    """Sustained FLOP/s of one GPU: measured generation throughput when given, else peak x MFU."""
    if opts["measured"]:
        path = Path(str(opts["measured"]))
        try:
            shapes = json.loads(path.read_text())["shapes"]
        except (OSError, ValueError, KeyError):
            raise PricingError(f"plan.measured={path} is not a harness.tools.gpu_check --out JSON; rerun "
                            "python -m harness.tools.gpu_check --out FILE or drop plan.measured") from None
        gen = (shapes.get(shape_name(model)) or {}).get("gen") or {}
        if gen.get("tokens_per_s"):
            return gen["tokens_per_s"] * generation_flops(shape, [prompt], [completion]) / completion
    return GPUS[opts["gpu"]][0] * float(opts["mfu"])


def update_samples(method: DictConfig) -> float:
    """Completions one update scores (harness/runner/run.py STEP_CAPS); sequential: its stages by the split."""
    from harness.runner.run import STEP_CAPS

    if method.get("stages") is not None:
        first, second = (update_samples(method.stages[n]) for n in method.order)
        return method.split * first + (1 - method.split) * second
    return float(STEP_CAPS[str(method._target_).rsplit(".", 1)[1].lower()][1](method))


def price(cfg: DictConfig) -> tuple[dict, list[RunCost]]:
    """The options and one RunCost per planned run (each run's config composed as the experiment would)."""
    opts = options(cfg)
    runs = list_runs(cfg)
    if not runs:
        raise ExperimentError(f"experiment group {cfg.group} has no cells or grids; add cells: or grids:")
    cli = [o for o in _cli(cfg) if not o.lstrip("+~").startswith("plan")]
    out = []
    for r in runs:
        child = compose(config_name="config", overrides=[*cli, *r.overrides])
        name = str(child.model.name_or_path)
        try:
            shape = load_shape(name)
        except ShapeError as e:
            raise PricingError(str(e)) from None
        prompt, completion = int(opts["prompt_tokens"]), int(child.task.max_new_tokens)
        trains = r.method not in (None, "base")
        if not trains:
            flops = 0.0
        elif child.budget.kind == "flops":
            flops = float(child.budget.flops)
        elif child.budget.kind == "updates":  # priced as the completions that many updates score
            flops = child.budget.updates * update_samples(child.method) * generation_flops(shape, [prompt], [completion])
        else:
            flops = float(child.budget.samples) * generation_flops(shape, [prompt], [completion])
        engine = OmegaConf.to_container(child.engine, resolve=True) if child.get("engine") is not None else None
        mem, need, note = memory_plan(child.method, shape, prompt + completion, int(opts["eval_batch"]),
                                      dtype=model_dtype(child.get("model"), shape), engine=engine,
                                      gpu_gb=GPUS[opts["gpu"]][1], headroom=float(opts["headroom"]), prompt_tokens=prompt)
        hours = flops / flops_per_second(opts, name, shape, prompt, completion) / 3600
        out.append(RunCost(r.index, r.model or name, r.label, r.method or "base", flops, hours, mem, need, note))
    return opts, out


def report(opts: dict, costs: list[RunCost]) -> str:
    """The plan as text: one line per run, then the sums per method and the runs that need FSDP."""
    peak, gb = GPUS[opts["gpu"]]
    rate = "measured tokens/s from " + str(opts["measured"]) if opts["measured"] else f"MFU {float(opts['mfu']):.2f}"
    lines = [f"plan on {opts['gpus']} x {opts['gpu'].upper()} ({gb:.0f} GB, peak bf16 {peak:.3g} FLOP/s, {rate}); "
             f"prompt {opts['prompt_tokens']} tokens; memory = states + KV cache, fits at <= "
             f"{float(opts['headroom']):.0%} of a GPU",
             f"{'idx':>4}  {'model':24s} {'run':42s} {'FLOPs':>9} {'GPU-h':>8}  {'GB/run':>7} {'GPUs':>4}  memory"]
    for c in costs:
        parts = " ".join(f"{k}={v / GB:.1f}" for k, v in c.memory.items())
        lines.append(f"{c.index:4d}  {c.model:24s} {c.label[:42]:42s} {c.flops:9.3g} {c.gpu_hours:8.1f}  "
                     f"{c.total_bytes / GB:7.1f} {c.gpus_needed or 'no':>4}  {parts}")
    lines.append("\nper method:")
    total_h = 0.0
    for m in dict.fromkeys(c.method for c in costs):
        mine = [c for c in costs if c.method == m]
        hours = sum(c.gpu_hours for c in mine)
        total_h += hours
        big = [c for c in mine if c.gpus_needed > 1]
        none = [c for c in mine if c.gpus_needed == 0]
        lines.append(f"  {m:6s} {len(mine):3d} runs  {sum(c.flops for c in mine):9.3g} FLOPs  {hours:9.1f} GPU-h  "
                     f"{len(big)} need > 1 GPU" + (f" (up to {max(c.gpus_needed for c in big)})" if big else "")
                     + (f", {len(none)} fit no GPU count" if none else ""))
    lines.append(f"  total  {len(costs):3d} runs  {total_h:9.1f} GPU-h = {total_h / int(opts['gpus']):.1f} h on "
                 f"{opts['gpus']} GPUs (training only; evaluation is not priced)")
    too_big = [c for c in costs if c.gpus_needed > 1 and c.method != "es"]
    if too_big:
        lines.append("runs that do not fit one GPU (FSDP across the GPUs named): "
                     + ", ".join(f"{c.index} ({c.gpus_needed})" for c in too_big))
    for c in costs:
        if c.note:
            lines.append(f"run {c.index}: {c.note}")
    return "\n".join(lines)


def print_prices(cfg: DictConfig) -> None:
    print(report(*price(cfg)))
