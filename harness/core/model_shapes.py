"""A model's shape (its HF config) without its weights or the network, and budgets priced from it.

Where a shape comes from, first hit wins:
  harness/shapes/<short>.json   shipped config.json fields of the hub models (Qwen/Qwen2.5-0.5B-Instruct
                                -> qwen2.5-0.5b: the id's last part, lower case, "-instruct" dropped)
  harness/checkpoints/<name>/   the zoo models
  <path>/config.json            a local model directory
  the local HF cache            a hub model downloaded before (local_files_only: never the network)

Experiment files price their FLOPs budgets from it through the OmegaConf resolver

    budget:
      flops: ${esbench.generation_budget:${model.name_or_path},3e6,150,300}

= completions x generation_flops(one prompt of that many tokens + one completion of that many) on
the run's model (harness/core/flops.py): the ES paper's protocol, computed, never hand-copied, so two
experiment files cannot drift apart and a change to the cost model reprices every budget.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import OmegaConf

from harness.core import paths
from harness.core.errors import UserError
from harness.core.flops import generation_flops

if TYPE_CHECKING:  # transformers loads on first use: `import harness` (every command) stays fast
    from transformers import PretrainedConfig

SHAPES_DIR, ZOO_DIR = paths.SHAPES_DIR, paths.ZOO_DIR


class ShapeError(UserError, ValueError):
    """No config for a model could be found offline; the message names the file to add."""


def shape_name(name_or_path: str) -> str:
    """harness/shapes/ file stem for a hub id: Qwen/Qwen2.5-7B-Instruct -> qwen2.5-7b."""
    short = str(name_or_path).rstrip("/").split("/")[-1].lower()
    return short[:-len("-instruct")] if short.endswith("-instruct") else short


@functools.lru_cache(maxsize=64)
def load_shape(name_or_path: str) -> PretrainedConfig:
    """The model's config, offline (see the module docstring for where it looks).

    Raises:
        ShapeError: none of the places has it.
    """
    from transformers import AutoConfig

    shipped = SHAPES_DIR / f"{shape_name(name_or_path)}.json"
    for folder in (ZOO_DIR / str(name_or_path), Path(str(name_or_path)).expanduser()):
        if (folder / "config.json").is_file():
            return AutoConfig.from_pretrained(str(folder))
    if shipped.is_file():
        fields = json.loads(shipped.read_text())
        return AutoConfig.for_model(fields.pop("model_type"), **fields)
    try:
        return AutoConfig.from_pretrained(str(name_or_path), local_files_only=True)
    except (OSError, ValueError):
        raise ShapeError(
            f"no config for model {name_or_path!r} offline: add harness/shapes/{shape_name(name_or_path)}.json "
            "(the fields of its config.json), or download the model once, or set budget.flops=... by hand"
        ) from None


# The fields the FLOPs count reads (harness/core/flops.py); a config.json with all of them is read as JSON.
FLOPS_FIELDS = ("hidden_size", "num_attention_heads", "intermediate_size", "num_hidden_layers", "vocab_size")


@functools.lru_cache(maxsize=64)
def flops_shape(name_or_path: str):
    """The model's config.json (or shipped shape) as plain JSON, where it has the fields the FLOPs count
    reads (no transformers import: `+dry_run` and `+plan` resolve a budget and a price for every run);
    otherwise transformers' config, as load_shape. The memory model reads a few more fields with
    getattr defaults that equal transformers' for these architectures (tests/test_configs.py and
    tests/test_plan.py compare both)."""
    from types import SimpleNamespace

    name = str(name_or_path)
    for f in (ZOO_DIR / name / "config.json", Path(name).expanduser() / "config.json",
              SHAPES_DIR / f"{shape_name(name)}.json"):
        if f.is_file():
            fields = json.loads(f.read_text())
            if all(isinstance(fields.get(k), int) for k in FLOPS_FIELDS):
                fields.setdefault("num_key_value_heads", fields["num_attention_heads"])  # transformers' default
                return SimpleNamespace(**fields)
            break
    return load_shape(name)


def generation_budget(name_or_path: str, completions, prompt_tokens, completion_tokens) -> float:
    """FLOPs of `completions` generations of a prompt_tokens + completion_tokens sequence on this model."""
    cfg = flops_shape(str(name_or_path))
    return float(completions) * generation_flops(cfg, [int(prompt_tokens)], [int(completion_tokens)])


def register_resolvers() -> None:
    """Make ${esbench.generation_budget:...} available to every config (idempotent)."""
    if not OmegaConf.has_resolver("esbench.generation_budget"):
        OmegaConf.register_new_resolver("esbench.generation_budget", generation_budget)
