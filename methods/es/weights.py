"""ES's weight operations, one adapter per weight layout: what the loop does to an engine's weights.

An engine only generates (harness/engines); ES keeps an fp32 *master* of the tensors it trains and
writes master + sigma * eps into the engine's working weights for each member:

    set_noise(spec)        the variant's NoiseSpec (methods/es/core.py): which tensors are perturbed and
                           updated, the noise's rank, the tensors' seeding; it travels whole
    init_master(path)      master = the working weights (path None) or a checkpoint's; then restore
    perturb(seed, sigma)   working weights = master + sigma * eps(seed)   (fp32, cast once; -sigma mirrors)
    restore()              working weights = master                        (exact)
    update(seeds, z, a, n) master += a / n * sum z_n eps_n; then restore  (only seeds and scalars in)
    checksum()             a bit-level fingerprint of the master (compared across workers)
    save_master(path)      the master as safetensors, keyed by HF parameter names

HFWeights works on (name, tensor) pairs in place: a model's `named_parameters()` (the HF engine's
policy) or a LoRA adapter's tensors. VLLMWeights keeps the master inside the vLLM engine's worker
(methods/es/vllm_ext.py) and writes through the model's `load_weights` into vLLM's fused layout. Noise
for tensor i of member s is methods.es.core.noise(s, i, ...) in both, so on one device both
adapters give the same perturbed weights and the same member rewards. `method.numerics=inplace` swaps
in methods/es/numerics.py's InplaceWeights (the reference code's in-place arithmetic, no master; HF only),
and HFWeights' optional numerics record (`record=True`) is the same Recorder, for comparison.
"""
from __future__ import annotations

import torch
from safetensors.torch import save_file

from methods.es.core import NoiseSpec, es_update, load_named, master_checksum, perturb, restore
from methods.es.numerics import NUMERICS, InplaceWeights, Recorder


class HFWeights:
    """The master of (name, tensor) pairs that generation reads in place (HF parameters, LoRA adapters)."""

    def __init__(self, named: list[tuple[str, torch.Tensor]], record: bool = False):
        self.names = [n for n, _ in named]  # tied weights appear once in named_parameters()
        self.params = [p for _, p in named]
        self.master: list[torch.Tensor] | None = None
        self._buf: torch.Tensor | None = None
        self.spec = NoiseSpec()
        self.rec = Recorder("exact", record)

    def set_noise(self, spec: NoiseSpec) -> None:
        self.spec = spec

    @torch.no_grad()
    def init_master(self, path=None) -> None:
        if path is None:
            self.master = [p.detach().float().clone() for p in self.params]
        else:
            saved = load_named(path, self.names, self.params[0].device)
            self.master = [saved[n].float().clone() for n in self.names]
        self._buf = torch.empty(max(p.numel() for p in self.params), dtype=torch.float32,
                                device=self.params[0].device)
        self.restore()
        self.rec.start(self.params)

    def save_master(self, path) -> None:
        save_file({n: m.detach().cpu().contiguous() for n, m in zip(self.names, self.master)}, str(path))

    def perturb(self, member_seed: int, sigma: float) -> None:
        perturb(self.params, self.master, member_seed, sigma, self._buf, self.spec)

    def restore(self) -> None:
        restore(self.params, self.master, self.spec)  # unselected tensors are never perturbed

    def update(self, member_seeds, z, alpha, n=None) -> float:
        norm = es_update(self.master, member_seeds, z, alpha, self._buf, self.spec, n)
        if self.rec.on:  # the working weights still hold the old master, cast: count what the cast moves
            with torch.no_grad():
                changed = sum(int((p != m.to(p.dtype)).sum()) for p, m in zip(self.params, self.master))
            self.rec.changed(changed, sum(p.numel() for p in self.params))
        self.restore()
        return norm

    def checksum(self) -> str:
        return master_checksum(self.master)

    def numerics(self, final: bool = False) -> dict:
        """The numerics record (methods/es/numerics.py): restore is exact by construction."""
        return self.rec.take(self.params, final)


class VLLMWeights:
    """The master inside a vLLM engine's worker (built with methods.es.vllm_ext.EXTENSION), reached by RPC."""

    def __init__(self, engine):
        self.engine = engine
        self.names = [n for n, _ in engine.policy.model.named_parameters()]  # HF names (a meta model will do)

    def _call(self, method: str, *args, changes_weights: bool = True):
        out = self.engine.rpc(method, *args)
        if changes_weights:
            self.engine.weights_changed()
        return out

    def set_noise(self, spec: NoiseSpec) -> None:
        self._call("es_set_noise", spec.to_wire(), changes_weights=False)

    def init_master(self, path=None) -> None:
        self._call("es_init", self.names, str(path or self.engine.weights_source))

    def save_master(self, path) -> None:
        self._call("es_save", str(path), changes_weights=False)

    def perturb(self, member_seed: int, sigma: float) -> None:
        self._call("es_perturb", int(member_seed), float(sigma))

    def restore(self) -> None:
        self._call("es_restore")

    def update(self, member_seeds, z, alpha, n=None) -> float:
        return self._call("es_update", [int(s) for s in member_seeds], [float(x) for x in z], float(alpha),
                          None if n is None else int(n))

    def checksum(self) -> str:
        return self._call("es_checksum", changes_weights=False)


def weights_for(engine, named: list[tuple[str, torch.Tensor]] | None = None, numerics: str = "exact",
                record: bool = False):
    """The adapter for `engine`'s weight layout; `named` (HF engine only): train these tensors instead of
    the policy's parameters (LoRA adapters). `numerics`: exact (fp32 master) or inplace (the reference's
    in-place arithmetic, HF only); `record`: keep the numerics record (HF only)."""
    if numerics not in NUMERICS:
        raise ValueError(f"method.numerics={numerics!r} is unknown; use one of {', '.join(NUMERICS)}")
    if engine.caps.in_place:  # generation reads these parameters: ES writes them directly
        named = named if named is not None else list(engine.policy.model.named_parameters())
        return InplaceWeights(named, record) if numerics == "inplace" else HFWeights(named, record)
    if named is not None:
        raise ValueError(f"ES on a subset of named tensors (method.peft) runs on engine=hf only, not {engine.name}")
    if numerics != "exact" or record:
        raise ValueError(f"method.numerics={numerics} / numerics_record={record} are not supported on "
                         f"engine={engine.name}; use engine=hf")
    return VLLMWeights(engine)
