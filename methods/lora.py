"""LoRA for the RL baselines: `method.peft=lora` hands TRL a peft `LoraConfig`, GRPO and PPO alike.

    python -m harness method=grpo method.peft=lora method.lora.r=16 method.lora.target_modules=[q_proj,v_proj]

TRL wraps the policy (`get_peft_model`); the base weights stay frozen and only the adapters train.
With beta > 0 GRPO's reference is the same model with the adapters disabled (no second model), and
PPO's reference likewise. The cost of a step is priced by harness/core/flops.py `lora_train_flops` (the
backward still runs through every frozen matmul); the forwards of the adapted policy (generation,
old log-probs) pay 2 x adapter parameters per token on top of the base forward (`adapter_forward_flops`).

Test: python -m pytest tests/test_lora.py -q
"""
from __future__ import annotations

import torch

from harness.core.errors import ConfigError
from methods.lora_config import PEFT_KINDS, LoraSettings, check_peft  # noqa: F401 - light (methods/lora_config.py)


def linear_names(model: torch.nn.Module) -> list[str]:
    """The distinct leaf names of the model's Linear modules (what target_modules matches), LM head excluded."""
    head = model.get_output_embeddings()
    return sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules()
                   if isinstance(m, torch.nn.Linear) and m is not head})


def adapter_parameters(model: torch.nn.Module, settings: LoraSettings) -> int:
    """Parameters the adapters will have on `model` (r x (in + out) per adapted Linear), before wrapping.

    The methods check it against the wrapped model's trainable count, so the FLOPs priced before
    training and the parameters trained cannot disagree.
    """
    head, targets = model.get_output_embeddings(), settings.target_modules
    return sum(settings.r * (m.in_features + m.out_features) for name, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and m is not head
               and (targets == "all-linear" or name.rsplit(".", 1)[-1] in targets))


def lora_config(settings: LoraSettings, model: torch.nn.Module):
    """peft's LoraConfig for `model`, refusing target modules the model does not have.

    Raises:
        ConfigError: a target module name matches no Linear module (the message lists those that exist).
    """
    if isinstance(settings.target_modules, list):
        have = linear_names(model)
        missing = [m for m in settings.target_modules if m not in have]
        if missing:
            raise ConfigError(f"method.lora.target_modules has {missing[0]!r}, which is not a Linear module of this "
                              f"model; choose from {', '.join(have)} (or all-linear)")
    try:  # optional: GRPO and PPO without LoRA must not need peft
        from peft import LoraConfig
    except ImportError:
        raise ConfigError('method.peft=lora needs peft: pip install -e ".[peft]"') from None
    return LoraConfig(r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                      target_modules=settings.target_modules, task_type="CAUSAL_LM", bias="none")


def trained_parameters(model: torch.nn.Module) -> dict:
    """{"trainable", "total", "fraction"}: parameters the optimizer updates against all of the model's."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    return {"trainable": trainable, "total": total, "fraction": trainable / total}


def adapter_forward_flops(lora_params: int, tokens: int) -> float:
    """Extra FLOPs of the unmerged adapters in a forward over `tokens` tokens: x@A then @B, 2 per weight."""
    return 2.0 * lora_params * tokens
