"""The command line's keys and group options, checked before Hydra composes: one line per mistake.

Hydra answers a plain typo (`metod=es`, `method.sigmaa=1e-3`) with 7 lines ending in "To append to
your config use +metod=es", advice that only moves the error to harness/runner/schema.py, and an
unknown option (`task=gsm9k`) with a 21-line listing. Here every `key=value` of the command line is
read against the files Hydra would compose (config.yaml, the chosen options of conf/<group>/, the
experiment file) and the keys each `_target_` accepts (harness/runner/schema.py accepted_keys: a
method's light config class, else the target's source), and the first mistake comes back as one
line: the nearest valid key or option, the group's keys or options, a key that moved (MOVED), or the
`+` a new key needs. Only YAML, Python source and the light config modules are read: no torch, no
Hydra composition. Where this cannot tell (a sweep function, an interpolation, a `--config-dir`
group it cannot read), it says nothing and Hydra decides.
"""
from __future__ import annotations

import difflib
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from harness.core.yamlcheck import config_dirs, shown
from harness.runner.schema import (ANALYSIS_TARGET, CONTROL_KEYS, EVAL_TARGET, EXPERIMENT_KEYS, RUN_SWITCHES,
                                   accepted_keys)

# Keys that moved, old -> new: an old command line gets the new name instead of "unknown key".
MOVED = {"method.workers": "engine.workers"}
# The config node whose keys a `_target_` does not name in its YAML (conf/eval has none).
TARGETS = {"eval": EVAL_TARGET, "analysis": ANALYSIS_TARGET}
# Switches that exist only when added: `dry_run=true` must be `+dry_run=true`.
ADDED_ONLY = (CONTROL_KEYS - {"stamp", "launcher", "hydra"}) | RUN_SWITCHES
_NOT_AN_OPTION = ("null", "")


def _load(path: Path | None) -> DictConfig:
    """A YAML file as a config ({} when it is missing or not a mapping: yamlcheck reports broken files)."""
    try:
        node = OmegaConf.load(path) if path is not None and path.is_file() else None
    except Exception:  # noqa: BLE001 - a file Hydra will report on itself
        node = None
    return node if isinstance(node, DictConfig) else OmegaConf.create({})


def _keys(node, key: str | None = None) -> set[str]:
    sub = node.get(key) if key is not None and isinstance(node, DictConfig) else node
    return {str(k) for k in sub} if isinstance(sub, DictConfig) else set()


def _nearest(name: str, valid) -> str | None:
    near = difflib.get_close_matches(str(name), sorted(v for v in valid if not str(v).startswith("_")), n=1, cutoff=0.6)
    return near[0] if near else None


class _Conf:
    """The config folders Hydra searches (--config-dir first), read lazily."""

    def __init__(self, argv: list[str], conf_dir: Path):
        self.dirs, self.conf_dir = config_dirs(argv, conf_dir), Path(conf_dir)
        self.primary = _load(next((d / "config.yaml" for d in self.dirs if (d / "config.yaml").is_file()), None))

    def groups(self) -> set[str]:
        return {p.name for d in self.dirs if d.is_dir() for p in d.iterdir() if p.is_dir()}

    def options(self, group: str) -> list[str]:
        return sorted({p.stem for d in self.dirs for p in (d / group).glob("*.yaml")})

    def searched(self, group: str) -> str:
        """Where Hydra looks for the group's options, every folder named: 'conf/method/' or
        'conf/method/ or /my/plugin/conf/method/'."""
        return " or ".join(f"{shown(d, self.conf_dir)}/{group}/" for d in self.dirs)

    def option_file(self, group: str, option: str) -> Path | None:
        return next((d / group / f"{option}.yaml" for d in self.dirs if (d / group / f"{option}.yaml").is_file()), None)

    def default_choices(self) -> dict[str, str | None]:
        """config.yaml's defaults list as {group: option}."""
        out = {}
        for d in self.primary.get("defaults") or []:
            if isinstance(d, DictConfig):
                for k, v in d.items():
                    out[str(k).replace("optional ", "").strip()] = None if v is None else str(v)
        return out


def _parse(arg: str) -> tuple[str, str, str] | None:
    """(prefix, key, value) of a `key=value` override; None for flags, Hydra's own keys and forms not checked here."""
    if arg.startswith("-") or "=" not in arg:
        return None
    key, _, value = arg.partition("=")
    prefix = key[: len(key) - len(key.lstrip("+~"))]
    key = key[len(prefix):]
    if not key or "~" in prefix or "@" in key or "/" in key or key.split(".")[0] == "hydra":
        return None
    return prefix, key, value


def _option_values(value: str) -> list[str] | None:
    """The options a group override names (each of a sweep `a,b`); None for what only Hydra can read."""
    if any(c in value for c in "${}[]()'\" "):
        return None
    return [v for v in value.split(",")]


def _choices(conf: _Conf, overrides: list[tuple[str, str, str]]) -> dict[str, list[str]]:
    """{group: the options it will compose with}: config.yaml's defaults, the experiment's `override /g: x`,
    then the command line's `g=x` (later wins, as in Hydra)."""
    groups = conf.groups()
    chosen: dict[str, list[str]] = {g: [o] for g, o in conf.default_choices().items() if o is not None}
    line = {k: _option_values(v) for _, k, v in overrides if k in groups}
    for exp in line.get("experiment") or chosen.get("experiment") or []:
        for d in _load(conf.option_file("experiment", exp)).get("defaults") or []:
            if isinstance(d, DictConfig):
                for k, v in d.items():
                    group = str(k).replace("override", "").strip().lstrip("/")
                    if group in groups and v is not None:
                        chosen[group] = [str(v)]
    for k, v in line.items():
        if v is not None:
            chosen[k] = v
    return chosen


def _experiment_nodes(conf: _Conf, chosen: dict[str, list[str]]) -> list[DictConfig]:
    return [_load(conf.option_file("experiment", e)) for e in chosen.get("experiment") or []]


def _option_keys(conf: _Conf, group: str, option: str, seen: frozenset = frozenset()
                 ) -> tuple[set[str], set[str], str | None]:
    """(keys the option's YAML sets, keys its target accepts, the target) for conf/<group>/<option>.yaml, with
    the keys (and the target) of the options of its group its own defaults list names, which it inherits:
    conf/eval/quick.yaml's `defaults: [default]` gives it conf/eval/default.yaml's n_prompts."""
    node = _load(conf.option_file(group, option))
    keys, inherited = _keys(node) - {"defaults"}, None
    for d in node.get("defaults") or []:
        if not isinstance(d, str) or d == "_self_":
            continue
        if "@" in d:  # e.g. sequential's `grpo@stages.grpo`: a node `stages`
            keys.add(d.split("@", 1)[1].split(".")[0])
            continue
        parent = d[len(group) + 2:] if d.startswith(f"/{group}/") else d if "/" not in d else None
        if parent and parent not in seen and conf.option_file(group, parent):  # an option of the same group
            k, _, t = _option_keys(conf, group, parent, seen | {option})
            keys |= k
            inherited = inherited or t
    own = str(node.get("_target_")) if node.get("_target_") else None
    target = own or inherited or TARGETS.get(group)
    accepted = accepted_keys(target) if target else None
    return keys, set(accepted or ()), target if accepted is not None else None


def _group_key_problem(conf: _Conf, chosen, prefix: str, group: str, sub: str, value: str) -> str | None:
    """`group.sub=value` against the options chosen for `group`."""
    full = f"{group}.{sub}"
    if full in MOVED:
        return f"{full} moved to {MOVED[full]}; write {prefix}{MOVED[full]}={value}"
    options = [o for o in chosen.get(group) or [] if conf.option_file(group, o)]
    if not options:
        return None  # an option this cannot read (or none): Hydra reports
    shared = _keys(conf.primary, group).union(*(_keys(e, group) for e in _experiment_nodes(conf, chosen)))
    yaml_keys, accepted, targets = set(shared), set(), []
    for o in options:
        k, a, t = _option_keys(conf, group, o)
        yaml_keys |= k
        accepted |= a
        targets += [t] if t else []
    if sub in yaml_keys or (sub in accepted and "+" in prefix):
        return None
    chosen_txt = ",".join(options)
    if sub in accepted:  # Hydra's struct mode: a key the YAML does not list must be added
        files = ", ".join(f"{shown(f.parent.parent, conf.conf_dir)}/{group}/{f.name}"
                          for f in (conf.option_file(group, o) for o in options) if f is not None)
        return (f"{full} is not in {files} (nor in an option its defaults list names), which {targets[0]} accepts; "
                f"add it with +{full}={value}")
    if "+" in prefix and not targets:
        return None  # a group without a target (model, budget) takes added keys: schema.py checks what it reads
    valid = yaml_keys | accepted
    where = f"{group} ({group}={chosen_txt}" + (f", {targets[0]})" if targets else ")")
    near = _nearest(sub, valid)
    if near:
        hint = f"did you mean {group}.{near}?"
    else:  # a key of another option of the group (method.sigma with method=base)
        other = {}
        for o in conf.options(group):
            if o not in options:
                k, a, _ = _option_keys(conf, group, o)
                for key in k | a:
                    other.setdefault(key, o)
        near = sub if sub in other else _nearest(sub, other)
        hint = f"{group}.{near} is a key of {group}={other[near]}, not of {group}={chosen_txt}" if near else ""
    listing = f"{group}={chosen_txt} has keys: {', '.join(sorted(valid - {'_target_'}))}" if valid - {"_target_"} \
        else f"{group}={chosen_txt} takes no keys"
    return f"unknown key {sub!r} in {where}; " + "; ".join(p for p in (hint, listing) if p)


def argv_problem(argv: list[str], conf_dir: Path) -> str | None:
    """The first override in argv Hydra would reject or misread, as one line naming the fix; None if none."""
    overrides = [o for o in (_parse(a) for a in argv) if o]
    if not overrides:
        return None
    conf = _Conf(argv, conf_dir)
    groups, top = conf.groups(), _keys(conf.primary) - {"defaults"}
    in_defaults = set(conf.default_choices())
    chosen = _choices(conf, overrides)
    experiment_keys = set().union(*(_keys(e) for e in _experiment_nodes(conf, chosen)))
    valid_top = top | in_defaults | EXPERIMENT_KEYS | ADDED_ONLY
    for prefix, key, value in overrides:
        head, _, sub = key.partition(".")
        if not sub and head in groups and (head in in_defaults or "+" in prefix):
            names = _option_values(value)
            options = conf.options(head)
            bad = [n for n in names or [] if n not in options and n not in _NOT_AN_OPTION]
            if bad and options:
                near = _nearest(bad[0], options)
                hint = f"did you mean {head}={near}? " if near else ""
                return f"{head}={bad[0]} is not an option of {conf.searched(head)}; {hint}options: {', '.join(options)}"
            continue
        if head not in valid_top:
            near = _nearest(head, valid_top - {"child_run"})
            hint = f"did you mean {near!r}? " if near else ""
            return (f"unknown key {head!r} on the command line; {hint}config groups: {', '.join(sorted(in_defaults))}; "
                    f"keys: {', '.join(sorted(top))}")
        if head in ADDED_ONLY and head not in top and "+" not in prefix:
            return f"{head} is a switch the config does not declare; add it with +{key}={value}"
        if not sub:
            continue
        if key == "model.name_or_path" and _option_values(value) == [value]:
            problem = missing_model(value)
            if problem:
                return problem
        sub = sub.split(".")[0]
        if head in in_defaults:
            problem = _group_key_problem(conf, chosen, prefix, head, sub, value)
            if problem:
                return problem
        elif head in TARGETS and head in top | experiment_keys:  # analysis.<key>
            valid = _keys(conf.primary, head) | set(accepted_keys(TARGETS[head]) or ())
            if valid and sub not in valid:
                near = _nearest(sub, valid)
                return (f"unknown key {sub!r} in {head}; " + (f"did you mean {head}.{near}? " if near else "")
                        + f"{head} has keys: {', '.join(sorted(valid))}")
    return None


# Hydra makes a run folder with a .hydra copy and a cli.log before the app starts; a plan runs
# nothing, so it is told to write none (the run folder becomes the current one, which exists).
NO_FILES = ["hydra.run.dir=.", "hydra.output_subdir=null", "hydra.job_logging.root.handlers=[console]",
            "~hydra.job_logging.handlers.file"]
_FALSE = ("false", "null", "~", "0", "0.0", "")


def planning_overrides(argv: list[str]) -> list[str]:
    """NO_FILES when the command line asks for `+dry_run=true`, `+plan=true` or `+rehearse=...` (a rehearsal
    writes its runs under runs/rehearse/ itself, never into the file's own folder), else []."""
    for o in (_parse(a) for a in argv):
        if o and o[1] in ("dry_run", "plan", "rehearse") and o[2].strip().lower() not in _FALSE:
            return [a for a in NO_FILES if a not in argv]
    return []


def missing_model(name: str) -> str | None:
    """harness/core/policy.py's answer for a local model path that does not exist, without loading torch:
    the check that otherwise came after 10-20 s of imports and left a failed record behind."""
    from harness.core import wheels
    from harness.core.paths import ZOO_DIR

    looks_local = name.startswith((".", "/", "~")) or name.count("/") != 1
    if (not name or not looks_local or wheels.is_wheel_model(name) or (ZOO_DIR / name).is_dir()
            or Path(name).expanduser().exists()):
        return None
    zoo = sorted(d.name for d in ZOO_DIR.iterdir() if d.is_dir()) if ZOO_DIR.is_dir() else []
    return (f"model path {name!r} does not exist; pass an existing directory, a hub id "
            f"like Qwen/Qwen2.5-1.5B-Instruct, or a zoo model: {', '.join(zoo) or '(none built)'}")
