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


def portable(state: dict) -> dict:
    """rng_state() in types `torch.load(weights_only=True)` reads back (tensors, lists, numbers, strings): a
    checkpoint in a run folder must never need unpickling arbitrary objects to resume."""
    name, keys, pos, has_gauss, cached = state["numpy"]
    version, internal, gauss = state["python"]
    return {"python": [version, list(internal), gauss], "numpy": [name, torch.from_numpy(np.asarray(keys, np.int64)),
                                                                    int(pos), int(has_gauss), float(cached)],
            "torch": state["torch"], "cuda": state["cuda"]}


def from_portable(state: dict) -> dict:
    """The inverse of portable(): what set_rng_state takes."""
    name, keys, pos, has_gauss, cached = state["numpy"]
    version, internal, gauss = state["python"]
    return {"python": (version, tuple(internal), gauss),
            "numpy": (name, keys.numpy().astype(np.uint32), pos, has_gauss, cached),
            "torch": state["torch"], "cuda": state["cuda"]}


class rng_preserved:
    """Restore every RNG state on exit, so what runs inside draws nothing training would see."""

    def __enter__(self):
        self.state = rng_state()

    def __exit__(self, *exc):
        set_rng_state(self.state)
        return False
