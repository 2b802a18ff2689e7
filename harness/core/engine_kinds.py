"""What each generation engine can do, asked by capability, and an engine setting as a plain dict; no torch.

Code that must act differently per engine asks `capabilities(engine)` what it needs to know (does
generation read the policy's own parameters? does the engine size itself to a share of the GPU?)
instead of comparing engine names, so a third engine declares its row here and every such branch
follows. The engines themselves are built by name in harness/engines/__init__.py make_engine (the
one factory); light config modules (methods/*_config.py, methods/es/config.py) read this module
before torch loads.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Capabilities:
    """What an engine does with the policy's weights and the device.

    Attributes:
        in_place: generation reads the policy's own HF parameters (engine=hf). A method can change them
            directly (ES's HFWeights, LoRA adapters, the in-place numerics and their record), and the
            driver's copy must sit on the run's device. False: the engine holds its own copy of the weights
            in its own layout (vLLM's fused tensors) and is reached through a worker extension.
        own_memory_share: the engine takes a fixed share of its GPU for weights and KV cache
            (vLLM's gpu_memory_utilization), so what its process keeps beside it must be priced before it
            starts (harness/core/gpu_memory.py), and engines sharing one GPU (engine.engines_per_gpu) must
            start one at a time.
    """

    in_place: bool
    own_memory_share: bool


CAPABILITIES = {
    "hf": Capabilities(in_place=True, own_memory_share=False),
    "vllm": Capabilities(in_place=False, own_memory_share=True),
}
ENGINES = tuple(CAPABILITIES)


def plain_engine(engine) -> dict:
    """An engine setting as a plain dict: a Hydra node (`method.engine: ${engine}`), a name, a dict or None (hf)."""
    if engine is None or isinstance(engine, str):
        return {"name": engine or "hf"}
    if hasattr(engine, "_metadata"):  # an OmegaConf node
        from omegaconf import OmegaConf
        return OmegaConf.to_container(engine, resolve=True)
    if hasattr(engine, "name") and not isinstance(engine, dict):  # an EngineConfig or a built engine
        return {"name": engine.name}
    return dict(engine)


def capabilities(engine) -> Capabilities:
    """The capabilities of an engine setting (name, dict, Hydra node, EngineConfig, a built engine; None: hf)."""
    name = plain_engine(engine).get("name") or "hf"
    if name not in CAPABILITIES:
        from harness.core.errors import UserError
        raise UserError(f"engine={name!r} is unknown; use one of {', '.join(ENGINES)}")
    return CAPABILITIES[name]
