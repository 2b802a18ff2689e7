"""Runs *inside* a vLLM engine process: weight writes into the engine's own (fused) parameters.

vLLM mixes a worker extension into its worker (LLM(worker_extension_cls=...)); the driver reaches
its methods with `llm.collective_rpc("name", args=...)`, so only names, scalars and file paths cross
processes. Tensors named as in the HF model are written into vLLM's parameters (fused: qkv_proj,
gate_up_proj) through the model's own `load_weights`, which maps HF names onto them.

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


class WorkerExtension:
    """What the engine itself needs inside vLLM's worker: weights written from a file, a parameter listing.

    A method that writes weights of its own subclasses this (ES: methods/es_vllm.py) and builds the
    engine with its class (make_engine(..., extension="module.Class"))."""

    def _engine_model(self) -> torch.nn.Module:
        return self.model_runner.model

    def engine_write(self, tensors) -> None:
        """Load (HF name, tensor) pairs into the engine's parameters (casts to the engine's dtype)."""
        self._engine_model().load_weights(tensors)

    @torch.no_grad()
    def engine_load_file(self, names: list[str], source: str) -> None:
        """Working weights = tensors `names` read from `source` (e.g. a GRPO-trained model)."""
        device = next(self._engine_model().parameters()).device
        self.engine_write(zip(names, read_tensors(source, names, device)))

    def engine_param_digest(self) -> list:
        """(name, shape, dtype) of the engine's own parameters (tests, diagnostics)."""
        return [(n, list(p.shape), str(p.dtype)) for n, p in self._engine_model().named_parameters()]


def local_model_dir(name_or_path: str) -> str:
    """A local folder for a zoo name, a path or a hub id (downloaded/cached by huggingface_hub)."""
    from harness.core.policy import resolve_model_path
    path = resolve_model_path(name_or_path)
    if Path(path).is_dir():
        return path
    from huggingface_hub import snapshot_download
    return snapshot_download(path, allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt"])
