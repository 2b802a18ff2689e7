"""Every RNG a run draws from (python, numpy, torch CPU and CUDA): saved, restored, or kept untouched.

Evaluation during training runs inside `rng_preserved()`, so it draws nothing training would see;
PPO's checkpoints save `rng_state()` and a resumed run restores it.
"""
from __future__ import annotations

import random

import numpy as np
import torch


def rng_state() -> dict:
    """The python, numpy, torch CPU and CUDA RNG states (evaluation and PPO checkpoints save them)."""
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class rng_preserved:
    """Restore every RNG state on exit, so what runs inside draws nothing training would see."""

    def __enter__(self):
        self.state = rng_state()

    def __exit__(self, *exc):
        set_rng_state(self.state)
        return False
