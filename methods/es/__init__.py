"""Full-parameter evolution strategies (Qiu et al. 2025), as one package; `_target_: methods.es.ES`.

    config.py    ESConfig, its checks and ES's facts (no torch: the config check and the planner read it)
    loop.py      the ES class: the one loop on the driver (iteration RNG, checkpoints, the ledger)
    core.py      the pure operations: noise streams, NoiseSpec, perturb/restore, the update, z-scores
    weights.py   weight adapters, one per engine layout (in place on HF parameters, or in a vLLM worker)
    workers.py   where members are scored: one in-process worker or K Ray actors, as typed pools
    vllm_ext.py  the vLLM worker extension that holds the fp32 master inside the engine's process
    numerics.py  the reference code's in-place arithmetic and the numerics record
    lora.py      ES on LoRA adapter tensors

`ES` and `ESConfig` are imported on first use (PEP 562), so `methods.es.config` loads without torch;
LAZY says where each is defined (harness/core/method_facts.py reads it from this file's source to
find the class without importing it).
"""
from __future__ import annotations

import importlib

LAZY = {"ES": "methods.es.loop", "ESConfig": "methods.es.config"}


def __getattr__(name: str):
    if name in LAZY:
        return getattr(importlib.import_module(LAZY[name]), name)
    raise AttributeError(f"module 'methods.es' has no attribute {name!r}")
