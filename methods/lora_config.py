"""method.lora's settings (LoraSettings) and method.peft's check, importable without torch (methods/lora.py
re-exports them beside the parts that need torch and peft; methods/config_common.py says why)."""
from __future__ import annotations

from dataclasses import dataclass, field

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
