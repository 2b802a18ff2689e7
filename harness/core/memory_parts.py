"""The pieces a method's memory model (MethodFacts.memory, harness/core/method_facts.py) is built from.

The planner (harness/runner/pricing.py) asks each method for its bytes per part on one GPU; the
methods build their answers from these and from harness/core/gpu_memory.py, so the byte counts of
LoRA adapters, a policy-gradient trainer's states and the FSDP GPU count are written once.
"""
from __future__ import annotations

import math

from harness.core import gpu_memory as gm
from harness.core.errors import UserError

GB = 1e9
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class PricingError(UserError, ValueError):
    """The plan cannot be priced (unknown GPU, unreadable model config); the message names the fix."""


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


def gpus_needed(total_bytes: float, gpu_gb: float, headroom: float) -> int:
    """Smallest GPU count whose even FSDP shards of `total_bytes` fit in headroom x memory."""
    return max(1, math.ceil(total_bytes / (headroom * gpu_gb * GB)))


def trainer_states(shape, lora=None, reference: bool = False, reference_bytes: float = 2.0) -> dict[str, float]:
    """A policy-gradient trainer's states: 16 bytes/param (GRPO and PPO train an fp32 copy under bf16 autocast:
    weights 4, grads 4, AdamW m and v 8) and a reference when `reference`, at `reference_bytes` per parameter
    (GRPO loads it in fp32, the policy's precision, so the KL is 0 before the first update: 4; PPO's is in the
    model's dtype: 2); with `lora` (r, target_modules)
    bf16 frozen weights and 16 bytes per adapter parameter, the reference being the base with the adapter off
    (no second copy)."""
    P = gm.model_counts(shape).params
    if lora is not None:
        return {"weights": 2.0 * P, "lora_states": 16.0 * lora_param_count(shape, lora.r, lora.target_modules)}
    mem = {"weights": 4.0 * P, "grads": 4.0 * P, "adamw": 8.0 * P}
    if reference:
        mem["reference"] = reference_bytes * P
    return mem


def trainer_on_gpus(parts_for, gpu_gb: float, headroom: float, what: str, max_gpus: int = 64
                    ) -> tuple[dict[str, float], int, str | None]:
    """(bytes per part on one GPU, GPUs, note): the smallest FSDP count n (up to `max_gpus`; 1 for a trainer
    that is never sharded) whose `parts_for(n)` (None: n does not split the step) fit `headroom` x the GPU,
    or n = 0 and a one-line note with the bytes needed and available when none does."""
    first = None
    for n in range(1, max_gpus + 1):
        parts = parts_for(n)
        if parts is None:
            continue
        first = first or parts
        if sum(parts.values()) <= headroom * gpu_gb * GB:
            return {k: float(v) for k, v in parts.items()}, n, None
    need, have = int(sum(first.values())), int(headroom * gpu_gb * GB)
    largest = max(first, key=first.get)
    return ({k: float(v) for k, v in first.items()}, 0,
            f"{what} does not fit: one GPU needs {need:,} bytes ({need / GB:.1f} GB, {largest} "
            f"{first[largest] / GB:.1f} GB the largest part) but {headroom:.0%} of the GPU is {have:,} bytes"
            + (f" and no FSDP count up to {max_gpus} fits" if max_gpus > 1 else "")
            + "; lower the micro-batch (method.micro_batch_size, method.train_micro_batch), set "
              "method.gradient_checkpointing=true where the method has it, or use a larger GPU")


def evaluation_memory(shape, tokens: int, eval_batch: int, gpu_gb: float, headroom: float
                      ) -> tuple[dict[str, float], int, str | None]:
    """A method that declares no memory model (base, evaluation only): bf16 weights + the KV cache at the
    evaluation batch, on the smallest GPU count whose FSDP shards fit."""
    mem = {"weights": 2.0 * gm.model_counts(shape).params, "kv_cache": kv_cache_bytes(shape, eval_batch, tokens, 2)}
    return mem, gpus_needed(sum(mem.values()), gpu_gb, headroom), None
