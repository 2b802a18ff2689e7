"""Generation engines: `engine=hf` (transformers generate, the default) or `engine=vllm`.

    from harness.engines import EngineConfig, make_engine
    engine = make_engine(policy, EngineConfig(name="vllm"))
    gen = engine.generate(prompts, greedy=True, max_new_tokens=64)   # a harness.policy.Generation

The interface is harness/engines/base.py; tests: python -m pytest tests/test_engines.py -q
"""
from __future__ import annotations

from harness.engines.base import ENGINES, VLLM_INSTALL, Engine, EngineConfig, EngineError, master_checksum
from harness.policy import Policy

__all__ = ["ENGINES", "VLLM_INSTALL", "Engine", "EngineConfig", "EngineError", "make_engine", "master_checksum",
           "vllm_available"]


def vllm_available() -> str | None:
    """None when vLLM imports, else the one-line reason (naming the install command)."""
    try:
        import vllm  # noqa: F401
    except Exception as e:  # ImportError, or a broken install (e.g. a torchvision built for another torch)
        first = (str(e).splitlines() or [""])[0][:120]
        return f"engine=vllm needs vLLM: {VLLM_INSTALL} ({type(e).__name__}: {first})"
    return None


def make_engine(policy: Policy, cfg: EngineConfig | dict | None = None, **kwargs) -> Engine:
    """Build the configured engine around `policy` (its weights, tokenizer and prompt format)."""
    if cfg is None or isinstance(cfg, dict):
        cfg = EngineConfig(**{**(cfg or {}), **kwargs})
    if cfg.name == "hf":
        from harness.engines.hf import HFEngine
        return HFEngine(policy)
    reason = vllm_available()
    if reason:
        raise EngineError(reason)
    from harness.engines.vllm import VLLMEngine
    return VLLMEngine(policy, cfg)
