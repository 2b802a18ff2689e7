"""`model=<hub id or folder>` on the command line: a model with no conf/model option of its own.

`model` is a Hydra config group, so `model=Qwen/Qwen2.5-1.5B-Instruct` would look for
conf/model/Qwen/Qwen2.5-1.5B-Instruct.yaml and fail. Before Hydra composes, a value that names no
conf/model option becomes `model=generic model.name_or_path=<value>` (conf/model/generic.yaml: a
generic HF causal LM, the checkpoint's own dtype, its chat template when it has one, the paper's ES
setting). A value that looks like a folder but is none, or like a mistyped option, fails here in one
line, before torch loads:

    python -m harness model=Qwen/Qwen2.5-1.5B-Instruct task=countdown_think method=base
    python -m harness model=/data/my-finetune method=es
"""
from __future__ import annotations

import difflib
import re
from pathlib import Path

from harness.core.errors import UserError
from harness.core.paths import CONF_DIR, ZOO_DIR

CONF_MODELS = CONF_DIR / "model"
GENERIC = "generic"
# Values Hydra must see as they are: sweeps (a,b), interpolations, quoted strings, function calls.
_HYDRA_SYNTAX = re.compile(r"[,${}\[\]()'\"]")
_PLAIN = re.compile(r"[\w./~:+@-]+")


class ModelArgError(UserError, ValueError):
    """`model=` names no option, no folder and no hub id; the message lists what would work."""


def options() -> list[str]:
    return sorted(p.stem for p in CONF_MODELS.glob("*.yaml"))


def is_hub_id(value: str) -> bool:
    """org/name, as the hub spells ids (a relative folder must start with ./ to be read as one)."""
    return value.count("/") == 1 and not value.startswith((".", "/", "~")) and not value.endswith("/")


def model_overrides(value: str) -> list[str] | None:
    """The overrides `model=<value>` stands for, or None when Hydra can take it as it is.

    Raises:
        ModelArgError: a folder that does not exist, or a name that is neither an option nor a zoo model.
    """
    if value in options() or _HYDRA_SYNTAX.search(value) or value in ("null", ""):
        return None
    exists = (ZOO_DIR / value).is_dir() or Path(value).expanduser().exists()
    if not exists and not is_hub_id(value):
        named = [o for o in options() if o != GENERIC]
        near = difflib.get_close_matches(value, named, n=1, cutoff=0.6)
        hint = f"did you mean model={near[0]}?" if near else f"pass an option ({', '.join(named)}),"
        raise ModelArgError(f"model={value}: no conf/model option and no folder {value!r} "
                            f"({Path(value).expanduser().resolve()}); {hint} an existing folder, or a hub id "
                            "like Qwen/Qwen2.5-1.5B-Instruct")
    quoted = value if _PLAIN.fullmatch(value) else "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return [f"model={GENERIC}", f"model.name_or_path={quoted}"]


def rewrite_argv(argv: list[str]) -> list[str]:
    """argv with each `model=<hub id or folder>` expanded (see the module docstring)."""
    out = list(argv[:1])
    for a in argv[1:]:
        if a.startswith("model="):
            expanded = model_overrides(a.split("=", 1)[1])
            if expanded:
                out += expanded
                continue
        out.append(a)
    return out
