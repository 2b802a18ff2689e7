"""Run an experiment: fixed cells and RL grids, per model and per seed, into one records folder.

An experiment file (conf/experiment/*.yaml) declares
  models: [zoo-1m, {name: zoo-4m, overrides: [budget.flops=4e12]}]  # conf/model options (optional)
  seeds: [0, 1, 2]                                                   # optional; default: the `seed` key
  cells: [{label, overrides, axes: {key: [values]}?, seeded: bool?}] # fixed runs (axes: one run per point)
  grids: [{name, overrides, axes: {key: [values]}, optional?}]       # RL grids, chosen on validation
                                                                     # (optional: true runs only with +include=[name])
  vars: {name: value}                                                # its own variables: ${vars.name}
Every (model, cell or grid point, seed) is one run, composed from the command line plus its own
overrides, and gets an index in a fixed order (model, then cell/grid point, then seed):

    python -m harness experiment=X +dry_run=true     # list every run with its index and overrides
    python -m harness experiment=X                   # run them all in turn, then write the tables
    python -m harness experiment=X lanes=2           # two at a time, each in its own process (harness/runner/lanes.py)
    python -m harness experiment=X stamp=S +run_index=7        # run one (e.g. one cluster job)
                                                               # (tables each time; analysis from the last job)
    python -m harness.runner.launch experiment=X stamp=S launcher=submitit_slurm   # one cluster job per run

Records go to runs/<group>/<stamp>/<model>/<label>/seed<k>/record.json, next to experiment.json
(the plan), so tables can mark planned runs with no record as MISSING. A run whose record says ok
is skipped, so rerunning with the same stamp resumes. A failing run leaves a failed record and the
experiment goes on; the tables mark it FAILED. Tables: harness/reporting/report.py, rebuilt any time with
`python -m harness.reporting runs/<group>/<stamp> --out outputs/<group>`.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import itertools
import json
import logging
import os
import sys
import time
from pathlib import Path

from hydra import compose
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, ListConfig, OmegaConf

from harness.analysis.settings import analysis_config
from harness.core.child_runs import _failure, config_flags, mark_killed, run_child  # noqa: F401 - _failure: tests
from harness.core.errors import UserError
from harness.core.locks import folder_lock
from harness.core.paths import CONF_DIR
from harness.core.records import (RECORD_NAME, Manifest, PlannedRun, cpu, git_sha, read_record, versions,
                                   write_manifest)
from harness.runner import lanes
from harness.runner.declared import check_unchanged, declaration
from harness.runner.schema import CONTROL_KEYS, ConfigError, point_label, slug, validate

# torch, the methods, the tables and the analysis load inside the functions that use them, after every
# run's config is checked: a mistake in a cell is reported in seconds, not after torch's 10-50 s import.

log = logging.getLogger("esbench")


class ExperimentError(UserError, ValueError):
    """The experiment file or its command line is inconsistent; the message names the fix."""


def _override(key: str, value) -> str:
    """key=value in Hydra's override grammar (None must be null, not the string "None")."""
    return f"{key}={'null' if value is None else value}"


def _raw(node) -> list[str]:
    """Override strings as written: an interpolation like ${vars.alpha_per_sigma} is resolved by the run's
    own config when it is composed (here it would be stringified, None becoming "None")."""
    return list(OmegaConf.to_container(node, resolve=False)) if node is not None else []


def grid_points(spec: DictConfig) -> list[dict]:
    """The cartesian product of a spec's axes, as {override key: value} dicts, in file order."""
    axes = spec.get("axes") or {}
    keys = list(axes)
    return [dict(zip(keys, vals)) for vals in itertools.product(*(list(axes[k]) for k in keys))]


def _models(cfg: DictConfig) -> list[tuple[str | None, list[str]]]:
    """(option name, its extra overrides) per entry of `models:`; [(None, [])] without the axis."""
    out = []
    for m in cfg.get("models") or [None]:
        if m is None or isinstance(m, str):
            out.append((m, []))
        elif isinstance(m, DictConfig) and "name" in m:
            out.append((str(m.name), _raw(m.get("overrides"))))
        else:
            raise ExperimentError(f"models entry {m!r}: use an option name of conf/model/ or "
                                  "{name: OPTION, overrides: [key=value, ...]}")
    return out


def _specs(cfg: DictConfig) -> list[dict]:
    """Every cell point and grid point, before the model and seed axes multiply them."""
    specs = []
    for c in cfg.get("cells") or []:
        for p in grid_points(c):
            label = point_label(c.label, p)
            specs.append(dict(cell=c.label, column=label if p else c.label, label=label, grid=None, point=p,
                              overrides=[*_raw(c.overrides), *(_override(k, v) for k, v in p.items())],
                              seeded=c.get("seeded", True)))
    include = set(cfg.get("include") or [])
    for g in cfg.get("grids") or []:
        if g.get("optional") and g.name not in include:  # rl: an opt-in grid runs only with +include=[NAME]
            continue
        if not g.get("axes"):
            raise ExperimentError(f"grid {g.name} has no axes; give it axes: {{key: [values]}} or make it a cell")
        for p in grid_points(g):
            label = point_label(g.name, p)
            # validation is evaluated too: the grid point is chosen on it, never on test
            specs.append(dict(cell=g.name, column=g.name, label=label, grid=g.name, point=p,
                              overrides=[*_raw(g.overrides), *(_override(k, v) for k, v in p.items()),
                                         "eval_splits=[validation,test]"], seeded=True))
    return specs


def list_runs(cfg: DictConfig) -> list[PlannedRun]:
    """Every run of the experiment, in index order: model, then cell/grid point, then seed.

    A cell with `seeded: false` (no training: its result does not depend on the seed) runs once,
    with the first seed.
    """
    seeds = list(cfg.get("seeds") or [cfg.seed])
    seed_axis = bool(cfg.get("seeds"))
    runs = []
    for (model, model_overrides), spec in itertools.product(_models(cfg), _specs(cfg)):
        for seed in seeds if spec["seeded"] else seeds[:1]:
            overrides = [*([f"model={model}"] if model else []), *spec["overrides"], *model_overrides,
                         *([f"seed={seed}"] if seed_axis else [])]
            method = next((o.split("=", 1)[1] for o in overrides if o.startswith("method=")), None)
            key = "/".join([*([slug(model)] if model else []), slug(spec["label"]), f"seed{seed}"])
            runs.append(PlannedRun(len(runs), model, int(seed), spec["cell"], spec["column"], spec["label"], spec["grid"],
                            dict(spec["point"]), overrides, method, key))
    return runs


def selected(runs: list[PlannedRun], run_index) -> list[PlannedRun]:
    """The runs named by +run_index (an int or a list of ints); all runs when it is absent or `all`."""
    if run_index is None or run_index == "all":
        return runs
    wanted = [int(i) for i in (run_index if isinstance(run_index, (list, ListConfig)) else [run_index])]
    bad = [i for i in wanted if not 0 <= i < len(runs)]
    if bad:
        raise ExperimentError(f"+run_index={bad[0]} is out of range: this experiment has {len(runs)} runs "
                              f"(indices 0..{len(runs) - 1}); list them with +dry_run=true")
    return [runs[i] for i in wanted]


def experiment_root(cfg: DictConfig) -> Path:
    return Path(cfg.runs_dir) / cfg.group / str(cfg.stamp)


def manifest(cfg: DictConfig, runs: list[PlannedRun]) -> Manifest:
    """What the tables need besides the records: the plan (to spot missing runs) and how to report."""
    def plain(key):
        node = cfg.get(key)
        return OmegaConf.to_container(node, resolve=True) if isinstance(node, (DictConfig, ListConfig)) else node
    return Manifest(group=cfg.group, stamp=str(cfg.stamp), experiment=HydraConfig.get().runtime.choices.get("experiment"),
                    select_by=cfg.get("select_by", "greedy_acc"), summary_metric=cfg.get("summary_metric", "greedy_acc"),
                    summary_metrics=plain("summary_metrics"), paper_heldout=plain("paper_heldout"),
                    paper=plain("paper"), paper_note=cfg.get("paper_note"), axis_plot=plain("axis_plot"),
                    es_reference=cfg.get("es_reference"), runs=runs, **endpoints_of(cfg))


def endpoints_of(cfg: DictConfig) -> dict:
    """The file's declared primary endpoints and exploratory arms, for the manifest (reporting/endpoints.py)."""
    from harness.reporting.endpoints import declarations
    d = declarations(cfg)
    primary = [{k: v for k, v in vars(p).items() if v is not None} for p in d.primary]  # test: only where declared
    return {"primary": primary or None, "exploratory": d.exploratory}


_SAME = ("model", "task", "method", "budget", "eval", "seed", "eval_splits")


def _is_done(run_dir: Path, child: DictConfig) -> bool:
    """True when the run's folder holds an ok record made with this same configuration (it is skipped).

    Raises:
        ExperimentError: the record there was made with other settings (reusing a stamp after
            editing the experiment or the command line would mix two experiments in one table).
    """
    try:
        rec = read_record(run_dir / RECORD_NAME)
    except (OSError, ValueError, TypeError):
        return False
    if rec.status != "ok":
        return False  # failed, interrupted or never finished: run it (again); methods resume from checkpoints
    mine = OmegaConf.to_container(child, resolve=True)
    diff = [k for k in _SAME if json.dumps(settings_since(mine.get(k), rec.config.get(k), k), sort_keys=True,
                                           default=str) != json.dumps(rec.config.get(k), sort_keys=True, default=str)]
    if diff:
        raise ExperimentError(f"{run_dir / RECORD_NAME} was made with other {', '.join(diff)} settings than this "
                              "command asks for; pass a new stamp=... (or remove that folder to redo the run)")
    _check_same_arithmetic(run_dir, rec)
    return True


def settings_since(mine, recorded, group: str):
    """`mine` without the settings added to the code after `recorded` was written, where mine holds
    their default: an ok record stays reusable when a new switch (e.g. method.numerics) would
    reproduce what it did. A default is the value in the conf/<group>/ YAML whose `_target_` both share.
    """
    if not (isinstance(mine, dict) and isinstance(recorded, dict)) or mine.get("_target_") != recorded.get("_target_"):
        return mine
    defaults = _yaml_defaults(group, mine.get("_target_"))
    return {k: v for k, v in mine.items() if k in recorded or k not in defaults or defaults[k] != v}


@functools.lru_cache(maxsize=None)  # once per (group, target), not once per run and key
def _yaml_defaults(group: str, target) -> dict:
    """The plain (uninterpolated) values of the conf/<group>/*.yaml whose _target_ is `target`."""
    if not target or not (CONF_DIR / group).is_dir():
        return {}
    for path in sorted((CONF_DIR / group).glob("*.yaml")):
        node = OmegaConf.load(path)
        if node.get("_target_") == target:
            return {k: v for k, v in OmegaConf.to_container(node, resolve=False).items()
                    if not (isinstance(v, str) and "${" in v)}
    return {}


def _check_same_arithmetic(run_dir: Path, rec) -> None:
    """An ok record is reused only where this process would compute the same numbers.

    Other package versions or another CPU kernel ISA change the arithmetic (results/quickstart's RL
    rows once moved that way), so they refuse; another git sha only warns, because most commits leave
    training alone, and the tables' versions.json lists every sha a table mixes.
    """
    now_versions, now_cpu = versions(), cpu()
    old = {k: v for k, v in rec.versions.items() if k in now_versions and v != now_versions[k]}
    if old:
        moved = ", ".join(f"{k} {v} (now {now_versions[k]})" for k, v in sorted(old.items()))
        raise ExperimentError(f"{run_dir / RECORD_NAME} was made with {moved}; its numbers would not be "
                              "comparable with this run's: pass a new stamp=... (pip install -c constraints.txt "
                              "gives the pinned versions)")
    if rec.cpu and rec.cpu.get("capability") != now_cpu["capability"]:
        raise ExperimentError(f"{run_dir / RECORD_NAME} was made on a {rec.cpu.get('capability')} CPU, this one "
                              f"runs {now_cpu['capability']} kernels, which round differently; pass a new stamp=...")
    if rec.git_sha and rec.git_sha != git_sha():
        log.warning("reusing %s, made at commit %s (this code: %s); versions.json will list both",
                    run_dir / RECORD_NAME, rec.git_sha, git_sha())


def _cli(cfg: DictConfig) -> list[str]:
    """The task overrides of this launch, minus the keys that steer the launch (harness/runner/schema.py CONTROL_KEYS);
    +include stays, since it decides which runs exist and so what a +run_index names."""
    steer = CONTROL_KEYS - {"include"}
    keep = [o for o in HydraConfig.get().overrides.task if o.lstrip("+~").split("=", 1)[0] not in steer]
    if cfg.get("models") and any(o.split("=", 1)[0] == "model" for o in keep):
        raise ExperimentError("this experiment has a models axis; choose models with models=[zoo-1m,zoo-4m] "
                              "instead of model=...")
    return [*keep, f"stamp={cfg.stamp}"]


def print_runs(cfg: DictConfig, runs: list[PlannedRun]) -> None:
    root = experiment_root(cfg)
    for r in runs:
        print(f"{r.index:4d}  {r.model or '-':24s} seed={r.seed}  {r.label}\n      {' '.join(r.overrides)}")
    import shlex

    # this command's own overrides (group=..., seeds=[0], ...) and its --config-dir ride along: the printed
    # commands compose the same files and plan the same runs
    args = shlex.join([*config_flags(), *_cli(cfg)])
    print(f"\n{len(runs)} runs -> {root}/\nrun one:   python -m harness {args} "
          f"+run_index=0\nfan out:   python -m harness.runner.launch {args} "
          f"launcher=submitit_slurm hydra.launcher.partition=YOUR_PARTITION   (one job per run: {len(runs)})")


def print_unclaimed(cfg: DictConfig) -> None:
    """The one line naming the roles of this experiment's cells that no claim reads (a plugin's own roles:
    harness/reporting/roles.py unclaimed); nothing when there are none."""
    from harness.reporting.roles import unclaimed

    line = unclaimed(OmegaConf.to_container(cfg, resolve=False))
    if line:
        print(line)


def unfinished(root: Path, runs: list[PlannedRun]) -> int:
    """How many planned runs have no record yet or one still running (a killed run reads interrupted).

    Each job writes its own record before it counts, so of jobs ending together the last to count
    sees every run finished: the analysis runs at least once, from a job at the end.
    """
    def finished(r: PlannedRun) -> bool:
        try:
            return read_record(root / r.key / RECORD_NAME).effective_status != "running"
        except (OSError, ValueError, TypeError):
            return False
    return sum(not finished(r) for r in runs)


def analyse_experiment(root: Path, out: Path, cfg: DictConfig) -> None:
    """What training did to each model (harness/analysis/), into the tables folder; never fails the experiment."""
    from harness.analysis.report import analyse

    print(f"analysis: what training did to each run's weights, into {out}/ (can take minutes)", flush=True)
    try:
        summary = analyse(root, out, analysis_config(cfg.get("analysis")))
        print(f"analysis: {out / 'analysis.md'} ({len(summary['runs'])} runs; "
              f"{len(summary['skipped']) + len(summary['not_ok'])} listed as not analysed)", flush=True)
    except Exception as e:  # noqa: BLE001 - the tables are written; a failed analysis must not hide them
        log.error("analysis of %s failed: %s: %s (rerun: python -m harness.analysis %s)", root, type(e).__name__, e, out)


def _in_own_process(cli: list[str], r: PlannedRun) -> int:
    """Run one planned run in a fresh interpreter, as a `+run_index` or cluster job runs it (harness/core/child_runs.py)."""
    return run_child([*cli, f"+run_index={r.index}", "+child_run=true"], f"run {r.index} ({r.label})")


def _one_line(e: Exception) -> str:
    """Hydra's multi-line composition error (an unknown option and the list of valid ones) as one line."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    head = next((i for i, ln in enumerate(lines) if ln.startswith("Available options")), None)
    if head is None:
        return "; ".join(lines[:2])
    options = list(itertools.takewhile(lambda ln: not ln.endswith(":"), lines[head + 1:]))  # not the search path
    return f"{lines[0]}; {lines[head].rstrip(':')}: {', '.join(options)}"


# Hydra overrides for composing a run's config: the logging configs are Hydra's biggest files, and compose()
# drops the whole hydra node from what it returns, so choosing the empty ones changes nothing but the time
# (0.25 -> 0.15 s a compose here).
_LIGHT_HYDRA = ["hydra/job_logging=none", "hydra/hydra_logging=none"]


class Composer:
    """A run's config as compose(config_name="config", overrides) returns it, with Hydra's composition
    (the defaults list, every file read and merged: 0.15-0.25 s) done once per distinct set of config-group
    choices (model=, method=, task=, ...) instead of once per run. Hydra itself composes the defaults list
    from the group choices first and then applies the other overrides (`method.sigma=...`) to the result
    (ConfigLoaderImpl._load_configuration_impl); this does the same, the second step with Hydra's own
    function on a copy. qiu2025_table1: 98 runs, 28 compositions. Where Hydra's internals are not as
    expected, or an override is a sweep, every run is composed whole, as before.
    """

    def __init__(self):
        self._groups: dict[tuple, DictConfig] = {}
        try:
            from hydra._internal.config_loader_impl import ConfigLoaderImpl
            from hydra.core.global_hydra import GlobalHydra
            from hydra.core.override_parser.overrides_parser import OverridesParser

            self._repo = GlobalHydra.instance().config_loader().repository
            self._apply = ConfigLoaderImpl._apply_overrides_to_config
            self._parser = OverridesParser.create()
        except Exception:  # noqa: BLE001 - another Hydra: compose each run whole
            self._repo = None

    def __call__(self, overrides: list[str]) -> DictConfig:
        if self._repo is None:
            return compose(config_name="config", overrides=[*overrides, *_LIGHT_HYDRA])
        parsed = self._parser.parse_overrides(overrides=list(overrides))
        if any(o.is_sweep_override() for o in parsed):
            return compose(config_name="config", overrides=[*overrides, *_LIGHT_HYDRA])
        # Hydra's own split (defaults_list.Overrides): a group override names an existing config group
        values = [o for o in parsed if isinstance(o.value(), dict) or not self._repo.group_exists(o.key_or_group)]
        groups = tuple(o.input_line for o in parsed if o not in values)
        if groups not in self._groups:
            self._groups[groups] = compose(config_name="config", overrides=[*groups, *_LIGHT_HYDRA])
        cfg = copy.deepcopy(self._groups[groups])
        self._apply(values, cfg)
        return cfg


def compose_runs(todo: list[PlannedRun], cli: list[str]) -> dict[int, DictConfig]:
    """Every selected run's config, composed and checked (torch-free) before any runs: a typo in a cell
    fails now, in one line naming the run, not hours into the experiment."""
    from hydra.errors import HydraException

    children = {}
    composer = Composer()
    for r in todo:
        try:
            children[r.index] = composer([*cli, *r.overrides])
            validate(children[r.index])
            analysis_config(children[r.index].get("analysis"))
        except HydraException as e:
            raise ExperimentError(f"run {r.index} ({r.label}): {_one_line(e)}") from None
        except ConfigError as e:
            raise ExperimentError(f"run {r.index} ({r.label}): {e}") from None
    return children


def bind_methods(todo: list[PlannedRun], children: dict[int, DictConfig]) -> None:
    """Build every run's method from its config (this loads torch): what the constructors alone check fails now."""
    for r in todo:
        try:
            instantiate(children[r.index].method)
        except (ConfigError, InstantiationException) as e:
            raise ExperimentError(f"run {r.index} ({r.label}): {e}") from None


def run_experiment(cfg: DictConfig) -> int:
    """Run the selected runs of the experiment (in lanes: harness/runner/lanes.py), then rebuild its tables.

    The stamp folder is locked while this runs (harness/core/locks.py): exclusively when running the
    whole experiment, shared for a `+run_index` job (the jobs of one fan-out run side by side); a run's
    child process holds only its run's lock, its parent holding the folder's. The lock is taken before
    torch loads, so a second process on the stamp is refused in seconds.

    Returns:
        The number of runs that failed (their records say why; the tables mark them FAILED).
    """
    runs = list_runs(cfg)
    if not runs:
        raise ExperimentError(f"experiment group {cfg.group} has no cells or grids; add cells: or grids:")
    todo = selected(runs, cfg.get("run_index"))
    if not (cfg.get("child_run") or cfg.get("dry_run")):  # composing and checking every run takes seconds to a minute
        print(f"experiment {cfg.group}: {len(todo)} of {len(runs)} runs; checking each run's config", flush=True)
    cli = _cli(cfg)
    children = compose_runs(todo, cli)
    if cfg.get("dry_run"):  # every config composed and checked as above; the methods are built when it runs
        print_runs(cfg, runs)
        print_unclaimed(cfg)
        d = declaration(HydraConfig.get().runtime.choices.get("experiment"))
        if d:
            print(f"primary endpoints declared in commit {d['commit'] or 'none (not committed as it reads)'}"
                  + (f" of {d['date']}" if d["date"] else ""))
        return 0
    if not cfg.get("child_run"):  # before any folder or run: committed results/ is rewritten only on purpose
        from harness.reporting.report import refuse_tracked
        refuse_tracked(Path(cfg.results_dir) / cfg.group, bool(cfg.get("overwrite_results")))
    root = experiment_root(cfg)
    declared = declaration(HydraConfig.get().runtime.choices.get("experiment"))
    check_unchanged(root, declared)
    main = int(os.environ.get("RANK", "0")) == 0  # rl: rank 0 of a launch holds it (no torch import to ask)
    lock = (folder_lock(root, "the experiment folder", shared=cfg.get("run_index") is not None)
            if main and not cfg.get("child_run") else contextlib.nullcontext())
    with lock:
        bind_methods(todo, children)
        return _run_selected(cfg, runs, todo, children, cli, root, declared)


def _run_selected(cfg: DictConfig, runs: list[PlannedRun], todo: list[PlannedRun], children: dict, cli: list[str],
                  root: Path, declared: dict | None = None) -> int:
    from harness.core.distributed import is_main_process, world_size
    from harness.core.progress import experiment_progress
    from harness.reporting.report import write_report
    from harness.runner.run import run_one

    done = {r.index for r in todo if _is_done(root / r.key, children[r.index])}  # checked before any work
    pending = [r for r in todo if r.index not in done]
    # side by side (harness/runner/lanes.py) only where each run gets its own process; checked before any is written
    p = (lanes.plan(cfg.get("lanes"), pending, children) if len(todo) > 1 and world_size() == 1
         and not cfg.get("child_run") else None)
    if is_main_process():  # rl: under accelerate/torchrun only rank 0 writes (harness/core/distributed.py)
        write_manifest(root, manifest(cfg, runs))  # every job writes the same plan
    failed, t0, ran = [], time.time(), 0
    for r in todo:
        run_dir = root / r.key
        head = f"[{r.index + 1}/{len(runs)}] {r.model or ''} seed={r.seed} {r.label}"
        if r.index in done:
            print(f"{head}: done already ({run_dir / RECORD_NAME}), skipped", flush=True)
            continue
        if p is not None and p.lanes > 1:  # the rest run in lanes, after every skipped run is listed
            continue
        # a child or a +run_index job has one run: the overall line is its parent's
        overall = experiment_progress(len(done) + ran, len(todo), ran, time.time() - t0) if len(todo) > 1 else ""
        ran += 1
        if len(todo) > 1 and world_size() == 1:  # the child prints its own head line once it has loaded
            print(f"{head}: starting in its own process{overall}", flush=True)
            rc = _in_own_process(cli, r)
            if rc:
                failed.append((r, _failure(run_dir, rc)))
                if rc < 0:
                    mark_killed(run_dir, failed[-1][1])
            continue
        print(head + overall, flush=True)
        meta = {"label": r.label, "cell": r.cell, "column": r.column, "grid": r.grid, "point": r.point,
                "model_key": r.model, "run_index": r.index, "run_key": r.key, "experiment_stamp": str(cfg.stamp),
                "declared": declared}
        try:
            run_one(children[r.index], run_dir, meta)
        except Exception as e:  # noqa: BLE001 - one bad run must not take the others down; its record says why
            log.error("run %d (%s) failed: %s: %s", r.index, r.label, type(e).__name__, e)
            failed.append((r, f"{type(e).__name__}: {e}"))
    if p is not None and p.lanes > 1:
        failed = lanes.run_in_lanes(p, pending, cli, root, len(runs), len(done), len(todo))
    if not is_main_process() or cfg.get("child_run"):  # rl: rank 0 writes the tables; a child: its parent does
        return len(failed)
    out = Path(cfg.results_dir) / cfg.group
    print(f"tables: writing {out}/ from the records in {root}", flush=True)
    write_report(root, out)
    print((out / "table.md").read_text())
    print_unclaimed(cfg)
    print(f"records: {root}\ntables: {out}/")
    waiting = unfinished(root, runs) if cfg.get("run_index") is not None else 0
    if waiting:  # one job of a fan-out: analysing every finished run in every job would be quadratic
        print(f"analysis: left to the experiment's last job ({waiting} of {len(runs)} runs not finished); "
              f"now: python -m harness.analysis {out}", flush=True)
    else:
        analyse_experiment(root, out, cfg)
    for r, why in failed:
        print(f"FAILED run {r.index} ({r.model or ''} {r.label} seed={r.seed}): {why}", file=sys.stderr)
    return len(failed)
