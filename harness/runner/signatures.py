"""The keyword arguments a `_target_` accepts, and their scalar types, read from its source without importing it:
the fallback for targets that have no light config module.

A method's config dataclass lives in a torch-free module beside it (methods/es/config.py for methods/es/loop.py,
found by harness/core/method_facts.py light_config), and harness/runner/schema.py reads its keys, types and
value checks from that class directly. What has none is read here: the tasks (tasks/*.py), the eval and
analysis blocks (EvalConfig, AnalysisConfig), methods.base.Base, and a method from outside the repository
(tests/test_toy_method.py) whose module imports torch. Importing those to ask `inspect` would load torch and
TRL first (7-18 s before the one-line answer), so their source is parsed instead (ast, a few milliseconds).

What a class accepts, first rule that applies:
  `config_class = X` (methods/base.py's ConfiguredMethod)  the fields of dataclass X (defined in the module)
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


def _keys_node(cls: ast.ClassDef, classes: dict[str, ast.ClassDef]):
    """Where `cls`'s keys are declared, by the module docstring's rules: ("fields", dataclass node),
    ("init", __init__ node), ("none", None) for a ConfiguredMethod without config, or None: cannot tell."""
    for n in cls.body:
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "config_class" for t in n.targets):
            ref = n.value.id if isinstance(n.value, ast.Name) else None
            return ("fields", classes[ref]) if ref in classes and _is_dataclass(classes[ref]) else None
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if init is not None:
        return "init", init
    if _is_dataclass(cls):
        return "fields", cls
    if any(getattr(b, "id", None) == "ConfiguredMethod" for b in cls.bases):
        return "none", None
    return None


@functools.lru_cache(maxsize=64)
def _declared(target: str):
    """_keys_node of `target` ("methods.es.ES"), its source parsed once; None when it cannot be read."""
    module, _, name = str(target).rpartition(".")
    path = ROOT / (module.replace(".", "/") + ".py")
    if not module or not path.is_file():
        return None
    try:
        classes = _classes(ast.parse(path.read_text()))
    except (OSError, SyntaxError):
        return None
    return _keys_node(classes[name], classes) if name in classes else None


def _init_args(fn: ast.FunctionDef) -> list[ast.arg]:
    return [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs][1:]


@functools.lru_cache(maxsize=64)
def accepted_keys(target: str) -> frozenset[str] | None:
    """Keys `target` ("methods.es.ES", "harness.evaluation.evaluate.EvalConfig") takes; None: cannot tell."""
    found = _declared(target)
    if found is None:
        return None
    how, node = found
    if how == "fields":
        return frozenset(_fields(node))
    if how == "init":
        return None if node.args.kwarg is not None else frozenset(a.arg for a in _init_args(node))
    return frozenset()


# ---- the scalar type of each key, for value checks before torch loads ----
# `method.population=2.5` used to pass every check and crash inside ES after training started, and
# `method.sigma=abc` failed in the constructor as `'>' not supported between 'str' and 'int'`, naming
# no key. A key's kind is "int", "float" or "bool" (a float accepts an int), `| None` allowing null;
# any other annotation (str, dict, lists, unions of several kinds) is not checked here.
SCALARS = ("int", "float", "bool")


def _kind(annotation: ast.expr | None) -> tuple[str, bool] | None:
    return None if annotation is None else kind_of(ast.unparse(annotation))


def kind_of(annotation: str) -> tuple[str, bool] | None:
    """("int", optional?) for the annotation `int`, `int | None`, `Optional[int]`; None for anything else."""
    parts = [p.strip() for p in annotation.replace("Optional[", "").rstrip("]").split("|")]
    optional = "None" in parts
    kinds = [p for p in parts if p != "None"]
    return (kinds[0], optional) if len(kinds) == 1 and kinds[0] in SCALARS else None


@functools.lru_cache(maxsize=64)
def field_types(target: str) -> dict[str, tuple[str, bool]]:
    """{key: (kind, optional)} for the scalar keys `target` declares (where accepted_keys finds them); {}
    when unknown."""
    found = _declared(target)
    if found is None or found[0] == "none":
        return {}
    how, node = found
    if how == "init":
        pairs = [(a.arg, _kind(a.annotation)) for a in _init_args(node)]
    else:
        pairs = [(n.target.id, _kind(n.annotation)) for n in node.body
                 if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]
    return {k: kind for k, kind in pairs if kind}
