"""Runs *inside* a vLLM engine process: the ES weight operations on the engine's own weights.

vLLM mixes ESWorkerExtension into its worker (LLM(worker_extension_cls=...)); the driver reaches
its methods with `llm.collective_rpc("es_...", args=...)`, so only seeds, scalars and file paths
cross processes. The fp32 master is a list of tensors in the HF model's `named_parameters()` order
and names; perturbed/restored tensors are written into vLLM's (fused: qkv_proj, gate_up_proj)
parameters through the model's own `load_weights`, which maps HF names onto them.

Importing this module on a CPU platform also makes vLLM's CPU linear layers compute with plain
F.linear on their `weight` parameter: vLLM's CPU backend otherwise repacks every linear weight into
a kernel-private copy at load time and empties the parameter, so later weight writes would never
reach the matmuls. vLLM imports this module in its worker before the model is loaded.
"""
from __future__ import annotations

import glob
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file


def _plain_cpu_linear(layer: torch.nn.Module, remove_weight: bool) -> None:
    """Replacement for vllm's dispatch_cpu_unquantized_gemm: keep `layer.weight`, use F.linear."""
    layer.cpu_linear = lambda x, weight, bias: F.linear(x, weight, bias)


def patch_cpu_linear() -> None:
    """Make CPU linear layers read their (editable) weight parameter; a no-op off CPU."""
    from vllm.platforms import current_platform
    if current_platform.is_cpu():
        import vllm.model_executor.layers.utils as vllm_layer_utils
        vllm_layer_utils.dispatch_cpu_unquantized_gemm = _plain_cpu_linear


try:
    patch_cpu_linear()
except ImportError:  # imported without vLLM (documentation, tests that skip)
    pass


def read_tensors(source: str, names: list[str], device: torch.device) -> list[torch.Tensor]:
    """fp32 copies of tensors `names` from a safetensors file or a folder of them (HF names)."""
    files = [source] if os.path.isfile(source) else sorted(glob.glob(os.path.join(source, "*.safetensors")))
    where = {}
    for f in files:
        with safe_open(f, framework="pt") as h:
            for k in h.keys():
                where.setdefault(k, f)
    missing = [n for n in names if n not in where]
    if missing:
        raise ValueError(f"{source} lacks {len(missing)} of the model's {len(names)} tensors (e.g. {missing[0]}); "
                         "it was written for a different model, or the weights are not in safetensors format")
    out = []
    for f in dict.fromkeys(where[n] for n in names):
        with safe_open(f, framework="pt") as h:
            out += [(n, h.get_tensor(n)) for n in names if where[n] == f]
    by_name = dict(out)
    return [by_name[n].to(device=device, dtype=torch.float32).clone() for n in names]


class ESWorkerExtension:
    """ES master-weight operations, as methods of the vLLM worker (see the module docstring)."""

    def _es_model(self) -> torch.nn.Module:
        return self.model_runner.model

    def _es_write(self, tensors) -> None:
        """Load (HF name, tensor) pairs into the engine's parameters (casts to the engine's dtype)."""
        self._es_model().load_weights(tensors)

    @torch.no_grad()
    def es_init(self, names: list[str], source: str) -> list:
        """master = tensors `names` (HF order) read from `source`; then restore. Returns [device, dtype]."""
        device = next(self._es_model().parameters()).device
        self.es_names = list(names)
        self.es_master = read_tensors(source, names, device)
        self.es_buf = torch.empty(max(m.numel() for m in self.es_master), dtype=torch.float32, device=device)
        self.es_tmp = torch.empty_like(self.es_buf)
        self.es_spec = getattr(self, "es_spec", None)
        self.es_restore()
        return [str(device), str(next(self._es_model().parameters()).dtype)]

    def es_save(self, path: str) -> None:
        save_file({n: m.detach().cpu().contiguous() for n, m in zip(self.es_names, self.es_master)}, path)

    def es_set_noise(self, indices: list[int] | None, rank: int | None) -> None:
        """The ES variant's NoiseSpec (methods.es_core): tensors perturbed/updated and the noise rank."""
        from methods.es_core import NoiseSpec
        self.es_spec = NoiseSpec(None if indices is None else tuple(indices), rank)

    @torch.no_grad()
    def es_perturb(self, member_seed: int, sigma: float) -> None:
        """Working weights = master + sigma * eps, computed in fp32 exactly as methods.es.perturb
        (only the spec's tensors are written; the others hold the master already)."""
        from methods.es_core import NoiseSpec, noise
        spec = getattr(self, "es_spec", None) or NoiseSpec()

        def tensors():
            for i in spec.selected(len(self.es_names)):
                n, m = self.es_names[i], self.es_master[i]
                eps = noise(member_seed, i, m, self.es_buf, spec.rank)
                out = self.es_tmp[:m.numel()].view(m.shape)
                torch.add(m, eps, alpha=sigma, out=out)
                yield n, out  # copied (and cast) into the engine's parameter before the next one is made

        self._es_write(tensors())

    @torch.no_grad()
    def es_restore(self) -> None:
        self._es_write(zip(self.es_names, self.es_master))

    @torch.no_grad()
    def es_update(self, member_seeds: list[int], z: list[float], alpha: float, n: int | None = None) -> float:
        from methods.es_core import es_update
        norm = es_update(self.es_master, member_seeds, z, alpha, self.es_buf, getattr(self, "es_spec", None), n)
        self.es_restore()
        return norm

    def es_checksum(self) -> str:
        from harness.engines.base import master_checksum
        return master_checksum(self.es_master)

    @torch.no_grad()
    def es_load_file(self, names: list[str], source: str) -> None:
        """Working weights (not the master) = tensors read from `source` (e.g. a GRPO-trained model)."""
        device = next(self._es_model().parameters()).device
        self._es_write(zip(names, read_tensors(source, names, device)))

    def es_param_digest(self) -> list:
        """(name, shape, dtype) of the engine's own parameters (tests, diagnostics)."""
        return [(n, list(p.shape), str(p.dtype)) for n, p in self._es_model().named_parameters()]


def local_model_dir(name_or_path: str) -> str:
    """A local folder for a zoo name, a path or a hub id (downloaded/cached by huggingface_hub)."""
    from harness.policy import resolve_model_path
    path = resolve_model_path(name_or_path)
    if Path(path).is_dir():
        return path
    from huggingface_hub import snapshot_download
    return snapshot_download(path, allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt"])
