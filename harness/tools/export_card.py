"""The README.md model card of an exported run (harness/tools/export.py), and the base's licence.

The card names the base model, the method and its settings, the task, the budget (asked and spent), the
seed, the git sha of the code that trained it, where the weights came from and in which dtype, the run's
test metrics with their 95% intervals as the record holds them, and the base's licence. Everything is
read from the run's record.json, so the card says what the run did, not what a config says now.
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

from harness.core import paths, wheels

LICENCE_FILES = re.compile(r"^(LICEN[CS]E|NOTICE|COPYING|GEMMA_TERMS|USE_POLICY)", re.IGNORECASE)
SPDX = {"Apache-2.0": "apache-2.0", "MIT": "mit"}  # the hub's card metadata spells licences in lower case
GENERIC_TOKENIZERS = ("TokenizersBackend", "PreTrainedTokenizerFast")
SOURCES = {"master": "ES's master (es_checkpoint/master.safetensors, the run's last iteration; fp32 unless "
                     "method.numerics=inplace, LoRA adapters merged when method.peft=lora)",
           "update": "the run's theta_final (update.safetensors, the run's dtype)",
           "base": "the base model itself (the run trains nothing)"}


def licence(model: str, base_dir: str) -> str:
    """The base's licence as its source states it, or a line saying where to look."""
    if wheels.is_wheel_model(model):
        return wheels.MODELS[model].licence
    if paths.is_zoo(model):
        return (f"none ships with it: an esbench zoo model trained from scratch by esbench "
                f"(harness/checkpoints/{model}/CARD.md), under the esbench repository's terms")
    readme = Path(base_dir) / "README.md"
    if not readme.is_file():  # a hub id: the card in the local cache, if it was downloaded with the weights
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(model, "README.md")
            readme = Path(cached) if isinstance(cached, str) else readme
        except ImportError:
            pass
    if readme.is_file():
        front = re.match(r"^---\n(.*?)\n---", readme.read_text(errors="replace"), re.S)
        found = re.search(r"^license:\s*(\S+)", front.group(1), re.M) if front else None
        if found:
            return found.group(1)
    return f"unknown here: check the card of {model}"


def licence_files(model: str, base_dir: str) -> list[Path]:
    """The base folder's licence texts (LICENSE, NOTICE, GEMMA_TERMS.html, ...), copied beside the weights."""
    folder = Path(base_dir)
    return sorted(f for f in folder.iterdir() if f.is_file() and LICENCE_FILES.match(f.name)) if folder.is_dir() else []


def _fmt(v) -> str:
    return f"{v:g}" if isinstance(v, float) else json.dumps(v) if isinstance(v, (dict, list)) else str(v)


def _settings(node: dict) -> str:
    """A config node's scalar settings as `k=v` (nested nodes are in the card's JSON block)."""
    return ", ".join(f"{k}={_fmt(v)}" for k, v in node.items() if k != "_target_" and not isinstance(v, dict)) or "-"


def _budget(rec) -> str:
    b, asked = rec.budget, rec.config.get("budget") or {}
    kind = asked.get("kind")
    line = f"{kind} {_fmt(asked.get(kind))}" if kind else "-"
    if b is not None and b.flops_used is not None:
        line += f"; spent {b.flops_used:.4g} FLOPs, {b.samples_used} samples, {b.steps} steps"
    return line


def _metrics(rec) -> list[str]:
    lines = []
    for split, named in rec.metrics.items():
        n = next((m.n for m in named.values() if m.n), None)
        lines += ["", f"{split} split{f', {n} prompts' if n else ''} (95% bootstrap intervals over prompts):", "",
                  "| metric | value | 95% CI |", "|---|---|---|"]
        for name, m in named.items():
            ci = f"[{m.ci_low:.4f}, {m.ci_high:.4f}]" if m.ci_low is not None and m.ci_high is not None else "-"
            lines.append(f"| {name} | {'-' if m.mean is None else f'{m.mean:.4f}'} | {ci} |")
    return lines or ["", "(the run recorded no metrics)"]


def _tokenizer_note(base_dir: str) -> list[str]:
    cfg = Path(base_dir) / "tokenizer_config.json"
    if cfg.is_file() and json.loads(cfg.read_text()).get("tokenizer_class") in GENERIC_TOKENIZERS:
        return ["", "The tokenizer is esbench's character tokenizer. transformers 5's `AutoTokenizer` picks the "
                "tokenizer class from the model type (Qwen2Tokenizer), which drops spaces; load it with "
                "`PreTrainedTokenizerFast.from_pretrained(<folder>)` (the harness does: harness/core/policy.py)."]
    return []


def card(rec, info: dict) -> str:
    """The README.md text for the export `info` (harness/tools/export.py export) of run record `rec`."""
    from harness.core.records import git_sha

    method, model_cfg = rec.config.get("method") or {}, rec.config.get("model") or {}
    hub = rec.model.count("/") == 1 and not Path(rec.model).exists()
    spdx = licence(rec.model, info.get("base_dir", ""))
    meta = ["---", "library_name: transformers", f"license: {SPDX.get(spdx, 'other')}",
            *([f"base_model: {rec.model}"] if hub else []), "tags:", "- esbench", f"- {rec.method}", "---"]
    rows = [
        ("base model", f"{rec.model}" + (f" ({wheels.MODELS[rec.model].source})" if wheels.is_wheel_model(rec.model) else "")),
        ("method", f"{rec.method} (`{method.get('_target_', '?')}`), label \"{rec.label}\""),
        ("settings", _settings(method)),
        ("task", f"`{rec.task}`: {_settings(rec.config.get('task') or {})}"),
        ("budget", _budget(rec)),
        ("seed", str(rec.seed)),
        ("git sha (the run)", rec.git_sha or "unknown"),
        ("weights", f"{SOURCES[info['source']]}, written in {info['dtype']} (the run's model: {info['run_dtype']}); "
                    f"{info['n_params']:,} parameters"),
        ("prompt format", f"chat_template={model_cfg.get('chat_template')}, system_prompt={model_cfg.get('system_prompt')!r}"),
        ("licence of the base", spdx),
        ("exported", f"{time.strftime('%Y-%m-%d %H:%M')} by esbench {git_sha()} (`python -m harness.tools.export`)"),
    ]
    settings = {k: rec.config.get(k) for k in ("model", "method", "task", "eval", "budget")}
    return "\n".join([
        *meta, "", f"# {rec.label or rec.method}: {rec.model} trained with {rec.method}", "",
        f"The trained policy of the esbench run `{info['run_dir']}`, as an ordinary transformers folder.", "",
        "| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows), "",
        "## The run's metrics", *_metrics(rec), "",
        "## Use", "",
        "```",
        "python -m harness model=<this folder> method=base      # with the run's task and eval settings (below)",
        "lm_eval --model hf --model_args pretrained=<this folder> --tasks <task>   # docs/export.md",
        "```",
        "",
        "generation_config.json holds the special tokens only: greedy decoding with transformers or vLLM matches "
        "the run's evaluation (the harness never applies a checkpoint's sampling defaults).",
        *_tokenizer_note(info.get("base_dir", "")), "",
        "## The run's settings (from its record.json)", "", "```json", json.dumps(settings, indent=1, default=str),
        "```", ""])
