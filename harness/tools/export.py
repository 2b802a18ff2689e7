"""A finished run's trained policy as an ordinary HF model folder (transformers, vLLM, lm-eval, `model=<path>`).

    python -m harness.tools.export runs/adhoc/20250101-120000-es exported/es-zoo-1m
    python -m harness.tools.export <run_dir> <out_dir> --dtype bfloat16 --force
    python -m harness method=es +save_model=true          # the same, into <run_dir>/model, when the run ends

The folder holds the weights (safetensors shards), config.json, the base's tokenizer files (chat template
included), a generation_config.json with the special tokens only (the harness ignores a checkpoint's
sampling defaults, so HF and vLLM decode as the run's evaluation did), the base's licence files, and a
README.md model card (harness/tools/export_card.py). It is written to <out_dir>.tmp beside the target and
renamed into place, so a kill leaves the old folder or the new one, never half of one.

Where the trained weights come from (`--source auto` picks the first that the run has):
  master  ES's fp32 master (<run_dir>/es_checkpoint/master.safetensors, from the run's last iteration): exact
          in fp32, and cast once to the dtype asked; for ES with method.peft=lora it holds the adapters, which
          are loaded into the base's LoRA wrapping and merged, as the run merged them
  update  <run_dir>/update.safetensors, theta_final in the run's dtype (harness/analysis/update.py), any
          method (LoRA runs store the merged model); the base's hash in the record is checked first
A run that trains nothing (method=base) exports its base model. dtype: the run's model dtype unless asked.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from harness.core.errors import UserError

DTYPES = ("float32", "bfloat16", "float16")
SOURCES = ("auto", "master", "update")
CKPT, MASTER, STATE = "es_checkpoint", "master.safetensors", "state.json"
ES_TARGET = "methods.es.ES"


class ExportError(UserError, ValueError):
    """Bad input to an export: the message is one line naming the problem and the fix."""


def finished_record(run_dir: Path):
    """The run's record when it finished ok, else ExportError naming what is missing."""
    from harness.core.records import RECORD_NAME, RecordError, read_record

    path = Path(run_dir) / RECORD_NAME
    if not path.is_file():
        raise ExportError(f"{run_dir} holds no {RECORD_NAME}: not a run folder; pass runs/<group>/<stamp>-<method> "
                          "(or the run's folder inside an experiment)")
    try:
        rec = read_record(path)
    except (RecordError, OSError) as e:
        raise ExportError(str(e)) from None
    status = rec.effective_status
    if status != "ok":
        why = f": {rec.error}" if rec.error else ""
        raise ExportError(f"run {run_dir} did not finish (status {status}{why}); export a run whose record says ok, "
                          "or rerun it (an ES run resumes from its checkpoint)")
    return rec


def check_out_dir(out_dir: Path, force: bool) -> None:
    if out_dir.is_file():
        raise ExportError(f"{out_dir} is a file; pass a folder path for the export")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not force:
        raise ExportError(f"{out_dir} exists and is not empty; pass --force to replace it, or another folder")


def run_dtype(rec) -> str:
    """The dtype the run loaded its model in ("auto": the checkpoint's own, resolved when it loads)."""
    return str((rec.config.get("model") or {}).get("dtype") or "float32")


def master_of(run_dir: Path, rec) -> tuple[Path | None, str]:
    """(the ES master written at the run's last iteration, "") or (None, why there is none)."""
    method = rec.config.get("method") or {}
    if method.get("_target_") != ES_TARGET:
        return None, f"the method is {rec.method}, not ES"
    from methods.base import latest_dir

    folder = latest_dir(Path(run_dir) / CKPT, STATE)
    if folder is None:
        return None, f"no {CKPT}/ with a {STATE}"
    iteration = json.loads((folder / STATE).read_text()).get("iteration")
    steps = rec.train.steps if rec.train else None
    if iteration != steps:
        return None, f"{folder} is from iteration {iteration}, the run ended at {steps}"
    return folder / MASTER, ""


def pick_source(run_dir: Path, rec, source: str) -> tuple[str, Path | None]:
    """("base" | "master" | "update", the file) for `source`, or ExportError saying what the run lacks."""
    if not rec.trains:
        return "base", None
    master, why_not = master_of(run_dir, rec)
    update = Path(run_dir) / str((rec.update or {}).get("path") or "update.safetensors")
    has_update = bool((rec.update or {}).get("path")) and update.is_file()
    lora = (rec.config.get("method") or {}).get("peft") == "lora"
    if source == "master" and master is None:
        raise ExportError(f"run {run_dir} has no final ES master ({why_not}); use --source update or auto")
    if source == "update" and not has_update:
        raise ExportError(f"run {run_dir} has no update.safetensors; rerun it with analysis.store_update=true "
                          "(or +save_model=true), or use --source master for an ES run")
    if source == "auto":  # the fp32 master first (exact in any dtype); a LoRA master needs peft to merge: last
        order = (("update", has_update), ("master", master is not None)) if lora else \
                (("master", master is not None), ("update", has_update))
        source = next((name for name, ok in order if ok), "")
        if not source:
            raise ExportError(f"run {run_dir} keeps no final weights: no update.safetensors (analysis.store_update=true "
                              f"keeps it) and no final ES master ({why_not}); rerun it with +save_model=true")
    return source, master if source == "master" else update


def load_base(rec, run_dir: Path):
    """The run's base model in the run's dtype, checked against the hash its record keeps."""
    from transformers import AutoModelForCausalLM

    from harness.analysis.update import UpdateError, check_base
    from harness.core.hub import not_cached_message, offline_unless_reachable
    from harness.core.policy import DTYPES as LOAD_DTYPES, resolve_model_path

    path = resolve_model_path(rec.model)
    offline = path == rec.model and not Path(path).exists() and offline_unless_reachable(rec.model)  # a hub id
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=LOAD_DTYPES[run_dtype(rec)])
    except OSError as e:
        raise ExportError(not_cached_message(rec.model) if offline else
                          f"the run's base model {rec.model!r} does not load ({str(e).splitlines()[0]}); "
                          "the export needs the weights the run started from") from None
    if (rec.update or {}).get("base_sha256"):
        try:
            check_base(model, rec.update, str(run_dir), rec.model)
        except UpdateError as e:
            raise ExportError(str(e)) from None
    return model.eval()


def trained_tensors(model, rec, source: str, path: Path | None) -> dict:
    """name -> the trained tensor for every parameter of `model` (tied ones once); a LoRA master is merged
    into `model` itself here, as the run merged it."""
    import torch
    from safetensors.torch import load_file

    from harness.analysis.update import named_params

    names = [n for n, _ in named_params(model)]
    if source == "base":
        return {n: p.detach() for n, p in named_params(model)}
    saved = load_file(str(path))
    if source == "master" and (rec.config.get("method") or {}).get("peft") == "lora":
        from methods.es.lora import adapter_tensors, wrap_lora

        method = rec.config["method"]
        peft_model = wrap_lora(model, method["lora"], seed=int(method.get("seed", rec.seed or 0)))
        with torch.no_grad():
            for n, p in adapter_tensors(peft_model):
                if n not in saved:
                    raise ExportError(f"{path} has no adapter tensor {n}: it is not this run's LoRA master")
                p.copy_(saved[n])
            merged = peft_model.merge_and_unload()
        return {n: p.detach() for n, p in named_params(merged)}
    missing = [n for n in names if n not in saved]
    if missing:
        raise ExportError(f"{path} has no tensor {missing[0]} ({len(missing)} of {len(names)} missing): it belongs "
                          f"to another model than {rec.model}")
    return {n: saved[n] for n in names}


def cast_into(model, tensors: dict, dtype: str):
    """`model` in `dtype` holding `tensors`, each cast once from its stored dtype; ExportError on overflow."""
    import torch

    from harness.analysis.update import named_params

    target = getattr(torch, dtype)
    model.to(target)
    with torch.no_grad():
        for name, p in named_params(model):
            src = tensors[name]
            cast = src.to(target)
            if not torch.isfinite(cast).all() and torch.isfinite(src).all():
                big = float(src.abs().max())
                raise ExportError(f"--dtype {dtype} cannot hold the weights: {name} has |w| up to {big:.4g}, beyond "
                                  f"{dtype}'s largest {torch.finfo(target).max:.4g}; use bfloat16 or float32")
            p.copy_(cast)
    model.config.dtype = target
    return model


def write_folder(out_dir: Path, model, tokenizer_dir: str, card: str, licence_files: list[Path]) -> None:
    """Everything into <out_dir>.tmp, then renamed into place (methods/base.py save_dir_atomic)."""
    from transformers import GenerationConfig

    from harness.core.atomic import current_umask, write_text_atomic
    from harness.core.policy import _load_tokenizer
    from methods.base import fsync_file, save_dir_atomic

    tokenizer = _load_tokenizer(tokenizer_dir)  # the base's files as they are, chat template included

    def write(tmp: Path) -> None:
        model.generation_config = GenerationConfig.from_model_config(model.config)  # special tokens only
        model.save_pretrained(tmp, max_shard_size="2GB")
        tokenizer.save_pretrained(tmp)
        for f in licence_files:
            shutil.copyfile(f, tmp / f.name)
        write_text_atomic(tmp / "README.md", card)
        mode = 0o666 & ~current_umask()  # safetensors' temp files are private (0600): give what open() would
        for f in tmp.iterdir():
            f.chmod(mode)
            fsync_file(f)

    try:
        save_dir_atomic(out_dir, write)
    except BaseException:  # a failed write leaves the old folder and nothing beside it
        shutil.rmtree(out_dir.with_name(out_dir.name + ".tmp"), ignore_errors=True)
        raise


def export(run_dir: Path, out_dir: Path, dtype: str | None = None, force: bool = False,
           source: str = "auto") -> dict:
    """Write the run's trained policy to `out_dir`; returns what was written (for the log and the tests)."""
    from harness.core.policy import resolve_model_path
    from harness.tools.export_card import card, licence_files

    run_dir, out_dir = Path(run_dir), Path(out_dir)
    if dtype is not None and dtype not in DTYPES:
        raise ExportError(f"--dtype {dtype} is not one a model folder can take here; use one of {', '.join(DTYPES)}")
    if source not in SOURCES:
        raise ExportError(f"--source {source} is unknown; use one of {', '.join(SOURCES)}")
    rec = finished_record(run_dir)
    check_out_dir(out_dir, force)
    start = time.perf_counter()
    kind, path = pick_source(run_dir, rec, source)
    model = load_base(rec, run_dir)
    stored = str(model.dtype).removeprefix("torch.")
    tensors = trained_tensors(model, rec, kind, path)
    dtype = dtype or stored
    model = cast_into(model, tensors, dtype)
    base_dir = resolve_model_path(rec.model)
    info = {"run_dir": str(run_dir), "out_dir": str(out_dir), "source": kind, "source_file": str(path or ""),
            "dtype": dtype, "run_dtype": stored, "base_dir": base_dir, "n_params": sum(t.numel() for t in tensors.values())}
    write_folder(out_dir, model, base_dir, card(rec, info), licence_files(rec.model, base_dir))
    info["bytes"] = sum(f.stat().st_size for f in out_dir.glob("*.safetensors"))
    info["seconds"] = round(time.perf_counter() - start, 2)
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.tools.export", description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path, help="a finished run's folder (its record.json says ok)")
    ap.add_argument("out_dir", type=Path, help="the model folder to write (refused when it exists and is not empty)")
    ap.add_argument("--dtype", help="float32 | bfloat16 | float16 (default: the dtype the run's model had)")
    ap.add_argument("--source", default="auto", help="auto | master (ES's fp32 master) | update (update.safetensors)")
    ap.add_argument("--force", action="store_true", help="replace a non-empty out_dir")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    args = ap.parse_args(argv)
    import torch
    import transformers

    from harness.core.quiet import quiet_known_warnings

    torch.set_num_threads(args.threads)
    transformers.utils.logging.disable_progress_bar()  # one line per export, not loading and writing bars
    quiet_known_warnings()
    try:
        info = export(args.run_dir, args.out_dir, args.dtype, args.force, args.source)
    except UserError as e:  # ExportError, a model that does not load, a wheel model not materialised
        print(f"esbench: error: {e}", file=sys.stderr)
        return 2
    print(f"exported {info['run_dir']} ({info['source']}, {info['n_params']:,} parameters) to {info['out_dir']} "
          f"in {info['dtype']}: {info['bytes'] / 1e6:.1f} MB of weights in {info['seconds']} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
