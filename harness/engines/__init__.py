"""Generation engines: `engine=hf` (transformers generate, the default) or `engine=vllm`.

    from harness.engines import EngineConfig, make_engine
    engine = make_engine(policy, EngineConfig(name="vllm"))
    gen = engine.generate(prompts, greedy=True, max_new_tokens=64)   # a harness.core.policy.Generation

The interface is harness/engines/base.py; tests: python -m pytest tests/test_engines.py -q
"""
from __future__ import annotations

from harness.engines.base import ENGINES, VLLM_INSTALL, Engine, EngineConfig, EngineError, check_plan, device_memory
from harness.core.engine_kinds import capabilities, plain_engine
from harness.core.policy import Policy

__all__ = ["ENGINES", "VLLM_INSTALL", "Engine", "EngineConfig", "EngineError", "check_plan", "device_memory",
           "evaluation_engine", "make_engine", "plain_engine", "trl_vllm_kwargs", "vllm_available",
           "vllm_version_problem", "VLLM_SUPPORTED"]


# The vLLM versions the engine code (harness/engines/vllm.py, vllm_worker.py, methods/es/vllm_ext.py) and TRL 1.12's
# colocated engine were checked against, call by call, in vLLM's own source: 0.24.0 (the torch 2.11 stack,
# constraints-vllm-torch211.txt) and 0.27.1 (the pin, torch 2.13, constraints-vllm.txt); docs/gpus.md "Nodes that
# cannot take vllm 0.27.1" tables the calls with their file:line in both. Every call is the same at both ends, so the
# releases between them are let through unread; TRL 1.12 accepts 0.19.0-0.27.1 (trl/import_utils.py
# is_vllm_available), but below 0.24.0 nothing was read, so an older vLLM is refused rather than guessed at.
VLLM_SUPPORTED = ("0.24.0", "0.27.1")


def vllm_version_problem(version: str) -> str | None:
    """None when `version` (vllm.__version__) lies in VLLM_SUPPORTED, else the one-line reason naming both constraints
    files. A local label (0.24.0+cu129) or a dev/post suffix is compared by its release (as TRL does)."""
    from packaging.version import InvalidVersion, Version
    lo, hi = (Version(v) for v in VLLM_SUPPORTED)
    try:
        release = Version(Version(version).base_version)
    except InvalidVersion:
        release = None
    if release is not None and lo <= release <= hi:
        return None
    return (f"engine=vllm supports vLLM {lo}-{hi}, found {version}: install vllm 0.27.1 with constraints-vllm.txt "
            f"(torch 2.13) or vllm 0.24.0 with constraints-vllm-torch211.txt (torch 2.11); docs/gpus.md says how")


def vllm_available() -> str | None:
    """None when vLLM imports and its version is supported (VLLM_SUPPORTED), else the one-line reason (naming the
    install command, or the supported range and the constraints files)."""
    try:
        import vllm
    except Exception as e:  # ImportError, or a broken install (e.g. a torchvision built for another torch)
        first = (str(e).splitlines() or [""])[0][:120]
        return f"engine=vllm needs vLLM: {VLLM_INSTALL} ({type(e).__name__}: {first})"
    return vllm_version_problem(str(getattr(vllm, "__version__", "unknown")))


def make_engine(policy: Policy, cfg: EngineConfig | dict | None = None, extension: str | None = None,
                resident: dict | None = None, shared: dict | None = None, **kwargs) -> Engine:
    """Build the configured engine around `policy` (its weights, tokenizer and prompt format).

    `extension`: for vLLM, a subclass of harness.engines.vllm_worker.WorkerExtension ("module.Class")
    mixed into the engine's worker, for a method that writes weights of its own (ES). `resident` and
    `shared` (vLLM on a GPU): bytes by part kept on the device beside the engine, by its own process and
    once per device (harness/engines/vllm.py VLLMEngine); they size its memory share."""
    if cfg is None or isinstance(cfg, dict):
        cfg = EngineConfig(**{**(cfg or {}), **kwargs})
    if cfg.name == "hf":
        from harness.engines.hf import HFEngine
        return HFEngine(policy)
    reason = vllm_available()
    if reason:
        raise EngineError(reason)
    from harness.engines.vllm import VLLMEngine
    return VLLMEngine(policy, cfg, extension=extension, resident=resident, shared=shared)


def evaluation_engine(policy: Policy, engine, reference=None, trained: bool = True) -> Engine | None:
    """Put the policy's HF copy (and eval.kl_to_base's `reference`) where evaluation needs them, and build the
    engine evaluation generates with (None: HF generate on the policy, engine=hf).

    - engine=hf: both models on the run's device (`policy.device`): the driver's copy may have waited on
      the CPU while ES's workers held the weights (harness/core/policy.py driver_place).
    - engine=vllm: the engine holds the weights. Without a reference the HF copy only names parameters and
      carries config and tokenizer: it goes to the CPU, so the engine gets the GPU alone. With a reference,
      kl_to_base scores the sampled completions under both HF models (harness/evaluation/kl.py): both go to
      the run's device and the engine's share counts them (`shared`, harness/core/gpu_memory.py). A model
      that was not trained (`trained` False: method=base) is not loaded again: the engine read the same
      checkpoint in the same dtype.
    """
    import torch

    cfg = plain_engine(engine)
    run_device = policy.device or next(policy.model.parameters()).device.type
    in_place = capabilities(cfg).in_place
    keep = run_device if in_place or reference is not None else "cpu"
    for model in (policy.model, reference):
        if model is not None and next(model.parameters()).device.type != torch.device(keep).type:
            model.to(keep)
    if in_place:
        return None
    shared = {}
    if keep.startswith("cuda"):  # the trained policy and the reference beside the engine, once on its GPU
        from harness.core.gpu_memory import driver_copy
        one = driver_copy(policy.model.config, str(policy.model.dtype).removeprefix("torch."))
        shared = {"driver_model": one["driver_model"], "kl_reference": one["driver_model"],
                  "process_reserve": one["process_reserve"]}
    out = make_engine(policy, cfg, shared=shared)
    if trained:
        out.load_from(policy.model)
    return out


def trl_vllm_kwargs(cfg: EngineConfig | dict | None, max_model_len: int | None = None, plan=None) -> dict:
    """GRPOConfig keyword arguments for `engine=vllm` (TRL generates with a colocated vLLM); {} for hf.

    On CPU this also prepares the process as harness/engines/vllm.py does (editable linear weights, so
    TRL's per-step weight sync reaches the matmuls; no thread pinning; in-process engine; 1 GiB KV cache).
    TRL's colocate mode then builds `vllm.LLM(model=model.name_or_path, ...)` itself and pushes the
    policy's weights with `load_weights` before every generation, resetting the prefix cache.

    `max_model_len`: vLLM's context (TRL's vllm_max_model_length; engine.max_model_len wins when set).
    Without it vLLM takes the model's own (131,072 for Llama-3.1) and refuses to start unless its KV
    cache holds one sequence that long (vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory).
    `plan` (harness/core/gpu_memory.py grpo_vllm_plan): on a GPU the engine gets the plan's share beside
    the trainer, which TRL passes to vllm.LLM unchanged (trl/generation/vllm_generation.py
    VLLMGeneration._init_vllm: gpu_memory_utilization=self.gpu_memory_utilization); a plan that cannot fit
    raises EngineError in one line. Without a plan (or on CPU) it gets engine.gpu_memory_utilization.
    Sleep mode stays off (TRL's default): the share already leaves the trainer its memory.
    """
    if cfg is None or isinstance(cfg, dict):
        cfg = EngineConfig(**(cfg or {}))
    if cfg.name == "hf":
        return {}
    reason = vllm_available()
    if reason:
        raise EngineError(reason)
    import os

    import torch

    from harness.engines.vllm import CPU_ENV
    from harness.engines.vllm_worker import patch_cpu_linear
    if not torch.cuda.is_available():
        for k, v in {**CPU_ENV, "VLLM_CPU_KVCACHE_SPACE": str(max(1, int(cfg.cpu_kvcache_gb)))}.items():
            os.environ.setdefault(k, v)
    patch_cpu_linear()
    share = cfg.gpu_memory_utilization
    if plan is not None and torch.cuda.is_available():
        check_plan(plan)
        share = plan.utilization
    out = {"use_vllm": True, "vllm_mode": "colocate", "vllm_enable_sleep_mode": False,
           "vllm_gpu_memory_utilization": share}
    if cfg.max_model_len or max_model_len:
        out["vllm_max_model_length"] = cfg.max_model_len or max_model_len
    return out
