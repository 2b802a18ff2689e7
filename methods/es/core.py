"""The pure pieces of ES that the loop (methods/es/loop.py) and the weight adapters (methods/es/weights.py,
methods/es/vllm_ext.py) share: the noise streams, perturb/restore, the update, z-scores, the master's
checksum, and the checkpoint's name and resumable settings.

Noise is defined per parameter (member seed, index in the HF model's `named_parameters()`), so an
engine that holds the weights in another layout (vLLM's fused qkv) still draws the same noise.

The ES variants (conf/method/es.yaml) shape the noise through one small `NoiseSpec`: which tensors
are perturbed and updated (`method.params`), and low-rank noise (`method.noise_rank`). A tensor's
noise never depends on which others are selected (its stream is still (member seed, index)), and
the default spec (all tensors, full rank) runs exactly the operations ES ran before the variants.
"""
from __future__ import annotations

import hashlib
import math
import random
import re
import statistics
from dataclasses import dataclass

import torch
from safetensors.torch import load_file

# the settings' names and the checks' errors live in the light config module (no torch): re-exported here
from methods.es.config import (FITNESS, NORMALIZE, PARAM_SETS, SEEDINGS, VARIANT_DEFAULTS, VariantError,  # noqa: F401
                               wants_population)

CKPT = "es_checkpoint"
# settings a resumed run may change: bounds, checkpoint cadence, batching and where members are scored
LOOSE = ("max_iterations", "checkpoint_every", "generation_batch_size", "engine", "workers", "use_ray",
         "ray_address", "threads", "numerics_record")


@dataclass(frozen=True)
class NoiseSpec:
    """Which tensors ES perturbs and updates, and the noise's rank.

    Attributes:
        indices: positions in `named_parameters()` of the perturbed tensors; None = every tensor.
        rank: None = full-rank Gaussian noise; r = low-rank noise (A B^T)/sqrt(r) for every tensor of
            2 or more dimensions (vectors stay full-rank).
        seeding: how tensor i's torch seed derives from the member seed (SEEDINGS; tensor_seed).
    """

    indices: tuple[int, ...] | None = None
    rank: int | None = None
    seeding: str = "iid"

    def selected(self, n: int):
        """The perturbed tensors' indices among n."""
        return range(n) if self.indices is None else self.indices

    def to_wire(self) -> dict:
        """Plain values, for the RPC into a vLLM worker (methods/es/vllm_ext.py): vLLM's engine-core
        messages are msgpack, which carries ints, lists and strings but no dataclass."""
        return {"indices": None if self.indices is None else [int(i) for i in self.indices],
                "rank": None if self.rank is None else int(self.rank), "seeding": str(self.seeding)}

    @classmethod
    def from_wire(cls, wire: dict) -> "NoiseSpec":
        return cls(None if wire["indices"] is None else tuple(wire["indices"]), wire["rank"], wire["seeding"])


def parameter_groups(names: list[str]) -> list[str]:
    """Names with layer numbers folded into '*', in first-seen order (for error messages)."""
    return list(dict.fromkeys(re.sub(r"\.\d+\.", ".*.", n) for n in names))


def select_params(names: list[str], spec: str) -> tuple[int, ...] | None:
    """Indices of the tensors `method.params` names: all | norms | norms+attention | last_layer | a regex.

    last_layer: the highest-numbered block (`...layers.<L>.`) plus every tensor after it in model order
    (final norm, an untied LM head); a tied LM head is the input embedding, so it is not included.
    Returns None for all (the default path). Raises VariantError naming the model's parameter groups
    when nothing matches.
    """
    if spec in (None, "all"):
        return None
    if spec == "last_layer":
        blocks = [(int(m.group(1)), i) for i, n in enumerate(names) if (m := re.search(r"\.(\d+)\.", n))]
        if not blocks:
            raise VariantError(f"method.params=last_layer: the model has no numbered layers; parameter groups: "
                               f"{', '.join(parameter_groups(names))}; use a name regex instead")
        last = max(b for b, _ in blocks)
        first = min(i for b, i in blocks if b == last)
        chosen = tuple(i for i in range(first, len(names))
                       if not (m := re.search(r"\.(\d+)\.", names[i])) or int(m.group(1)) == last)
    else:
        try:
            pattern = re.compile(PARAM_SETS.get(spec, spec))
        except re.error as e:
            raise VariantError(f"method.params={spec!r} is not all, norms, norms+attention, last_layer or a valid "
                               f"regex ({e})") from None
        chosen = tuple(i for i, n in enumerate(names) if pattern.search(n))
    if not chosen:
        raise VariantError(f"method.params={spec!r} matches no parameter; the model's parameter groups: "
                           f"{', '.join(parameter_groups(names))}")
    return chosen


def noise_spec(names: list[str], shapes: list[tuple[int, ...]], params: str = "all",
               noise_rank: int | None = None, seeding: str = "iid") -> NoiseSpec:
    """The NoiseSpec of a model (names, shapes in `named_parameters()` order) under the variant settings."""
    if seeding not in SEEDINGS:
        raise VariantError(f"method.noise_seeding={seeding!r} is unknown; use one of {', '.join(SEEDINGS)}")
    indices = select_params(names, params)
    if noise_rank is not None:
        for i in (range(len(names)) if indices is None else indices):
            side = min(shapes[i][0], math.prod(shapes[i][1:])) if len(shapes[i]) >= 2 else None
            if side is not None and noise_rank > side:
                raise VariantError(f"method.noise_rank={noise_rank} exceeds the smaller side of {names[i]} "
                                   f"{tuple(shapes[i])}; use noise_rank <= {side}")
    return NoiseSpec(indices, noise_rank, seeding)

_MASK64 = (1 << 64) - 1


# ---- the core operations (small and pure, so tests can check them one by one) ----
def noise_seed(member_seed: int, index: int) -> int:
    """Seed of the independent noise stream of (member, tensor index): splitmix64 of the pair."""
    z = (_splitmix64(member_seed) + index) & _MASK64
    return _splitmix64(z) >> 1  # 63 bits: a valid seed on every torch device


def tensor_seed(member_seed: int, index: int, seeding: str = "iid") -> int:
    """The torch seed of tensor `index`'s noise for member `member_seed` under `seeding` (SEEDINGS)."""
    if seeding == "iid":
        return noise_seed(member_seed, index)
    if seeding == "per_tensor_offset":
        return int(member_seed) + index  # the reference: gen.manual_seed(int(seed + seed_shift_value))
    if seeding == "per_tensor_same":
        return int(member_seed)  # the reference's first version: gen.manual_seed(int(seed)) for every tensor
    raise VariantError(f"method.noise_seeding={seeding!r} is unknown; use one of {', '.join(SEEDINGS)}")


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def noise(member_seed: int, index: int, like: torch.Tensor, out: torch.Tensor | None = None,
          rank: int | None = None, seeding: str = "iid", dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """eps for tensor `index` of member `member_seed`: a standard normal shaped like `like` (fp32 by default).

    Args:
        member_seed: the member's integer seed s_n.
        index: the tensor's position in `model.named_parameters()`.
        like: a tensor giving shape and device.
        out: optional fp32 buffer of at least `like.numel()` elements, reused to avoid allocation.
        rank: None: full-rank. r: for a tensor of >= 2 dimensions (rows = first dimension, columns =
            the rest), EGGROLL's low-rank eps = A B^T / sqrt(r), A (rows x r) and B (columns x r)
            standard normal from the same stream; every entry still has variance 1. Vectors stay full-rank.
        seeding: the tensor's torch seed rule (tensor_seed); "iid" is the stream ES always used.
        dtype: the dtype the normal is drawn in. numerics=inplace draws in the parameter's own dtype, as
            the reference does (torch.randn(..., dtype=param.dtype)): that is not an fp32 draw rounded,
            so the two are different noise. Full rank only; `out` must then have this dtype.
    """
    g = torch.Generator(device=like.device).manual_seed(tensor_seed(member_seed, index, seeding))
    if dtype != torch.float32:
        if rank is not None:
            raise VariantError("low-rank noise (method.noise_rank) is drawn in fp32 only; drop method.noise_rank")
        if out is None:
            return torch.randn(like.shape, generator=g, device=like.device, dtype=dtype)
        return torch.randn(like.shape, generator=g, out=out[:like.numel()].view(like.shape))
    if rank is not None and like.dim() >= 2:
        rows = like.shape[0]
        cols = like.numel() // rows
        a = torch.randn((rows, rank), generator=g, device=like.device, dtype=torch.float32)
        b = torch.randn((cols, rank), generator=g, device=like.device, dtype=torch.float32)
        target = (torch.empty((rows, cols), device=like.device, dtype=torch.float32) if out is None
                  else out[:like.numel()].view(rows, cols))
        torch.matmul(a, b.T, out=target)
        return target.mul_(1.0 / math.sqrt(rank)).view(like.shape)
    if out is None:
        return torch.randn(like.shape, generator=g, device=like.device, dtype=torch.float32)
    return torch.randn(like.shape, generator=g, out=out[:like.numel()].view(like.shape))


@torch.no_grad()
def perturb(params: list[torch.Tensor], master: list[torch.Tensor], member_seed: int, sigma: float,
            buf: torch.Tensor | None = None, spec: NoiseSpec | None = None) -> None:
    """Set every selected working tensor to master + sigma * eps (computed in fp32, cast to the model dtype).

    An antithetic member's mirror is the same seed with -sigma. Unselected tensors are not touched.
    """
    spec = spec or NoiseSpec()
    for i in spec.selected(len(params)):
        p, m = params[i], master[i]
        eps = noise(member_seed, i, m, buf, spec.rank, spec.seeding)
        torch.add(m, eps, alpha=sigma, out=p)


@torch.no_grad()
def restore(params: list[torch.Tensor], master: list[torch.Tensor], spec: NoiseSpec | None = None) -> None:
    """Copy the master back into the (selected) working weights (exact: no subtraction)."""
    for i in (spec or NoiseSpec()).selected(len(params)):
        params[i].copy_(master[i])


@torch.no_grad()
def es_update(master: list[torch.Tensor], member_seeds: list[int], z: list[float], alpha: float,
              buf: torch.Tensor | None = None, spec: NoiseSpec | None = None, n: int | None = None) -> float:
    """master += alpha / N * sum_n z_n * eps_n, in fp32, one (selected) tensor at a time.

    Noise is regenerated member by member (with the spec's rank, so the update uses exactly the eps
    the members were scored with), so memory is one accumulator of the largest tensor.
    Antithetic pairs come in as one seed with coefficient z(+) - z(-) and `n` = the population.

    Returns:
        The L2 norm of the whole update.
    """
    spec = spec or NoiseSpec()
    n, sq = (len(member_seeds) if n is None else n), 0.0
    for i in spec.selected(len(master)):
        m = master[i]
        acc = torch.zeros_like(m)
        for s, zn in zip(member_seeds, z):
            acc.add_(noise(s, i, m, buf, spec.rank, spec.seeding), alpha=zn)
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


def centered_ranks(rewards: list[float]) -> list[float] | None:
    """OpenAI ES's fitness shaping: ranks (ties share their mean rank) mapped linearly onto [-0.5, 0.5]."""
    if max(rewards) == min(rewards):
        return None
    order = sorted(range(len(rewards)), key=lambda i: rewards[i])
    ranks = [0.0] * len(rewards)
    a = 0
    while a < len(order):
        b = a
        while b + 1 < len(order) and rewards[order[b + 1]] == rewards[order[a]]:
            b += 1
        for k in range(a, b + 1):
            ranks[order[k]] = (a + b) / 2
        a = b + 1
    return [r / (len(rewards) - 1) - 0.5 for r in ranks]


def normalize(rewards: list[float], how: str = "zscore") -> list[float] | None:
    """The update's per-member weights: zscore (the paper) | none (raw rewards) | centered_ranks.

    None when every reward is the same, under every normalisation: there is no signal, and raw
    rewards would otherwise step along sum eps, a pure random walk.
    """
    if how == "zscore":
        return zscore(rewards)
    if how == "centered_ranks":
        return centered_ranks(rewards)
    if how == "none":
        return None if max(rewards) == min(rewards) else list(rewards)
    raise VariantError(f"method.normalize={how!r} is unknown; use one of {', '.join(NORMALIZE)}")


def placebo(rewards: list[float], antithetic: bool, rng: random.Random) -> list[float]:
    """The placebo's fitness: the members' rewards permuted across members by `rng`.

    The multiset of rewards is unchanged, so after normalisation the coefficients are the same
    numbers as ES's (the same step norm, the same skipped iterations) but each lands on another
    member's direction: the update is the random walk ES would take with no reward signal. A
    mirrored pair (one seed at +eps and -eps, adjacent) moves as a unit, so the pair's difference
    z(+) - z(-), the antithetic step along its shared direction, keeps its distribution.
    """
    if not antithetic:
        order = list(range(len(rewards)))
        rng.shuffle(order)
        return [rewards[i] for i in order]
    pairs = [rewards[i:i + 2] for i in range(0, len(rewards), 2)]
    rng.shuffle(pairs)
    return [r for pair in pairs for r in pair]


def members(seeds: list[int], antithetic: bool) -> tuple[list[int], list[float]]:
    """Per-member (seed, sign): each seed once with +1, or (antithetic) each twice, +1 then -1."""
    if not antithetic:
        return list(seeds), [1.0] * len(seeds)
    return [s for s in seeds for _ in (0, 1)], [1.0, -1.0] * len(seeds)


def update_terms(seeds: list[int], signs: list[float], z: list[float]) -> tuple[list[int], list[float]]:
    """(seeds, coefficients) for es_update: plain members as they are; a mirrored pair (one seed, +/-)
    folds into one term z(+) - z(-), so its noise is regenerated once."""
    if all(s == 1.0 for s in signs):
        return list(seeds), list(z)
    out_s, out_c = [], []
    for s, sign, zn in zip(seeds, signs, z):
        if out_s and out_s[-1] == s:
            out_c[-1] += sign * zn
        else:
            out_s.append(s)
            out_c.append(sign * zn)
    return out_s, out_c


def master_checksum(master: list[torch.Tensor], chunk: int = 1 << 26) -> str:
    """A fingerprint of the exact bits of every master tensor (any one-ulp change alters it).

    Integer sums of the bit patterns (fp32 as int32; bf16/fp16 weights under numerics=inplace as
    int16), two mixes per tensor, computed on the tensors' own device in chunks (no full copy of a 7B
    master), then hashed together with the tensor index. Workers compare it after every update (they
    must hold identical masters).
    """
    h = hashlib.sha256()
    for i, m in enumerate(master):
        flat = m.detach().reshape(-1).view({2: torch.int16, 4: torch.int32, 8: torch.int64}[m.element_size()])
        s1 = s2 = 0
        for a in range(0, flat.numel(), chunk):
            x = flat[a:a + chunk].to(torch.int64)
            s1 += int(x.sum())
            s2 += int((x * ((x >> 9) | 1)).sum())  # wraps in int64 (deterministic)
        h.update(f"{i}:{m.numel()}:{s1}:{s2};".encode())
    return h.hexdigest()[:16]


def load_named(path, names: list[str], device) -> dict[str, torch.Tensor]:
    """A saved master (safetensors keyed by HF names) holding exactly `names`, or a one-line ValueError."""
    saved = load_file(str(path), device=str(device))
    missing = [n for n in names if n not in saved]
    if missing or len(saved) != len(names):
        raise ValueError(f"{path} holds weights for a different model ({len(missing)} of its "
                         f"{len(names)} tensors missing, e.g. {(missing or ['none'])[0]}); use a fresh run_dir")
    return saved
