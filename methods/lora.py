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

from dataclasses import dataclass, field

import torch

from harness.core.errors import ConfigError

PEFT_KINDS = (None, "lora")


@dataclass
class LoraSettings:
    """method.lora: the adapter's shape (peft LoraConfig's fields of the same meaning)."""

    r: int = field(default=16, metadata={"help": "Adapter rank."})
    alpha: float = field(default=32, metadata={"help": "Scaling numerator: the update is (alpha / r) x B A."})
    dropout: float = field(default=0.05, metadata={"help": "Dropout on the adapter's input."})
    target_modules: list[str] | str = field(default="all-linear", metadata={
        "help": "Linear module names to adapt (e.g. [q_proj, v_proj]), or all-linear (every Linear but the LM head)."})

    def __post_init__(self):
        if self.r < 1:
            raise ValueError(f"method.lora.r={self.r} must be >= 1")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"method.lora.dropout={self.dropout} must be in [0, 1)")
        if not isinstance(self.target_modules, str):
            self.target_modules = [str(m) for m in self.target_modules]  # a Hydra ListConfig in, a plain list out


def check_peft(peft: str | None, lora: dict | LoraSettings | None) -> LoraSettings | None:
    """The method's validated LoRA settings, or None for full fine-tuning (`__post_init__` of GRPO/PPO configs)."""
    if peft not in PEFT_KINDS:
        raise ValueError(f"method.peft={peft!r} is unknown; use null (full fine-tuning) or lora")
    if peft is None:
        return None
    return lora if isinstance(lora, LoraSettings) else LoraSettings(**dict(lora or {}))


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
