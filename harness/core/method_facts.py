"""What a method says about itself, and how the harness reads it by the method's `_target_`.

Every method class declares one `facts = MethodFacts(...)` beside its name and label keys (the protocol
is methods/base.py's `Method`; the shipped methods assign the one built in their light module, e.g.
methods/es/config.py, so it is read without torch). The budget check, the planner, the runner's step-cap
warning, the comparisons and the analysis's random-walk null read these facts; none of them matches a method name,
a class name or a table label, so a method defined anywhere (a plugin on sys.path with its own YAML)
gets an updates budget, a price and its comparisons from what it declares.

The dataclass lives here, in harness.core, rather than in methods/: the harness reads facts without
importing methods/ (tests/test_imports.py), and builds one from a method's source before torch loads.

Two ways to read them:
  facts_of(target)     every field, callables included: from the method's light module (`light_facts`:
                       methods/es/config.py's METHOD_FACTS, the object ES declares, no torch), else by
                       importing the class (with torch, TRL, ...).
  declared(target)     the data fields only (DATA): from the light module, else read from the class's
                       source without importing it,
                       so the config check runs before torch loads (harness/runner/cli.py) and a report
                       from a runs.csv needs no torch; it imports when a data field is not a literal
                       (or a module-level constant bound to one). Its callables are left unset.
A run's record keeps the data fields its method declared when it ran (`facts_record`, Record.facts), and the
reports read a run's facts from there (`record_facts`: the comparisons, the outcomes file, the analysis and
NOTE-076's claims), so a method from outside the repository keeps its rows when it is reported without its
module or YAML; a record made before records kept them is looked up by its `_target_` (`family_of`, `declared`)
or its name among the conf/method options (`targets_by_name`), and one nothing finds is named, never dropped.
A method's config dataclass lives in a light module beside it (`light_config`: methods/es/loop.py's in
methods/es/config.py), so the config check and `configure` read it without importing the method.
The code fields are given the method's settings as `configure(target, mapping)` reads them from a run's
`method:` mapping: the mapping's values over the defaults of the method's config dataclass, read by
attribute like the config itself. The method is not built (no model, no trainer), and neither is its
config: the planner prices what it is asked (a test prices a one-completion GRPO step, which the
constructor refuses), and the defaults are the method's own, never repeated by the harness.
"""
from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Mapping

from harness.core.paths import CONF_DIR

ES, RL, REFERENCE, COMPOSITE = "es", "rl", "reference", "composite"  # families (see MethodFacts.family)


@dataclass(frozen=True)
class MethodFacts:
    """The facts a method declares about itself (`facts = MethodFacts(...)` in its class body).

    Data (declared as literals, readable before torch loads: `declared`):
      family            es: evolution strategies with ES's update theta += alpha/N sum_n c_n eps_n (the
                        analysis's random-walk null applies); rl: a policy-gradient baseline (ES is set
                        against it); reference: no training (the untrained row); composite: stages of
                        other methods (`stages`). The comparisons pair rows by family.
      update_unit       what one ledger step is, i.e. what budget.kind=updates counts ("one optimizer
                        step"); None: the method cannot run under an updates budget.
      step_cap          the config key that caps its steps (max_iterations), for the unreachable-budget
                        warning; None: no cap.
      distributed       runs under accelerate/torchrun, and the planner's GPU count for it is FSDP shards.
      reference_label   a regular expression (fullmatch) for the label of its full-method reference cell
                        when an experiment names none (es_reference:), or None.
      reference_points  {setting: value}: rows of one cell with an axis over `setting` are each compared
                        with the row at `value` (ES: population N vs N=30).
      stages            (order key, stages key) of a composite: config[stages][name] for name in config[order]
                        are whole method configs, each checked against the budget in turn.
      split_unit        the config key naming the unit a composite splits its budget in (must be budget.kind).
      summary_keys      (always, sometimes): the keys its train() returns beyond harness/core/payloads.py's
                        COMMON, always or on some paths only; a record of it is read strictly against them
                        (None: not declared, its keys are kept as returned, none required).
      roles             {role: what a cell of it is}: roles an experiment's cell or grid of this method may declare
                        beside the closed list of harness/reporting/roles.py (ROLES, which a shipped file keeps
                        to); a role no claim reads is accepted and listed as "in no claim". None: none of its own.
    Code (read by importing the method: `facts_of`), each given the method's config object (`configure`):
      samples_per_step  completions one step scores (prices an updates budget, bounds a step's charge).
      scoring_forwards  completion-scoring forwards one step may run per completion beyond generating it.
      memory            (config, shape, tokens, *, dtype, engine, gpu_gb, headroom, prompt_tokens) ->
                        (bytes per part on one GPU, GPUs needed (0: none fits), a note); None: priced as
                        evaluation only (weights + KV cache at the evaluation batch).
      trains_in_driver  bool, or config -> bool: False when its weights live on engine workers while it
                        trains (no learning curve or entropy tracking then).
    """

    family: str
    update_unit: str | None = None
    step_cap: str | None = None
    distributed: bool = False
    reference_label: str | None = None
    reference_points: Mapping[str, Any] | None = None
    stages: tuple[str, str] | None = None
    split_unit: str | None = None
    summary_keys: tuple[tuple[str, ...], tuple[str, ...]] | None = None
    roles: Mapping[str, str] | None = None
    samples_per_step: Callable[[Any], float] | None = None
    scoring_forwards: Callable[[Any], float] | None = None
    memory: Callable[..., tuple[dict, int, str | None]] | None = None
    trains_in_driver: bool | Callable[[Any], bool] = True

    def in_driver(self, config) -> bool:
        """trains_in_driver for this config."""
        return bool(self.trains_in_driver(config) if callable(self.trains_in_driver) else self.trains_in_driver)


DATA = ("family", "update_unit", "step_cap", "distributed", "reference_label", "reference_points", "stages",
        "split_unit", "summary_keys", "roles")
_TUPLES = {"stages": 1, "summary_keys": 2}  # data fields that are tuples (of tuples): JSON gives lists back


def method_class(target: str) -> type | None:
    """The class `target` ("methods.es.ES") names, imported; None when it cannot be imported."""
    module, _, name = str(target or "").rpartition(".")
    if not module:
        return None
    try:
        return getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None


def facts_of(target: str) -> MethodFacts | None:
    """Every fact `target` declares: from its light module (light_facts, no torch), else its imported class;
    None for a class that cannot be imported or declares none."""
    facts = light_facts(target) or getattr(method_class(target), "facts", None)
    return facts if isinstance(facts, MethodFacts) else None


def configure(target: str, mapping: Mapping | None) -> SimpleNamespace:
    """`target`'s settings for a `method:` mapping (a Hydra node: interpolations resolved, `_` keys dropped):
    the mapping's values over its config dataclass's defaults (config_defaults), by attribute."""
    if hasattr(mapping, "_metadata"):  # a Hydra node: plain values, interpolations resolved in its config
        from omegaconf import OmegaConf
        mapping = OmegaConf.to_container(mapping, resolve=True)
    given = {k: v for k, v in dict(mapping or {}).items() if not str(k).startswith("_")}
    return SimpleNamespace(**{**config_defaults(target), **given})


# ---- a method's light module: its config and facts without torch ----
@functools.lru_cache(maxsize=128)
def _light(target: str, table: str):
    """`table`[class name] of `target`'s light module, found by convention: module `a.b` -> `a.b_config`
    (methods/config_common.py), or `a.b.config` when `a.b` is a package (methods/es/config.py), importable
    without torch. None when there is no such module or its table does not name the class."""
    module, _, name = str(target or "").rpartition(".")
    if not module:
        return None
    try:
        spec = importlib.util.find_spec(f"{module}_config")
        if spec is None and _is_package(module):  # never import `module` itself: it may load torch
            spec = importlib.util.find_spec(f"{module}.config")
    except (ImportError, ValueError):  # its package cannot be imported: nothing to find
        return None
    if spec is None:
        return None
    entries = getattr(importlib.import_module(spec.name), table, None)
    return entries.get(name) if isinstance(entries, Mapping) else None


def _is_package(module: str) -> bool:
    """Whether `module` is a package, found without running it (only its parents are imported)."""
    spec = importlib.util.find_spec(module)
    return spec is not None and spec.submodule_search_locations is not None


def light_config(target: str) -> type | None:
    """The config dataclass of `target` ("methods.es.ES") from its light module's METHOD_CONFIGS, so the config
    check builds it before torch loads. None when there is none (a method outside the repo without one: its
    config is then read from source, harness/runner/signatures.py; methods.base.Base takes no config)."""
    return _light(str(target or ""), "METHOD_CONFIGS")


def light_facts(target: str) -> MethodFacts | None:
    """The facts of `target` from its light module's METHOD_FACTS (the object its class declares as `facts`),
    so the planner prices it without importing torch or TRL; None when there are none."""
    facts = _light(str(target or ""), "METHOD_FACTS")
    return facts if isinstance(facts, MethodFacts) else None


def config_defaults(target: str) -> dict:
    """{key: default} of `target`'s config dataclass (its light config module, else the imported class's
    config_class); {} when it has none."""
    config_class = light_config(target) or getattr(method_class(target), "config_class", None)
    if config_class is None:
        return {}
    return {f.name: f.default if f.default is not MISSING else f.default_factory()
            for f in fields(config_class) if f.default is not MISSING or f.default_factory is not MISSING}


# ---- the data fields from source, before torch loads ----
def _source(module: str) -> ast.Module | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    try:
        return ast.parse(Path(spec.origin).read_text())
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None


def _constants(tree: ast.Module) -> dict[str, object]:
    """Module-level names bound to a literal (NAME = 30; A, B = "a", "b"), which a facts literal may use."""
    out = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target = node.targets[0]
        try:
            value = ast.literal_eval(node.value)
        except ValueError:
            continue
        if isinstance(target, ast.Name):
            out[target.id] = value
        elif (isinstance(target, ast.Tuple) and all(isinstance(e, ast.Name) for e in target.elts)
              and isinstance(value, tuple) and len(value) == len(target.elts)):
            out.update({e.id: v for e, v in zip(target.elts, value)})
    return out


def _imported(tree: ast.Module) -> dict[str, tuple[str, str]]:
    """{local name: (module, name)} of the module's `from X import NAME [as LOCAL]` lines."""
    return {a.asname or a.name: (node.module, a.name) for node in tree.body
            if isinstance(node, ast.ImportFrom) and node.module and not node.level for a in node.names}


class _Inline(ast.NodeTransformer):
    """Names in a facts literal replaced by the literal they are bound to: in the module, or in the module
    they are imported from (`from harness.core.method_facts import RL`; only that module's source is read,
    and only when a facts literal uses the name, so no other import is even located)."""

    def __init__(self, tree: ast.Module):
        self.constants, self.imports = _constants(tree), _imported(tree)

    def visit_Name(self, node: ast.Name):
        if node.id not in self.constants and node.id in self.imports:
            module, name = self.imports[node.id]
            source = _source(module)
            there = _constants(source) if source is not None else {}
            if name in there:
                self.constants[node.id] = there[name]
        if node.id in self.constants:
            return ast.copy_location(ast.Constant(self.constants[node.id]), node)
        raise ValueError(node.id)


def _class_assign(cls: ast.ClassDef, name: str) -> ast.expr | None:
    for node in cls.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return node.value
    return None


def _class_node(target: str) -> tuple[ast.ClassDef, ast.Module] | None:
    """The class's AST and its module's. A package that imports its class on first use (methods/es/__init__.py)
    names the defining module in a literal `LAZY = {"ES": "methods.es.loop"}`, which is followed here."""
    module, _, name = str(target or "").rpartition(".")
    tree = _source(module) if module else None
    if tree is None:
        return None
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    if cls is None:
        there = _constants(tree).get("LAZY")
        if isinstance(there, dict) and isinstance(there.get(name), str) and there[name] != module:
            return _class_node(f"{there[name]}.{name}")
    return (cls, tree) if cls is not None else None


def target_of(method: str, mconf: dict | None) -> str:
    """A run's method `_target_`: its config's, else (a record older than targets in configs) the shipped
    method of that name; "" when neither is known."""
    return str((mconf or {}).get("_target_") or targets_by_name().get(method) or "")


def family_of(method: str, mconf: dict | None) -> str | None:
    """The family a method declares (ES, RL, REFERENCE, COMPOSITE), looked up by its config's `_target_`, else by
    its name among the conf/method options, read without importing it; None when neither finds it. A record
    keeps its method's facts (record_facts): this lookup is for records made before it did."""
    target = target_of(method, mconf)
    facts = declared(target) if target else None
    return facts.family if facts is not None else None


# ---- the facts a run's record keeps: what the method declared when it ran ----
def facts_record(facts: MethodFacts | None) -> dict:
    """The data fields (DATA) of `facts` as plain JSON data, for a record (Record.facts); {} for None."""
    if facts is None:
        return {}
    return {k: _plain(getattr(facts, k)) for k in DATA}


def _plain(v):
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (tuple, list)):
        return [_plain(x) for x in v]
    return v


def _tuples(v, depth: int):
    return v if v is None or not isinstance(v, list) else tuple(_tuples(x, depth - 1) if depth > 1 else x for x in v)


def stored_facts(stored: Mapping | None) -> MethodFacts | None:
    """The MethodFacts a record keeps (facts_record's dict), data fields only; None when it keeps none (a record
    made before records kept them) or no family. Keys this code does not know (a newer writer's) are ignored."""
    if not isinstance(stored, Mapping) or not isinstance(stored.get("family"), str):
        return None
    values = {k: _tuples(stored[k], _TUPLES[k]) if k in _TUPLES else stored[k] for k in DATA if k in stored}
    return MethodFacts(**values)


def record_facts(record) -> MethodFacts | None:
    """The data facts of a run's method: those its record keeps (`record.facts`, written when it ran, so a
    report needs neither the method's module nor its YAML), else (an older record) its `_target_`'s or its
    name's declaration (family_of); None when neither is found: callers say so (unknown_family)."""
    kept = stored_facts(getattr(record, "facts", None))
    if kept is not None:
        return kept
    target = target_of(getattr(record, "method", "") or "", ((getattr(record, "config", None) or {}).get("method")))
    return declared(target) if target else None


def record_family(record) -> str | None:
    """The family of a run's method (record_facts); None when it is not found."""
    facts = record_facts(record)
    return facts.family if facts is not None else None


def unknown_family(record) -> str:
    """The line a report writes for a run whose method's family cannot be found, instead of dropping it."""
    mconf = (getattr(record, "config", None) or {}).get("method") or {}
    target = mconf.get("_target_") if isinstance(mconf, Mapping) else None
    return (f"method {getattr(record, 'method', '') or '?'}" + (f" ({target})" if target else "")
            + ": its family is unknown (the record predates records keeping their method's facts, and "
            + ("its module is not importable here: put it on PYTHONPATH" if target else
               "it names no `_target_` and no conf/method option has its name") + "), so it is in no ES-vs-RL row")


@functools.lru_cache(maxsize=128)
def declared(target: str) -> MethodFacts | None:
    """The data fields (DATA) of `target`'s facts, read from its class's `facts = MethodFacts(...)` without
    importing its module; imports (facts_of) when the class does not spell them out as literals. None: no
    such class or no facts. The code fields (samples_per_step, memory, ...) are left unset: use facts_of.
    A class whose facts live in its light module (light_facts) has them read from there."""
    light = light_facts(target)
    if light is not None:
        return _data_only(light)
    found = _class_node(target)
    call = _class_assign(found[0], "facts") if found else None
    if not (isinstance(call, ast.Call) and getattr(call.func, "id", getattr(call.func, "attr", None)) == "MethodFacts"
            and not call.args):  # no source, inherited or computed facts: the imported class says
        return _data_only(facts_of(target))
    values, inline = {}, _Inline(found[1])
    try:
        for kw in call.keywords:
            if kw.arg in DATA:
                values[kw.arg] = ast.literal_eval(inline.visit(kw.value))
    except ValueError:  # a computed value: the module says what it is when imported
        return _data_only(facts_of(target))
    return MethodFacts(**values)


def _data_only(facts: MethodFacts | None) -> MethodFacts | None:
    return None if facts is None else MethodFacts(**{k: getattr(facts, k) for k in DATA})


def declared_name(target: str) -> str | None:
    """The `name` a method class declares (its name in records and tables), read from source; imports
    when the class does not spell it out."""
    found = _class_node(target)
    node = _class_assign(found[0], "name") if found else None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return getattr(method_class(target), "name", None)


def declared_trains(target: str) -> bool:
    """The `trains` a method class declares (False: nothing to train, nothing to charge), read from source;
    imports when the class does not spell it out (True for a class that cannot be imported)."""
    found = _class_node(target)
    node = _class_assign(found[0], "trains") if found else None
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        return node.value
    return bool(getattr(method_class(target), "trains", True))


@functools.lru_cache(maxsize=8)
def targets_by_name(conf_dir: Path = CONF_DIR) -> dict[str, str]:
    """{method name in records: _target_} for every conf/method option, for a name read back from a table
    (a runs.csv holds the method's name, not its class)."""
    import yaml

    out = {}
    for path in sorted((Path(conf_dir) / "method").glob("*.yaml")):
        try:
            target = (yaml.safe_load(path.read_text()) or {}).get("_target_")
        except (OSError, yaml.YAMLError):
            continue
        if target:
            out.setdefault(declared_name(str(target)) or path.stem, str(target))
    return out


def declared_by_name(name: str | None, known: Mapping[str, str] | None = None) -> MethodFacts | None:
    """The data facts of the method recorded under `name`: its `_target_` from `known` ({name: target},
    e.g. from records), else from the conf/method options; None when neither knows it."""
    target = (known or {}).get(name) or targets_by_name().get(name)
    return declared(target) if target else None
