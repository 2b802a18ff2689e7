"""One source for every default: a method's config dataclass; its conf/method YAML writes the same values out.

Every run composes its method from the YAML, while tests, benches and scripts build methods from the
dataclass (`GRPO(learning_rate=...)`), so the two must not drift apart (grpo.yaml and ppo.yaml said
`checkpoint_every: 50` while the dataclasses said 0). For every YAML in conf/method/ (class from its
`_target_`, config from the class's `config_class`):
  - every key is a field of the config (keys a defaults-list entry fills, e.g. sequential's `stages`, too);
  - every literal value equals that field's default (a nested mapping, e.g. `lora`, key by key against
    the default's own fields); interpolations such as `${seed}` or `${model.es_sigma}` are skipped;
  - every field with a default appears in the YAML, or in ALLOWED_MISSING below with the reason.
The `analysis:` block of conf/config.yaml is checked the same way against AnalysisConfig.
Nothing is built: the classes are imported and their dataclass fields read. A method from outside the
repository (its module on PYTHONPATH, its YAML in <dir>/method/, run with --config-dir <dir>) is checked the
same way when ESBENCH_CONFIG_DIRS names <dir> (several: separated by os.pathsep), as tests/test_tasks.py does:

    python -m pytest tests/test_defaults.py -q
    PYTHONPATH=/my/plugin ESBENCH_CONFIG_DIRS=/my/plugin/conf python -m pytest tests/test_defaults.py -q
"""
from __future__ import annotations

import dataclasses
import importlib
import os
from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf

from harness.core.paths import CONF_DIR

EXTRA_DIRS = [Path(d) for d in os.environ.get("ESBENCH_CONFIG_DIRS", "").split(os.pathsep) if d.strip()]
# {test id: YAML}: conf/method's by name, an outside folder's as <dir>:<name>
METHOD_FILES = {**{p.stem: p for p in sorted((CONF_DIR / "method").glob("*.yaml"))},
                **{f"{d}:{p.stem}": p for d in EXTRA_DIRS for p in sorted((d / "method").glob("*.yaml"))}}
METHOD_YAMLS = sorted(METHOD_FILES)

# (config class, field): why the field may be absent from its YAML. Empty today: every field with a
# default is written out. Add an entry only with a reason, e.g. a field only tests set.
ALLOWED_MISSING: dict[tuple[str, str], str] = {}


def _class(target: str):
    module, _, name = target.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _same(yaml_value, default) -> bool:
    """Equal values of the same kind: a YAML `true` is not a default 1, nor `1` a default True."""
    if isinstance(yaml_value, bool) or isinstance(default, bool):
        return type(yaml_value) is type(default) and yaml_value == default
    return yaml_value == default


def _compare(node: DictConfig, defaults: dict, where: str) -> list[str]:
    """Disagreements between a YAML mapping and {key: default}, recursing into nested mappings."""
    problems = []
    for key in node:
        if key in ("_target_", "defaults"):
            continue
        if key not in defaults:
            problems.append(f"{where}.{key}: in the YAML but not a field ({', '.join(sorted(defaults))})")
            continue
        default = defaults[key]
        if OmegaConf.is_interpolation(node, key):
            continue  # ${seed}, ${model.es_sigma}, ${engine}: the run's value, not a default
        if default is dataclasses.MISSING:
            problems.append(f"{where}.{key}: the field has no default to compare with")
            continue
        value = node[key]
        if isinstance(value, DictConfig):
            if dataclasses.is_dataclass(default):
                nested = {f.name: _default(f) for f in dataclasses.fields(default)}
            elif isinstance(default, dict):
                nested = dict(default)
            else:
                problems.append(f"{where}.{key}: a mapping in the YAML, {default!r} in the dataclass")
                continue
            problems += _compare(value, nested, f"{where}.{key}")
            problems += [f"{where}.{key}.{k}: the default {nested[k]!r} is missing from the YAML"
                         for k in nested if k not in value]
            continue
        plain = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
        if not _same(plain, default):
            problems.append(f"{where}.{key}: YAML {plain!r} != dataclass default {default!r}")
    return problems


def _filled_by_defaults_list(node: DictConfig) -> set[str]:
    """Top-level keys a defaults-list entry fills (`grpo@stages.grpo` fills `stages`)."""
    keys = set()
    for entry in node.get("defaults") or []:
        text = entry if isinstance(entry, str) else next(iter(entry))
        if "@" in str(text):
            keys.add(str(text).split("@", 1)[1].split(".", 1)[0])
    return keys


@pytest.mark.parametrize("name", METHOD_YAMLS)
def test_method_yaml_writes_out_the_dataclass_defaults(name):
    node = OmegaConf.load(METHOD_FILES[name])
    where = f"conf/method/{name}.yaml" if ":" not in name else str(METHOD_FILES[name])
    cls = _class(node._target_)
    config_class = getattr(cls, "config_class", None)
    keys = [k for k in node if k not in ("_target_", "defaults")]
    if config_class is None:  # methods.base.Base: no hyperparameters
        assert not keys, f"{where} sets {keys} but {node._target_} takes no hyperparameters"
        return
    fields = {f.name: f for f in dataclasses.fields(config_class)}
    filled = _filled_by_defaults_list(node)
    assert filled <= set(fields), f"{where}'s defaults list fills {filled - set(fields)}: no field"
    problems = _compare(node, {k: _default(f) for k, f in fields.items()}, where)
    for k, f in fields.items():
        if _default(f) is dataclasses.MISSING or k in node or k in filled:
            continue
        if (config_class.__name__, k) not in ALLOWED_MISSING:
            problems.append(f"{where}: {config_class.__name__}.{k} (default {_default(f)!r}) is "
                            "not in the YAML; write it out, or list it in ALLOWED_MISSING with the reason")
    assert not problems, "\n".join(problems)


def test_allowed_missing_names_real_fields():
    """A stale allow-list entry (the field was renamed or removed) fails instead of hiding nothing."""
    classes = {}
    for name in METHOD_YAMLS:
        cls = getattr(_class(OmegaConf.load(METHOD_FILES[name])._target_), "config_class", None)
        if cls is not None:
            classes[cls.__name__] = {f.name for f in dataclasses.fields(cls)}
    for (owner, field_name), reason in ALLOWED_MISSING.items():
        assert reason and field_name in classes.get(owner, ()), (owner, field_name)


def test_analysis_block_writes_out_analysis_config_defaults():
    from harness.analysis.settings import ANALYSIS_KEYS, AnalysisConfig

    node = OmegaConf.load(CONF_DIR / "config.yaml").analysis
    fields = {f.name: _default(f) for f in dataclasses.fields(AnalysisConfig)}
    problems = _compare(node, fields, "conf/config.yaml analysis")
    problems += [f"conf/config.yaml analysis: {k} (default {v!r}) is missing" for k, v in fields.items() if k not in node]
    assert not problems, "\n".join(problems)
    assert set(node) == ANALYSIS_KEYS


def test_schema_reads_the_analysis_keys_from_analysis_config():
    """harness/runner/schema.py checks the `analysis:` block against AnalysisConfig's fields, read from its source."""
    from harness.analysis.settings import ANALYSIS_KEYS
    from harness.runner.schema import ANALYSIS_TARGET, ConfigError, check_keys
    from harness.runner.signatures import accepted_keys

    assert accepted_keys(ANALYSIS_TARGET) == ANALYSIS_KEYS
    with pytest.raises(ConfigError, match="unknown key 'top_kk' in analysis; did you mean 'top_k'"):
        check_keys({"top_kk": 5}, ANALYSIS_KEYS, "analysis")


def test_compare_catches_what_it_must():
    """The checker itself: a wrong literal, an unknown key, a bool for an int, a nested mismatch."""
    @dataclasses.dataclass
    class Inner:
        r: int = 16

    @dataclasses.dataclass
    class Cfg:
        every: int = 0
        flag: bool = False
        seed: int = 0
        lora: Inner = dataclasses.field(default_factory=Inner)

    defaults = {f.name: _default(f) for f in dataclasses.fields(Cfg)}
    node = OmegaConf.create({"every": 50, "flag": 0, "seed": "${x}", "typo": 1, "lora": {"r": 8}})
    problems = _compare(node, defaults, "y")
    assert len(problems) == 4 and all(p.startswith(("y.every", "y.flag", "y.typo", "y.lora.r")) for p in problems)
    assert not _compare(OmegaConf.create({"every": 0, "flag": False, "seed": "${x}", "lora": {"r": 16}}), defaults, "y")
