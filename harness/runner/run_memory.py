"""What one run needs in memory, and the planner's GPU table: shared by +plan=true (pricing.py) and the lanes
that pack runs onto a node's GPUs (lanes.py), which must not import the experiment runner pricing.py builds on.
"""
from __future__ import annotations

from omegaconf import DictConfig

from harness.core import gpu_memory as gm
from harness.core.memory_parts import evaluation_memory
from harness.core.method_facts import configure, facts_of

GPUS = {"h100": (989e12, 80.0), "h200": (989e12, 141.0), "a100": (312e12, 80.0)}  # peak bf16 FLOP/s, GB
DEFAULTS = {"gpu": "h100", "mfu": 0.10, "gpus": 8, "prompt_tokens": 150, "eval_batch": 64, "headroom": 0.9,
            "measured": None}


def param_count(shape) -> int:
    """All parameters as `named_parameters()` lists them: layers' matmuls and biases, the embedding, an
    untied head, the RMSNorm vectors (harness/core/gpu_memory.py model_counts)."""
    return gm.model_counts(shape).params


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
    """(bytes per part on one GPU, GPUs needed (0: none fits), a note) for one run of this method: its
    facts.memory on its config, or evaluation only when it declares none.

    `tokens` = prompt + completion per sequence; `engine` the run's conf/engine (a plain dict; None: hf);
    `gpu_gb` the GPU's memory (decimal GB, as GPUS), `dtype` the model's."""
    target = str(method.get("_target_", ""))
    facts = facts_of(target)
    if facts is None or facts.memory is None:
        return evaluation_memory(shape, tokens, eval_batch, gpu_gb, headroom)
    return facts.memory(configure(target, method), shape, tokens, dtype=dtype, engine=dict(engine or {"name": "hf"}),
                        gpu_gb=gpu_gb, headroom=headroom, prompt_tokens=prompt_tokens)
