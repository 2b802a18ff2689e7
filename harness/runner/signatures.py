"""The keyword arguments a config's `_target_` accepts, read from its source without importing it.

Hydra merges an experiment file into the composed config without struct checks, so a nested typo
(`eval: {n_prompt: 20}`) used to become an extra key that every run then passed on, failing each
with a TypeError. harness/runner/schema.py checks every method, task and eval key against these sets
before anything runs; importing the targets to ask `inspect` would load torch and TRL first (7-18 s
before the one-line answer), so their source is parsed instead (ast, a few milliseconds).

What a class accepts, first rule that applies:
  `config_class = X` (methods/base.py's ConfiguredMethod)  the fields of dataclass X
  its own `__init__`                                   the parameter names (None with **kwargs)
  @dataclass                                           its annotated fields
  a ConfiguredMethod without config_class              nothing (methods.base.Base)
None means "cannot tell": the constructor itself still checks when the run is composed.
"""
from __future__ import annotations

import ast
import functools
from harness.core import paths

ROOT = paths.ROOT


def _classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


def _is_dataclass(cls: ast.ClassDef) -> bool:
    names = {d.id if isinstance(d, ast.Name) else getattr(d, "attr", None) for d in
             (x.func if isinstance(x, ast.Call) else x for x in cls.decorator_list)}
    return "dataclass" in names


def _fields(cls: ast.ClassDef) -> set[str]:
    return {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
            and "ClassVar" not in ast.unparse(n.annotation)}


def _class_keys(cls: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> set[str] | None:
    for n in cls.body:
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "config_class" for t in n.targets):
            ref = n.value.id if isinstance(n.value, ast.Name) else None
            return _fields(classes[ref]) if ref in classes and _is_dataclass(classes[ref]) else None
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if init is not None:
        if init.args.kwarg is not None:
            return None
        return {a.arg for a in [*init.args.posonlyargs, *init.args.args, *init.args.kwonlyargs][1:]}
    if _is_dataclass(cls):
        return _fields(cls)
    if any(getattr(b, "id", None) == "ConfiguredMethod" for b in cls.bases):
        return set()
    return None


@functools.lru_cache(maxsize=64)
def accepted_keys(target: str) -> frozenset[str] | None:
    """Keys `target` ("methods.es.ES", "harness.evaluation.evaluate.EvalConfig") takes; None: cannot tell."""
    module, _, name = str(target).rpartition(".")
    path = ROOT / (module.replace(".", "/") + ".py")
    if not module or not path.is_file():
        return None
    try:
        classes = _classes(ast.parse(path.read_text()))
    except (OSError, SyntaxError):
        return None
    keys = _class_keys(classes[name], classes) if name in classes else None
    return frozenset(keys) if keys is not None else None
