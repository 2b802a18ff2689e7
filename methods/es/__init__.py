"""Full-parameter evolution strategies (Qiu et al. 2025), as one package; `_target_: methods.es.ES`.

    config.py    ESConfig, its checks and ES's facts (no torch: the config check and the planner read it)
    loop.py      the ES class: the one loop on the driver (iteration RNG, checkpoints, the ledger)
    core.py      the pure operations: noise streams, NoiseSpec, perturb/restore, the update, z-scores
    weights.py   weight adapters, one per engine layout (in place on HF parameters, or in a vLLM worker)
    workers.py   where members are scored: one in-process worker or K Ray actors, as typed pools
    vllm_ext.py  the vLLM worker extension that holds the fp32 master inside the engine's process
    numerics.py  the reference code's in-place arithmetic and the numerics record
    lora.py      ES on LoRA adapter tensors

`ES` is imported on first use (PEP 562), so `methods.es.config` loads without torch.
"""
from __future__ import annotations


def __getattr__(name: str):
    if name == "ES":
        from methods.es.loop import ES
        return ES
    if name == "ESConfig":
        from methods.es.config import ESConfig
        return ESConfig
    raise AttributeError(f"module 'methods.es' has no attribute {name!r}")
