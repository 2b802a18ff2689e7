"""The scalar type each hyperparameter of a config `_target_` declares, read from source (no import).

harness/runner/schema.py checks method, task and eval values against these before torch loads:
`method.population=2.5` used to pass every check and crash inside ES after training started, and
`method.sigma=abc` failed in the constructor as `'>' not supported between 'str' and 'int'`, naming
no key. Importing the targets to read their annotations would load torch first (harness/runner/
signatures.py explains), so the annotations are parsed from source like the key sets are.

A field's kind is "int", "float" or "bool" (a float accepts an int), with `| None` allowing null;
any other annotation (str, dict, lists, unions of several kinds) is not checked here.
"""
from __future__ import annotations

import ast
import functools

from harness.core import paths

SCALARS = ("int", "float", "bool")


def _kind(annotation: ast.expr) -> tuple[str, bool] | None:
    """("int", optional?) for `int`, `int | None`, `Optional[int]`; None for anything else."""
    parts = [p.strip() for p in ast.unparse(annotation).replace("Optional[", "").rstrip("]").split("|")]
    optional = "None" in parts
    kinds = [p for p in parts if p != "None"]
    return (kinds[0], optional) if len(kinds) == 1 and kinds[0] in SCALARS else None


def _annotated(cls: ast.ClassDef) -> dict[str, tuple[str, bool]]:
    out = {}
    for n in cls.body:
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
            kind = _kind(n.annotation)
            if kind:
                out[n.target.id] = kind
    return out


def _init_params(fn: ast.FunctionDef) -> dict[str, tuple[str, bool]]:
    out = {}
    for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs][1:]:
        kind = _kind(a.annotation) if a.annotation is not None else None
        if kind:
            out[a.arg] = kind
    return out


@functools.lru_cache(maxsize=64)
def field_types(target: str) -> dict[str, tuple[str, bool]]:
    """{key: (kind, optional)} for the scalar keys `target` ("methods.es.ES") declares; {} when unknown.

    Where it looks: the dataclass named by `config_class = X` (methods/base.py's ConfiguredMethod), else
    the class's own __init__, else the class's annotated fields (a dataclass such as EvalConfig).
    """
    module, _, name = str(target).rpartition(".")
    path = paths.ROOT / (module.replace(".", "/") + ".py")
    try:
        tree = ast.parse(path.read_text()) if module else None
    except (OSError, SyntaxError):
        return {}
    classes = {n.name: n for n in (tree.body if tree else []) if isinstance(n, ast.ClassDef)}
    cls = classes.get(name)
    if cls is None:
        return {}
    for n in cls.body:
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "config_class" for t in n.targets):
            ref = n.value.id if isinstance(n.value, ast.Name) else None
            return _annotated(classes[ref]) if ref in classes else {}
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    return _init_params(init) if init is not None else _annotated(cls)
