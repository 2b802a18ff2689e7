"""Runs *inside* a vLLM engine's worker: ES's fp32 master and its weight operations there.

The ES worker builds its vLLM engine with this extension (make_engine(..., extension=EXTENSION));
methods/es/weights.py's VLLMWeights reaches these methods with `engine.rpc("es_...", ...)`, so only
seeds, scalars and file paths cross processes, never weights. The master is a list of fp32 tensors
in the HF model's `named_parameters()` order and names; perturbed and restored tensors are written
into vLLM's (fused) parameters through the base extension's `engine_write` (the model's load_weights).
Noise for tensor i of member s is methods.es.core.noise(s, i, ...), as on the HF engine, so on one
device both engines see the same perturbed weights.
"""
from __future__ import annotations

import torch

from harness.engines.vllm_worker import WorkerExtension, read_tensors, save_streaming
from methods.es.core import NoiseSpec, es_update, master_checksum, noise

EXTENSION = "methods.es.vllm_ext.ESWorkerExtension"


class ESWorkerExtension(WorkerExtension):
    """ES master-weight operations, as methods of the vLLM worker (see the module docstring)."""

    @torch.no_grad()
    def es_init(self, names: list[str], source: str) -> list:
        """master = tensors `names` (HF order) read from `source`; then restore. Returns [device, dtype].

        The master (4 B/param) and the two buffers (fp32, the largest tensor each) are allocated here, after
        vLLM took its budget (vllm/v1/worker/gpu_worker.py Worker.determine_available_memory lets the KV cache
        fill total x gpu_memory_utilization); the engine was given a share that leaves room for them and for
        es_update's temporaries (harness/core/gpu_memory.py es_vllm_resident, passed by methods/es/workers.py)."""
        device = next(self._engine_model().parameters()).device
        self.es_names = list(names)
        self.es_master = read_tensors(source, names, device)
        self.es_buf = torch.empty(max(m.numel() for m in self.es_master), dtype=torch.float32, device=device)
        self.es_tmp = torch.empty_like(self.es_buf)
        self.es_spec = getattr(self, "es_spec", None) or NoiseSpec()
        self.es_restore()
        return [str(device), str(next(self._engine_model().parameters()).dtype)]

    def es_save(self, path: str) -> None:
        """The master as one safetensors file, copied to the host one tensor at a time (save_file would hold
        all of it on the host: 30 GB at 7B against a Slurm job's mem_gb: 64)."""
        save_streaming(zip(self.es_names, self.es_master), path)

    def es_set_noise(self, spec: dict) -> None:
        """The ES variant's NoiseSpec (tensors perturbed/updated, the noise rank and the tensors' seeding), sent
        as NoiseSpec.to_wire's plain values and rebuilt whole here."""
        self.es_spec = NoiseSpec.from_wire(spec)

    @torch.no_grad()
    def es_perturb(self, member_seed: int, sigma: float) -> None:
        """Working weights = master + sigma * eps, computed in fp32 exactly as methods.es.core.perturb
        (only the spec's tensors are written; the others hold the master already)."""
        spec = self.es_spec

        def tensors():
            for i in spec.selected(len(self.es_names)):
                n, m = self.es_names[i], self.es_master[i]
                eps = noise(member_seed, i, m, self.es_buf, spec.rank, spec.seeding)
                out = self.es_tmp[:m.numel()].view(m.shape)
                torch.add(m, eps, alpha=sigma, out=out)
                yield n, out  # copied (and cast) into the engine's parameter before the next one is made

        self.engine_write(tensors())

    @torch.no_grad()
    def es_restore(self) -> None:
        self.engine_write(zip(self.es_names, self.es_master))

    @torch.no_grad()
    def es_update(self, member_seeds: list[int], z: list[float], alpha: float, n: int | None = None) -> float:
        norm = es_update(self.es_master, member_seeds, z, alpha, self.es_buf, self.es_spec, n)
        self.es_restore()
        return norm

    def es_checksum(self) -> str:
        return master_checksum(self.es_master)
