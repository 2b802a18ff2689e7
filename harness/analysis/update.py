"""Keep what training changed: theta_final next to the run's record, and a hash of theta_0.

The update is delta = theta_final - theta_0. It is stored as the trained weights themselves,
<run_dir>/update.safetensors, one tensor per parameter name of `named_parameters()` (tied weights
once) in the model's own dtype, not as a difference: a difference of two fp32 weights rounded to
fp32 does not give theta_final back (a tiny zoo ES run had 4601 of 100k coordinates off by an ulp),
while theta_final is exact, costs the same bytes, and makes "zero the update below a threshold"
an exact per-coordinate choice between theta_0 and theta_final (harness/analysis/sparsity.py).
Analyses compute delta in float64 and keep it as fp32. theta_0 is not stored: it is the run's own
model (record.model), and `base_sha256` (sha256 over every parameter's name, dtype, shape and
bytes, in name order, computed before training) lets an analysis check it loaded the same weights.
Size: the model's bytes (zoo-1m: 4 MB; a 7B bf16 model: 15 GB, so outside the zoo it is an option,
`analysis.store_update=true`).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from harness.core import paths
from harness.core.atomic import write_bytes_atomic
from harness.core.errors import UserError

UPDATE_NAME = "update.safetensors"
STORE_CHOICES = ("auto", True, False)


class UpdateError(UserError, ValueError):
    """A run's stored update is missing or does not belong to the weights loaded now; says the fix."""


def named_params(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """Parameters in a fixed order (by name), tied tensors once."""
    return sorted(model.named_parameters(), key=lambda kv: kv[0])


def base_hash(model: torch.nn.Module) -> str:
    """sha256 over (name, dtype, shape, bytes) of every parameter, in name order."""
    h = hashlib.sha256()
    for name, p in named_params(model):
        t = p.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}\n".encode())
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def is_zoo(name_or_path: str) -> bool:
    """A model loaded from harness/checkpoints (a zoo name)."""
    return paths.is_zoo(name_or_path)


def wants_update(setting, name_or_path: str) -> bool:
    """analysis.store_update: true, false, or auto (on for zoo models, off for others)."""
    return is_zoo(name_or_path) if setting == "auto" else bool(setting)


def save_update(run_dir: Path, model: torch.nn.Module) -> dict:
    """Write theta_final (the model's dtype) atomically; return what the record keeps about it."""
    from safetensors.torch import save

    final = {name: p.detach().to("cpu").contiguous() for name, p in named_params(model)}
    dtype = str(next(iter(final.values())).dtype).removeprefix("torch.")
    data = save(final, metadata={"format": "esbench-final-weights", "dtype": dtype})
    write_bytes_atomic(Path(run_dir) / UPDATE_NAME, data)
    return {"path": UPDATE_NAME, "stores": "theta_final", "dtype": dtype, "bytes": len(data),
            "n_params": sum(t.numel() for t in final.values())}


def deltas(final: dict[str, torch.Tensor], base: torch.nn.Module) -> dict[str, torch.Tensor]:
    """delta = theta_final - theta_0 per parameter, computed in float64, kept as fp32."""
    out = {}
    for name, p in named_params(base):
        if name not in final:
            raise UpdateError(f"the stored weights have no parameter {name}: they belong to another architecture")
        out[name] = (final[name].double() - p.detach().cpu().double()).float()
    return out


def load_update(run_dir: Path, update_info: dict, label: str) -> dict[str, torch.Tensor]:
    """A run's stored theta_final, or UpdateError naming the run and the fix."""
    if not update_info or not update_info.get("path"):
        raise UpdateError(f"run {label} ({run_dir}) has no stored update; rerun it with analysis.store_update=true")
    path = Path(run_dir) / update_info["path"]
    if not path.is_file():
        raise UpdateError(f"run {label}: {path} is missing; rerun the run (analysis.store_update=true) "
                          "or restore the file")
    from safetensors.torch import load_file

    return load_file(str(path))


def check_base(model: torch.nn.Module, update_info: dict, label: str, model_name: str) -> None:
    """UpdateError when the weights loaded now are not the ones the run started from."""
    want = (update_info or {}).get("base_sha256")
    if want is None:
        raise UpdateError(f"run {label} stored no base hash; rerun it with this esbench version")
    got = base_hash(model)
    if got != want:
        raise UpdateError(f"run {label}: the base weights of {model_name} loaded now (sha256 {got[:12]}) are not "
                          f"the ones it trained from ({want[:12]}); analyse with the original weights or rerun it")
