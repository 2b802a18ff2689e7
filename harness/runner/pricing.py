"""Price an experiment before it runs: FLOPs, GPU-hours and per-GPU memory of every planned run.

    python -m harness experiment=qiu2025_table1 +plan=true                      # H100, MFU 0.35
    python -m harness experiment=qiu2025_table1 +plan.gpu=a100 +plan.mfu=0.4
    python -m harness experiment=sigma_sweep +plan.measured=gpu_check.json      # throughput measured by harness.tools.gpu_check

Per run: the FLOPs budget the ledger will spend (budget.flops; a samples budget is priced as that
many completions of plan.prompt_tokens + task.max_new_tokens, an updates budget as the completions
that many of the method's updates score), GPU-hours = FLOPs / (peak dense
bf16 FLOP/s x MFU), and the memory its method holds:
  base (evaluation)  weights + KV cache at the evaluation batch (plan.eval_batch sequences)
  es                 weights + KV cache at method.generation_batch_size sequences (one model; the
                     perturbation is applied in place)
  grpo               16 bytes/param (bf16 weights 2, bf16 grads 2, fp32 master 4, AdamW m and v 8)
                     + a bf16 reference model when beta > 0 + KV at prompts_per_step x num_generations
  ppo                policy and value model 16 bytes/param each + bf16 reference + KV at rollout_batch_size
  method.peft=lora   bf16 frozen weights + 16 bytes per LoRA parameter (rank x (in + out) per target
                     matrix); the reference is the base with the adapter off (no second copy)
KV cache = 2 (K, V) x layers x kv heads x head dim x 2 bytes x sequences x (prompt + completion).
Activations are not modelled: a run "fits" when its states take at most plan.headroom (0.9) of the
GPU's memory. GPUs needed = the smallest count whose FSDP shards (states and KV divided evenly) fit.

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
from harness.core.flops import body_params, generation_flops, head_params
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
    gpus_needed: int = 1

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
    """All parameters: layers' matmuls, embedding, an untied head, and the RMSNorm vectors."""
    d, L = shape.hidden_size, shape.num_hidden_layers
    untied = 0 if getattr(shape, "tie_word_embeddings", False) else head_params(shape)
    return body_params(shape) + head_params(shape) + untied + (2 * L + 1) * d


def lora_param_count(shape, rank: int, targets=LORA_TARGETS) -> int:
    """LoRA's trainable parameters: rank x (in + out) for every targeted matrix of every layer."""
    d, i = shape.hidden_size, shape.intermediate_size
    hd = getattr(shape, "head_dim", None) or d // shape.num_attention_heads
    q, kv = shape.num_attention_heads * hd, shape.num_key_value_heads * hd
    dims = {"q_proj": (d, q), "k_proj": (d, kv), "v_proj": (d, kv), "o_proj": (q, d),
            "gate_proj": (d, i), "up_proj": (d, i), "down_proj": (i, d)}
    unknown = [t for t in targets if t not in dims]
    if unknown:
        raise PricingError(f"LoRA target module {unknown[0]!r} is not a Qwen2/Llama projection; use {', '.join(dims)}")
    return shape.num_hidden_layers * sum(rank * sum(dims[t]) for t in targets)


def kv_cache_bytes(shape, sequences: int, tokens: int, dtype_bytes: int = 2) -> float:
    hd = getattr(shape, "head_dim", None) or shape.hidden_size // shape.num_attention_heads
    return 2.0 * shape.num_hidden_layers * shape.num_key_value_heads * hd * dtype_bytes * sequences * tokens


def method_memory(method: DictConfig, shape, tokens: int, eval_batch: int) -> dict[str, float]:
    """Bytes per part for one run of this method (see the module docstring)."""
    name = str(method.get("_target_", "")).rsplit(".", 1)[-1].lower()
    P = param_count(shape)
    mem: dict[str, float] = {}
    if name == "es":
        mem["weights"] = 2.0 * P
        sequences = int(method.get("generation_batch_size", 200))
    elif name in ("grpo", "ppo"):
        if method.get("peft") == "lora":
            lora = method.get("lora") or {}
            rank = int(lora.get("r", method.get("lora_r", 16)))
            targets = list(lora.get("target_modules", method.get("lora_target_modules", LORA_TARGETS)))
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
    mem["kv_cache"] = kv_cache_bytes(shape, sequences, tokens)
    return mem


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
        mem = method_memory(child.method, shape, prompt + completion, int(opts["eval_batch"]))
        hours = flops / flops_per_second(opts, name, shape, prompt, completion) / 3600
        need = gpus_needed(sum(mem.values()), GPUS[opts["gpu"]][1], float(opts["headroom"]))
        out.append(RunCost(r.index, r.model or name, r.label, r.method or "base", flops, hours, mem, need))
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
                     f"{c.total_bytes / GB:7.1f} {c.gpus_needed:4d}  {parts}")
    lines.append("\nper method:")
    total_h = 0.0
    for m in dict.fromkeys(c.method for c in costs):
        mine = [c for c in costs if c.method == m]
        hours = sum(c.gpu_hours for c in mine)
        total_h += hours
        big = [c for c in mine if c.gpus_needed > 1]
        lines.append(f"  {m:6s} {len(mine):3d} runs  {sum(c.flops for c in mine):9.3g} FLOPs  {hours:9.1f} GPU-h  "
                     f"{len(big)} need > 1 GPU" + (f" (up to {max(c.gpus_needed for c in big)})" if big else ""))
    lines.append(f"  total  {len(costs):3d} runs  {total_h:9.1f} GPU-h = {total_h / int(opts['gpus']):.1f} h on "
                 f"{opts['gpus']} GPUs (training only; evaluation is not priced)")
    too_big = [c for c in costs if c.gpus_needed > 1]
    if too_big:
        lines.append("runs that do not fit one GPU (FSDP across the GPUs named): "
                     + ", ".join(f"{c.index} ({c.gpus_needed})" for c in too_big))
    return "\n".join(lines)


def print_prices(cfg: DictConfig) -> None:
    print(report(*price(cfg)))
