"""Check a composed config before any work: unknown keys and wrong types fail at load, in one line.

Hydra merges an experiment file (`# @package _global_`) into the top of the config, so a typo there
(`cels:` for `cells:`) used to become a silent extra key: every cell dropped, exit 0. Here every
top-level key must be one config.yaml declares, a config group, or an experiment key below; every
cell, grid and model entry has a fixed set of keys; and the values the harness itself reads (seed,
threads, budget, seeds, axes) have their types checked. The error names the key, where it is, and
the nearest valid one. Method, task and eval keys are checked against what their targets accept, so an
experiment's `eval: {n_prompt: 20}` fails at load, not in every run; a `model=generic` needs its
name_or_path. Values too: every int, float and bool key of method, task and eval has its annotated
type, and a method's values pass its config's own checks with their own messages (the config is built:
`method.params` must be a named set or a regex that compiles, GRPO's group at least 2 completions, ...;
tests/test_schema.py checks the line is the constructor's), cells and grids have distinct labels, and
`models:` names conf/model options, all before torch loads.

Where keys, types and checks come from (`accepted_keys`, `field_types`): a method's config dataclass in
its light module (methods/es/config.py for methods/es/loop.py: harness/core/method_facts.py light_config),
imported without torch; for what has none (tasks, eval, analysis, methods.base.Base, a method from
outside the repo), its source, parsed (harness/runner/signatures.py). The constructors still check
everything when a run is composed.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import re

from omegaconf import DictConfig, ListConfig, OmegaConf
from harness.core.budget import KINDS, method_problem
from harness.core.errors import ConfigError, check_keys, did_you_mean, unknown_key
from harness.core.method_facts import declared, light_config
from harness.core.paths import CONF_DIR
from harness.reporting.roles import ROLES
from harness.runner import signatures

# Keys an experiment file adds (conf/experiment/*.yaml): what each does is in harness/runner/experiment.py.
EXPERIMENT_KEYS = {"vars", "models", "seeds", "cells", "grids", "select_by", "summary_metric", "summary_metrics",
                   "paper", "paper_note", "paper_heldout", "axis_plot", "es_reference", "primary"}
# Keys that steer a launch, never one run's settings: +run_index=..., +dry_run=true, +plan=true, +include=[GRID],
# +rehearse=true (harness/runner/rehearse.py);
# child_run: set by an experiment for its per-run processes; stamp and launcher: the records folder and how
# runs are fanned out; hydra: Hydra's own node. This check accepts them at the top level (those config.yaml
# does not declare), and harness/runner/experiment.py strips them from the command line before composing each run
# (it passes stamp on itself).
# overwrite_results: let tables be written into a folder git tracks files in (harness/reporting/report.py refuse_tracked)
# lanes: how many runs an experiment runs side by side (harness/runner/lanes.py); never passed on to a run
CONTROL_KEYS = frozenset({"run_index", "dry_run", "plan", "include", "rehearse", "child_run", "stamp", "launcher",
                          "hydra", "overwrite_results", "lanes"})
# Switches of one run, added only with +: +save_model=true exports the trained policy to <run_dir>/model at the end
# (harness/tools/export.py). Unlike CONTROL_KEYS an experiment passes them on to every run it launches.
RUN_SWITCHES = frozenset({"save_model"})
CELL_KEYS = {"label", "overrides", "axes", "seeded", "exploratory", "role"}  # exploratory: reporting/endpoints.py
GRID_KEYS = {"name", "overrides", "axes", "optional", "exploratory", "role"}  # optional: true = opt-in, +include=[name]
# role: what the cell is, for the claims ledger (harness/reporting/roles.py)
MODEL_KEYS = {"name", "overrides"}
AXIS_PLOT_KEYS = {"key", "cell", "name", "reference", "baseline", "metrics"}
EVAL_TARGET = "harness.evaluation.evaluate.EvalConfig"
# The `analysis:` block: its keys are this dataclass's fields (its values are checked when it is built).
ANALYSIS_TARGET = "harness.analysis.settings.AnalysisConfig"


# ---- what a target accepts: its light config class, else its source ----
def _type_name(annotation) -> str:
    """A dataclass field's annotation as written (a string under `from __future__ import annotations`)."""
    if isinstance(annotation, str):
        return annotation
    return annotation.__name__ if isinstance(annotation, type) else str(annotation).replace("typing.", "")


@functools.lru_cache(maxsize=64)
def accepted_keys(target: str) -> frozenset[str] | None:
    """Keys `target` ("methods.es.ES", "tasks.countdown.Countdown") takes: its light config's fields, else
    read from its source (signatures.accepted_keys); None: cannot tell."""
    config = light_config(target)
    if config is not None:
        return frozenset(f.name for f in dataclasses.fields(config))
    return signatures.accepted_keys(target)


@functools.lru_cache(maxsize=64)
def field_types(target: str) -> dict[str, tuple[str, bool]]:
    """{key: (kind, optional)} of `target`'s int, float and bool keys (signatures.kind_of), from its light
    config's fields, else its source; {} when unknown."""
    config = light_config(target)
    if config is None:
        return signatures.field_types(target)
    kinds = {f.name: signatures.kind_of(_type_name(f.type)) for f in dataclasses.fields(config)}
    return {k: kind for k, kind in kinds.items() if kind}


def _base_keys() -> set[str]:
    """Top-level keys config.yaml declares, plus its config groups (model, task, method, ...)."""
    path = CONF_DIR / "config.yaml"
    return set(_keys_of(path, path.stat().st_mtime_ns))


@functools.lru_cache(maxsize=4)  # read once per process, not once per run of an experiment (35 ms each)
def _keys_of(path, mtime_ns: int) -> frozenset[str]:
    base = OmegaConf.load(path)
    groups = set()
    for d in base.get("defaults", []):
        if isinstance(d, str) and d != "_self_":
            groups.add(d.split(":")[0].split("/")[-1].strip())
        elif isinstance(d, (dict, DictConfig)):
            groups.update(str(k).replace("optional ", "").strip() for k in d)
    return frozenset({k for k in base if k != "defaults"} | groups)


def _check_held_out(cfg: DictConfig) -> None:
    """eval.tasks, eval.task_overrides and analysis.entropy_task name conf/task options (checked before any work)."""
    tasks = {p.stem for p in (CONF_DIR / "task").glob("*.yaml")}
    ev, analysis = cfg.get("eval") or {}, cfg.get("analysis") or {}
    named = [("eval.tasks", t) for t in ev.get("tasks") or []]
    named += [("eval.task_overrides", t) for t in (ev.get("task_overrides") or {})]
    if analysis.get("entropy_task"):
        named.append(("analysis.entropy_task", analysis.get("entropy_task")))
    for where, name in named:
        if str(name) not in tasks:
            raise ConfigError(f"{where} names unknown task {name!r}{did_you_mean(name, tasks, 'choose from')}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


def _check_budget(b, method) -> None:
    if b.get("kind") not in KINDS:
        raise ConfigError(f"budget.kind={b.get('kind')!r} is unknown; use budget.kind=flops, samples or updates")
    for k in ("flops", "samples"):
        v = b.get(k)
        if v is not None and not (_is_number(v) and v > 0):
            raise ConfigError(f"budget.{k}={v!r} is not a positive number; write e.g. budget.{k}="
                              f"{'2.5e12' if k == 'flops' else '3000000'}")
    v = b.get("updates")
    if (v is not None or b.kind == "updates") and not (_is_int(v) and v > 0):
        raise ConfigError(f"budget.updates={v!r} is not a positive whole number; write e.g. "
                          "budget=updates budget.updates=300")
    line = method_problem(b.kind, method) if isinstance(method, DictConfig) else None
    if line:  # e.g. budget.kind=updates with a method that cannot count them (harness/core/budget.py)
        raise ConfigError(line)


def _check_entries(node, key: str, valid: set[str], required: str | None, cfg: DictConfig | None = None) -> None:
    if node is None:
        return
    if not isinstance(node, (list, ListConfig)):
        raise ConfigError(f"{key}: must be a list of mappings, got {node!r}")
    for i, entry in enumerate(node):
        if key == "models" and isinstance(entry, str):
            continue
        check_keys(entry, valid, f"{key}[{i}]")
        if required and required not in entry:
            raise ConfigError(f"{key}[{i}] has no {required!r}; give every entry one")
        axes = entry.get("axes")
        if axes is not None:
            if not isinstance(axes, (dict, DictConfig)):
                raise ConfigError(f"{key}[{i}].axes must map override keys to lists of values, got {axes!r}")
            for ak, av in axes.items():
                if not isinstance(av, (list, ListConfig)) or not av:
                    raise ConfigError(f"{key}[{i}].axes.{ak} must be a non-empty list of values, got {av!r}")
        role = entry.get("role")
        if role is not None and role not in ROLES:
            target = entry_method(entry, cfg)
            own = method_roles(target)
            if role not in own:  # the closed list, or a role the cell's method declares (a plugin's own)
                theirs = (f"; {target} declares {', '.join(own)}" if own else
                          f", or one its method declares (MethodFacts(roles={{...}}) of {target})" if target else "")
                raise ConfigError(f"{key}[{i}].role={role!r} is not a role; use one of {', '.join(ROLES)} "
                                  f"(harness/reporting/roles.py){theirs}, or leave it out")
        ov = entry.get("overrides")
        if ov is not None and not isinstance(ov, (list, ListConfig)):
            raise ConfigError(f"{key}[{i}].overrides must be a list like [method=es, method.sigma=0.01], got {ov!r}")


def is_experiment(cfg: DictConfig) -> bool:
    return bool(cfg.get("cells") or cfg.get("grids"))


def validate(cfg: DictConfig) -> None:
    """Raise ConfigError naming the first unknown key or mistyped value in the composed config."""
    valid = _base_keys() | EXPERIMENT_KEYS | CONTROL_KEYS | RUN_SWITCHES
    for k in cfg:
        if k not in valid:
            raise unknown_key(str(k), "the config (an experiment file or a +key= override)", valid)
    for k in RUN_SWITCHES & set(cfg):
        if not isinstance(cfg[k], bool):
            raise ConfigError(f"+{k}={cfg[k]!r} must be true or false")
    seed = cfg.get("seed")
    if not _is_int(seed):
        hint = "; did you mean seeds: (a list, one run per seed)?" if isinstance(seed, (list, ListConfig)) else ""
        raise ConfigError(f"seed={seed!r} must be an int{hint}")
    if not (_is_int(cfg.get("threads")) and cfg.threads >= 1):
        raise ConfigError(f"threads={cfg.get('threads')!r} must be an int >= 1")
    lanes = cfg.get("lanes", "auto")
    if lanes not in (None, "auto") and not (_is_int(lanes) and lanes >= 1):
        raise ConfigError(f"lanes={lanes!r} must be auto or an int >= 1 (lanes=1: an experiment's runs one at a time)")
    if cfg.get("logger") not in ("none", "tensorboard", "wandb"):
        raise ConfigError(f"logger={cfg.get('logger')!r} is unknown; use none, tensorboard or wandb")
    if cfg.get("device") not in ("auto", "cpu", "cuda"):
        raise ConfigError(f"device={cfg.get('device')!r} is unknown; use auto, cpu or cuda")
    bad = [s for s in cfg.get("eval_splits") or [] if s not in ("train", "validation", "test")]
    if bad:
        raise ConfigError(f"eval_splits has {bad[0]!r}; use a subset of [train, validation, test]")
    _check_budget(cfg.budget, cfg.get("method"))
    seeds = cfg.get("seeds")
    if seeds is not None and not (isinstance(seeds, (list, ListConfig)) and seeds and all(_is_int(s) for s in seeds)):
        raise ConfigError(f"seeds={seeds!r} must be a non-empty list of ints, e.g. seeds: [0, 1, 2]")
    _check_entries(cfg.get("cells"), "cells", CELL_KEYS, "label", cfg)
    _check_entries(cfg.get("grids"), "grids", GRID_KEYS, "name", cfg)
    _check_entries(cfg.get("models"), "models", MODEL_KEYS, "name")
    _check_include(cfg)
    if cfg.get("axis_plot") is not None:
        check_keys(cfg.axis_plot, AXIS_PLOT_KEYS, "axis_plot")
    _check_es_reference(cfg)
    if cfg.get("primary") is not None or any("exploratory" in c for c in list(cfg.get("cells") or [])
                                             + list(cfg.get("grids") or [])):
        from harness.reporting.endpoints import declarations  # primary endpoints name cells and metrics of the file
        declarations(cfg)
    if cfg.get("analysis") is not None:
        check_keys(cfg.analysis, set(accepted_keys(ANALYSIS_TARGET)), "analysis")  # from source: settings.py imports us
    if (cfg.get("cells") is not None or cfg.get("grids") is not None) and not is_experiment(cfg):
        raise ConfigError("the experiment has empty cells: and grids:; add at least one cell or grid")
    _check_labels(cfg)
    _check_models(cfg)
    _check_targets(cfg)
    _check_values(cfg)
    _check_held_out(cfg)
    if cfg.get("model") is not None and not cfg.model.get("name_or_path"):
        raise ConfigError("model.name_or_path is empty; write model=<hub id or folder> "
                          "(e.g. model=Qwen/Qwen2.5-1.5B-Instruct) or pick a conf/model option")


def _check_es_reference(cfg: DictConfig) -> None:
    """es_reference names the fixed cell the variants are compared to: a typo would silently drop them."""
    named = cfg.get("es_reference")
    if named is None:
        return
    labels = [str(c.get("label")) for c in cfg.get("cells") or [] if c.get("axes") is None]
    if named not in labels:
        raise ConfigError(f"es_reference={named!r} is not the label of a cell without axes ({labels}); "
                          "name the full-ES cell exactly as its label reads")


def _check_targets(cfg: DictConfig) -> None:
    """Every key of method, task and eval is a parameter of what it configures (accepted_keys)."""
    for group, target in (("method", None), ("task", None), ("eval", EVAL_TARGET)):
        node = cfg.get(group)
        if not isinstance(node, DictConfig):
            continue
        target = target or node.get("_target_")
        valid = accepted_keys(str(target)) if target else None
        if valid is None:
            continue  # cannot tell from source: the constructor checks when the run is composed
        for k in node:
            if not str(k).startswith("_") and k not in valid:
                raise unknown_key(str(k), f"{group} ({target})", set(valid))


def _check_include(cfg: DictConfig) -> None:
    """+include=[NAME, ...] names optional grids of this experiment (opt-in runs such as GRPO-LoRA)."""
    for g in cfg.get("grids") or []:
        if g.get("optional") is not None and not isinstance(g.optional, bool):
            raise ConfigError(f"grid {g.name}: optional={g.optional!r} must be true or false")
    include = cfg.get("include")
    if include is None:
        return
    optional = [str(g.name) for g in cfg.get("grids") or [] if g.get("optional")]
    names = list(include) if isinstance(include, (list, ListConfig)) else [include]
    bad = [n for n in names if n not in optional]
    if bad:
        raise ConfigError(f"+include names {bad[0]!r}, which is not an optional grid of this experiment; "
                          + (f"use +include=[{','.join(optional)}]" if optional else "it has none: drop +include"))


# ---- values: types from the targets' annotations, then the method's config's own checks, before torch loads ----
_UNSET = object()


def _value(node, key):
    """node[key] resolved, or _UNSET where it cannot resolve here (the constructor reports that)."""
    try:
        return node[key]
    except Exception:  # noqa: BLE001 - an interpolation to a missing key: the run's composition says which
        return _UNSET


def _type_problem(v, kind: str, optional: bool) -> str | None:
    if v is None:
        return None if optional else "must be set (it is null)"
    ok = {"int": _is_int(v), "float": _is_number(v), "bool": isinstance(v, bool)}[kind]
    if ok:
        return None
    want = {"int": "a whole number (e.g. 4)", "float": "a finite number (e.g. 0.01 or 1e-3)",
            "bool": "true or false"}[kind]
    return f"must be {want}{' or null' if optional else ''}"


def _check_values(cfg: DictConfig) -> None:
    """Every int, float and bool key of method, task and eval has that type: `method.population=2.5`
    crashed inside ES after training started and `method.sigma=abc` failed naming no key."""
    for group, target in (("method", None), ("task", None), ("eval", EVAL_TARGET)):
        node = cfg.get(group)
        if not isinstance(node, DictConfig):
            continue
        types = field_types(str(target or node.get("_target_")))
        for k, (kind, optional) in types.items():
            v = _value(node, k) if k in node else _UNSET
            problem = None if v is _UNSET else _type_problem(v, kind, optional)
            if problem:
                raise ConfigError(f"{group}.{k}={v!r} {problem}")
    method = cfg.get("method")
    if isinstance(method, DictConfig):
        _check_config(method, str(method.get("_target_")))


def _plain(node, key):
    """node[key] as the constructor receives it (a nested node as plain containers, interpolations resolved), or
    _UNSET where it cannot resolve here."""
    v = _value(node, key)
    if isinstance(v, (DictConfig, ListConfig)):
        try:
            return OmegaConf.to_container(v, resolve=True)
        except Exception:  # noqa: BLE001 - as in _value
            return _UNSET
    return v


def _check_config(method: DictConfig, target: str) -> None:
    """Build the method's config from its light module (methods/es/config.py ...): its own checks, with their
    own messages, before torch loads. Nothing to build (no light config), or a value that cannot resolve here:
    the constructor checks when the run is composed; so it does for what raises other than ValueError."""
    config = light_config(target)
    if config is None:
        return
    values = {str(k): _plain(method, k) for k in method if not str(k).startswith("_")}
    if any(v is _UNSET for v in values.values()):
        return
    try:
        config(**values)
    except ValueError as e:  # the checks' errors (ValueError, VariantError, ConfigError): one line naming the fix
        raise ConfigError(str(e)) from None
    except Exception:  # noqa: BLE001 - not a value check (a TypeError deep in a nested setting): the run says
        pass


# ---- an experiment's runs: one label each, models that exist ----
def slug(text: str) -> str:
    """A label as a folder name (the run's key under the stamp folder)."""
    return re.sub(r"[^A-Za-z0-9.=-]+", "_", text).strip("_")


def fmt(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def point_label(name: str, point: dict) -> str:
    """'ES sigma=0.01': a cell's label or a grid's name, then each axis key's last part and value."""
    return " ".join([str(name), *(f"{str(k).split('.')[-1]}={fmt(v)}" for k, v in point.items())])


def _points(entry) -> list[dict]:
    axes = entry.get("axes") or {}
    keys = list(axes)
    return [dict(zip(keys, vals)) for vals in itertools.product(*(list(axes[k]) for k in keys))]


def _check_labels(cfg: DictConfig) -> None:
    """Every cell and grid names its own runs: two with one label shared a run folder, so the second
    run failed with "pass a new stamp" and the table counted one record as both ("2/2")."""
    names, runs = {}, {}
    entries = [("cells", i, c, c.get("label")) for i, c in enumerate(cfg.get("cells") or [])]
    entries += [("grids", i, g, g.get("name")) for i, g in enumerate(cfg.get("grids") or [])]
    for key, i, entry, name in entries:
        where = f"{key}[{i}]"
        if slug(str(name)) in names:
            raise ConfigError(f"{where} is named {name!r} like {names[slug(str(name))]}; give every cell and grid "
                              "its own label (runs, their folders and table rows are keyed by it)")
        names[slug(str(name))] = where
        for p in _points(entry):
            label = point_label(name, p)
            if slug(label) in runs:
                raise ConfigError(f"{where}: the run {label!r} comes twice (as {runs[slug(label)]}); "
                                  "make its axes' values distinct")
            runs[slug(label)] = label


def config_dirs_in_use() -> list:
    """The folders this run composes from: conf/, then the file sources of Hydra's search path (--config-dir,
    hydra.searchpath); with no Hydra run under way (harness.runner.launch, a test composing by hand), those
    the process's command line names (yamlcheck.config_dirs)."""
    import sys
    from pathlib import Path

    from harness.core.yamlcheck import config_dirs

    try:
        from hydra.core.hydra_config import HydraConfig
        if HydraConfig.initialized():
            return [CONF_DIR, *(Path(s["path"]) for s in HydraConfig.get().runtime.config_sources
                                if s.get("schema") == "file" and Path(s["path"]).resolve() != CONF_DIR.resolve())]
    except Exception:  # noqa: BLE001 - no Hydra run: the command line says
        pass
    return [CONF_DIR, *(d for d in config_dirs(sys.argv[1:], CONF_DIR) if d != CONF_DIR)]


def _model_options() -> set[str]:
    """conf/model options, plus those of the command line's --config-dir (Hydra's search path)."""
    return {p.stem for d in config_dirs_in_use() if (d / "model").is_dir() for p in (d / "model").glob("*.yaml")}


def entry_method(entry, cfg: DictConfig | None) -> str | None:
    """The `_target_` of a cell's or grid's method: its last `method=NAME` override's YAML (conf/method/ or a
    --config-dir's method/), else the experiment's own method; None when neither says."""
    import yaml

    names = [str(o).split("=", 1)[1] for o in entry.get("overrides") or []
             if "=" in str(o) and str(o).split("=", 1)[0].lstrip("+") == "method"]
    if not names:
        method = cfg.get("method") if cfg is not None else None
        return str(method.get("_target_")) if isinstance(method, DictConfig) and method.get("_target_") else None
    for d in config_dirs_in_use():
        path = d / "method" / f"{names[-1]}.yaml"
        if path.is_file():
            try:
                target = (yaml.safe_load(path.read_text()) or {}).get("_target_")
            except (OSError, yaml.YAMLError, AttributeError):
                return None
            return str(target) if target else None
    return None


def method_roles(target: str | None) -> dict[str, str]:
    """{role: what it is} that a method declares in its facts (MethodFacts.roles), read without importing it."""
    facts = declared(target) if target else None
    return dict(facts.roles or {}) if facts is not None else {}


def _check_models(cfg: DictConfig) -> None:
    """An experiment's `models:` names conf/model options; a typo used to end in Hydra's 27-line listing
    after torch had loaded."""
    entries = cfg.get("models") or []
    if not entries:
        return
    options = _model_options()
    for i, m in enumerate(entries):
        name = m if isinstance(m, str) else m.get("name") if isinstance(m, (dict, DictConfig)) else None
        if name is not None and str(name) not in options:
            near = did_you_mean(str(name), options, "x")
            raise ConfigError(f"models[{i}]={name!r} is not a conf/model option"
                              f"{near if near.startswith('; did') else ''}; choose from: {', '.join(sorted(options))}")
