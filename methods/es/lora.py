"""ES over LoRA adapter weights (`method.peft=lora`): the subspace reduction, measured against full ES.

ES.train (methods/es/loop.py) wraps the policy's model with peft.get_peft_model (adapters on
`method.lora.target_modules`, rank `r`, scale `alpha`) and hands the adapter tensors (lora_A and
lora_B) to the one ES loop as the tensors it perturbs and updates (lora_B starts at zero, so every
member's change at the start comes from its lora_B noise). All ES
guarantees carry over unchanged: the master, checkpoints and resume hold the adapter tensors
(named as peft names them), and the variants (params regex over adapter names, noise_rank,
antithetic, normalize) apply to them. The adapter is initialised from the method's seed, so a run
is a pure function of its config. At the end (or on any error) the adapters are merged into the
base weights and unloaded, so `policy.model` is a plain model again and evaluation sees the trained
adapter. In place only (engine=hf, engine.workers=1): ESConfig refuses the rest in one line.

FLOPs are charged as for the base model (the adapter's extra matmuls, r/hidden of a layer's, are
not counted). Memory (ES's facts, methods/es/config.py es_memory): ES's master, buffers and temporaries over
the adapter's tensors only (`adapter_resident`).
"""
from __future__ import annotations

import torch

from methods.es.config import adapter_resident  # noqa: F401 - ES's memory over the adapter, light (es_config.py)


def wrap_lora(model: torch.nn.Module, lora: dict, seed: int):
    """peft.get_peft_model with a LoRA adapter whose initial lora_A comes from `seed` (global RNG untouched)."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise ImportError('method.peft=lora needs peft: pip install -e ".[peft]"') from None
    cfg = LoraConfig(r=int(lora["r"]), lora_alpha=float(lora["alpha"]), target_modules=lora["target_modules"],
                     lora_dropout=0.0, bias="none")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return get_peft_model(model, cfg)


def adapter_tensors(peft_model) -> list[tuple[str, torch.nn.Parameter]]:
    """The adapter's (name, tensor) pairs in model order: what ES perturbs."""
    named = [(n, p) for n, p in peft_model.named_parameters() if ".lora_" in n]
    if not named:
        raise ValueError("method.peft=lora: the adapter has no lora_ tensors; check method.lora.target_modules")
    return named
