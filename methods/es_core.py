"""The pure pieces of ES that the in-place loop (methods/es.py), the worker population
(methods/es_population.py) and the generation engines (harness/engines) share: the noise streams,
perturb/restore, the update, z-scores, and the checkpoint's name and resumable settings.

Noise is defined per parameter (member seed, index in the HF model's `named_parameters()`), so an
engine that holds the weights in another layout (vLLM's fused qkv) still draws the same noise.
"""
from __future__ import annotations

import statistics

import torch

CKPT = "es_checkpoint"
# settings a resumed run may change: bounds, checkpoint cadence, batching and where members are scored
LOOSE = ("max_iterations", "checkpoint_every", "generation_batch_size", "engine", "workers", "use_ray",
         "ray_address", "threads")
_MASK64 = (1 << 64) - 1


def wants_population(engine=None, workers: int = 1, use_ray: bool | None = None) -> bool:
    """True when ES scores its members on engine workers (methods/es_population.py) instead of in place."""
    name = engine if isinstance(engine, str) or engine is None else dict(engine).get("name", "hf")
    return (name or "hf") != "hf" or workers > 1 or bool(use_ray)


# ---- the core operations (small and pure, so tests can check them one by one) ----
def noise_seed(member_seed: int, index: int) -> int:
    """Seed of the independent noise stream of (member, tensor index): splitmix64 of the pair."""
    z = (_splitmix64(member_seed) + index) & _MASK64
    return _splitmix64(z) >> 1  # 63 bits: a valid seed on every torch device


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def noise(member_seed: int, index: int, like: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """eps for tensor `index` of member `member_seed`: fp32 standard normal shaped like `like`.

    Args:
        member_seed: the member's integer seed s_n.
        index: the tensor's position in `model.named_parameters()`.
        like: a tensor giving shape and device.
        out: optional fp32 buffer of at least `like.numel()` elements, reused to avoid allocation.
    """
    g = torch.Generator(device=like.device).manual_seed(noise_seed(member_seed, index))
    if out is None:
        return torch.randn(like.shape, generator=g, device=like.device, dtype=torch.float32)
    return torch.randn(like.shape, generator=g, out=out[:like.numel()].view(like.shape))


@torch.no_grad()
def perturb(params: list[torch.Tensor], master: list[torch.Tensor], member_seed: int, sigma: float,
            buf: torch.Tensor | None = None) -> None:
    """Set every working tensor to master + sigma * eps (computed in fp32, cast to the model dtype)."""
    for i, (p, m) in enumerate(zip(params, master)):
        eps = noise(member_seed, i, m, buf)
        torch.add(m, eps, alpha=sigma, out=p)


@torch.no_grad()
def restore(params: list[torch.Tensor], master: list[torch.Tensor]) -> None:
    """Copy the master back into the working weights (exact: no subtraction)."""
    for p, m in zip(params, master):
        p.copy_(m)


@torch.no_grad()
def es_update(master: list[torch.Tensor], member_seeds: list[int], z: list[float], alpha: float,
              buf: torch.Tensor | None = None) -> float:
    """master += alpha / N * sum_n z_n * eps_n, in fp32, one tensor at a time.

    Noise is regenerated member by member, so memory is one accumulator of the largest tensor.

    Returns:
        The L2 norm of the whole update.
    """
    n, sq = len(member_seeds), 0.0
    for i, m in enumerate(master):
        acc = torch.zeros_like(m)
        for s, zn in zip(member_seeds, z):
            acc.add_(noise(s, i, m, buf), alpha=zn)
        acc.mul_(alpha / n)
        m.add_(acc)
        sq += float(acc.pow(2).sum())
    return sq ** 0.5


def zscore(rewards: list[float]) -> list[float] | None:
    """(r - mean) / (population std + 1e-8), or None when every reward is the same (no signal)."""
    mean, std = statistics.fmean(rewards), statistics.pstdev(rewards)
    if max(rewards) == min(rewards):
        return None
    return [(r - mean) / (std + 1e-8) for r in rewards]
