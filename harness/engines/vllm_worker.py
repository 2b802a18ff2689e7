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


def _locate(source: str, names: list[str]) -> dict[str, str]:
    """Which file of `source` (a safetensors file or a folder of them) holds each of `names` (HF names)."""
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
    return where


def iter_tensors(source: str, names: list[str], device: torch.device, dtype: torch.dtype | None = None):
    """(name, tensor) for each of `names`, read one at a time from `source` onto `device` in `dtype` (None: the
    file's): host and device hold one tensor of the file at a time, never the whole model. Files are visited in
    order and each is opened once; within a file the tensors come in `names` order."""
    where = _locate(source, names)
    for f in dict.fromkeys(where[n] for n in names):
        with safe_open(f, framework="pt") as h:
            for n in names:
                if where[n] == f:
                    yield n, h.get_tensor(n).to(device=device, dtype=dtype)


def read_tensors(source: str, names: list[str], device: torch.device) -> list[torch.Tensor]:
    """fp32 copies of tensors `names` (in that order) from a safetensors file or a folder of them (HF names),
    moved to `device` one at a time (the host holds one tensor of the file at a time)."""
    by_name = dict(iter_tensors(source, names, device, torch.float32))
    return [by_name[n] for n in names]


# safetensors' dtype names (the format's header: https://github.com/huggingface/safetensors, "Format")
_ST_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.float64: "F64",
              torch.int64: "I64", torch.int32: "I32", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL"}


def save_streaming(named, path: str) -> None:
    """Write (name, tensor) pairs (any device, any order) as one safetensors file, copying one tensor at a time
    to the host: safetensors.torch.save_file needs every tensor on the host at once (30 GB for a 7B fp32 master,
    against a Slurm job's 64 GB). The header comes first (8-byte little-endian length, then JSON with each
    tensor's dtype, shape and byte range), then the tensors' bytes back to back, as the format specifies;
    safe_open and load_file read it (tests/test_engines.py)."""
    import json
    import struct
    named = list(named)
    header, offset = {}, 0
    for n, t in named:
        size = t.numel() * t.element_size()
        header[n] = {"dtype": _ST_DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the data starts 8-byte aligned, as safetensors' own writer pads it
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for _, t in named:
            f.write(t.detach().contiguous().reshape(-1).view(torch.uint8).cpu().numpy().tobytes())


class WorkerExtension:
    """What the engine itself needs inside vLLM's worker: weights written from a file, a parameter listing.

    A method that writes weights of its own subclasses this (ES: methods/es/vllm_ext.py) and builds the
    engine with its class (make_engine(..., extension="module.Class"))."""

    def _engine_model(self) -> torch.nn.Module:
        """The engine's model through the worker's own accessor (vllm/v1/worker/gpu_worker.py Worker.get_model,
        which CPUWorker inherits, the same in 0.24.0 and 0.27.1): `model_runner.model` is a CUDA-graph wrapper on a
        GPU (gpu_model_runner.py get_model unwraps it) and lives elsewhere on Model Runner V2 (v1/worker/gpu), which
        the two versions choose for different models (0.24.0: Llama, Mistral, Qwen3; 0.27.1: every dense model)."""
        return self.get_model()

    def engine_pid(self) -> int:
        """The id of the process this extension runs in (the engine core's own with multiprocessing on)."""
        return os.getpid()

    def engine_write(self, tensors) -> None:
        """Load (HF name, tensor) pairs into the engine's parameters (casts to the engine's dtype)."""
        self._engine_model().load_weights(tensors)

    @torch.no_grad()
    def engine_load_file(self, names: list[str], source: str) -> None:
        """Working weights = tensors `names` read from `source` (e.g. a GRPO-trained model), streamed: each tensor
        is read, moved to the device in the engine's dtype and written before the next is read, so the device
        holds one extra tensor at a time (vLLM's load_weights consumes its iterable lazily:
        vllm/model_executor/models/utils.py AutoWeightsLoader._groupby_prefix is an itertools.groupby)."""
        first = next(self._engine_model().parameters())
        self.engine_write(iter_tensors(source, names, first.device, first.dtype))

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
