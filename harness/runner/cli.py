"""The Hydra entry point: `python -m harness ...` composes the config and runs one run or an experiment.

    python -m harness method=base                       # evaluate the default zoo model
    python -m harness method=es budget.flops=4e12       # train with ES, then evaluate
    python -m harness                                   # the quickstart comparison
    python -m harness -m method=es seed=0,1,2           # a Hydra multirun
    python -m harness experiment=X +plan=true           # price every run of an experiment (harness/runner/pricing.py)
    python -m harness model=Qwen/Qwen2.5-1.5B-Instruct  # any hub id or folder (harness/runner/model_arg.py)

Data flows one way: cli -> experiment -> run -> (method, evaluation) -> records -> reporting.

Only Hydra, OmegaConf and harness/runner/schema.py load before the config is checked: torch, transformers,
TRL and the tasks' data libraries load after it, so a config error is reported in about a second,
not after 7-18 s of imports (measured in harness/__main__.py's docstring).
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from harness.core.errors import ConfigError, Terminated, UserError
from harness.core.paths import CONF_DIR
from harness.runner.schema import is_experiment, validate


def user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that are the user's configuration or data, reported in one line."""
    from hydra.errors import InstantiationException
    from omegaconf.errors import InterpolationResolutionError

    # UserError: every error of ours a user fixes (harness/core/errors.py); InstantiationException: a
    # method or task constructor refused its settings; InterpolationResolutionError: a ${...} that cannot
    # resolve, e.g. a budget priced for a model with no shape
    return (UserError, InstantiationException, InterpolationResolutionError)


def fail(e: BaseException) -> None:
    """A configuration or data problem: one line that names the fix, not a library traceback."""
    print(f"esbench: error: {e}", file=sys.stderr)
    sys.exit(2)


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    try:
        validate(cfg)  # before any heavy import: the answer to a typo is immediate
    except ConfigError as e:
        _discard_unstarted()
        fail(e)
    missing = _unloadable_model(cfg)
    if missing:
        _discard_unstarted()  # a run that never started is not a result: no record, no folder
        fail(missing)
    from harness.core.quiet import quiet_known_warnings

    quiet_known_warnings()

    def on_sigterm(signum, frame):
        raise Terminated(f"signal {signum} (SIGTERM): the run was stopped from outside (timeout, Slurm, kill)")

    # SIGTERM becomes an exception, so the run's record is rewritten as interrupted (with how far
    # it got) and a rerun with the same stamp resumes from its checkpoint.
    signal.signal(signal.SIGTERM, on_sigterm)
    errors = user_errors()
    try:
        _dispatch(cfg)
    except errors as e:
        if getattr(e, "nothing_started", False):  # refused before any run: no folder left behind
            _discard_unstarted()
        fail(e)
    except (Terminated, KeyboardInterrupt) as e:
        print(f"esbench: interrupted: {e or 'Ctrl-C'}; resume with: {resume_command(cfg)}", file=sys.stderr)
        sys.exit(143 if isinstance(e, Terminated) else 130)


def resume_command(cfg: DictConfig) -> str:
    """This command line with its stamp fixed: the same run folder, so finished runs are skipped and a
    method resumes from its checkpoint."""
    import shlex

    from hydra.core.hydra_config import HydraConfig

    from harness.core.child_runs import config_flags

    try:  # its --config-dir kept: the same files compose the same runs
        args = [*config_flags(), *(o for o in HydraConfig.get().overrides.task
                                   if o.lstrip("+~").split("=", 1)[0] != "stamp")]
    except ValueError:  # no Hydra run (a test calling main's pieces): the process's own arguments
        args = [a for a in sys.argv[1:] if not a.startswith("stamp=")]
    return shlex.join(["python", "-m", "harness", *args, f"stamp={cfg.stamp}"])


def _discard_unstarted() -> None:
    """Remove the run folder Hydra made for a run that failed its checks before it started, when it holds
    only Hydra's own files (.hydra/, the log): a rerun of an interrupted run keeps its folder (it has a record)."""
    import shutil

    from hydra.core.hydra_config import HydraConfig

    try:
        run_dir = Path(HydraConfig.get().runtime.output_dir)
    except ValueError:
        return
    hydra_files = {".hydra", f"{HydraConfig.get().job.name}.log"}
    if run_dir.resolve() != Path.cwd().resolve() and run_dir.is_dir() and \
            {p.name for p in run_dir.iterdir()} <= hydra_files:
        shutil.rmtree(run_dir, ignore_errors=True)
        for parent in run_dir.parents:  # runs/<group>/, runs/ when this made them: only while empty
            if parent.resolve() == Path.cwd().resolve():
                break
            try:
                parent.rmdir()
            except OSError:
                break


def _unloadable_model(cfg: DictConfig) -> str | None:
    """A model that cannot load, said before torch loads: a hub id not cached offline (harness/core/hub.py),
    or a wheel model not materialised (harness/core/wheels.py; for an experiment, any of its models)."""
    from harness.core import wheels
    from harness.core.paths import ZOO_DIR
    from harness.runner.model_arg import is_hub_id

    entries = cfg.get("models") or [] if is_experiment(cfg) else []
    names = [str(m.get("name")) if hasattr(m, "get") else str(m) for m in entries]  # option names: a wheel's is its name
    name = str(cfg.model.get("name_or_path") or "")
    for wheel in [n for n in names + [name] if wheels.is_wheel_model(n)]:
        try:
            wheels.resolve(wheel)
        except wheels.WheelModelError as e:
            return str(e)
    if not is_experiment(cfg):
        from harness.runner.argv_check import missing_model

        missing = missing_model(name)  # a folder named in a model file (the command line's: before Hydra)
        if missing:
            return missing
    if is_experiment(cfg) or not is_hub_id(name) or (ZOO_DIR / name).is_dir() or Path(name).exists():
        return None
    from harness.core.hub import check_hub_model

    return check_hub_model(name)


def _dispatch(cfg: DictConfig) -> None:
    """One run or an experiment. Imports here, by branch: an experiment checks every run's config before
    torch loads (harness/runner/experiment.py), so its errors come in seconds too."""
    from hydra.core.hydra_config import HydraConfig

    if cfg.get("rehearse"): return __import__("harness.runner.rehearse", fromlist=["main"]).main(cfg)  # noqa: E701
    if not is_experiment(cfg) and (cfg.get("dry_run") or cfg.get("plan")):  # one run: show it, run nothing
        from omegaconf import OmegaConf

        if cfg.get("plan"):
            raise ConfigError("+plan=true prices an experiment's runs; add experiment=NAME, or drop +plan "
                              "(+dry_run=true shows this one run's config)")
        print(OmegaConf.to_yaml(cfg, resolve=True), end="")
        print(f"dry run: one run (no experiment=); it would write "
              f"{Path(cfg.runs_dir) / cfg.group}/{cfg.stamp}-{HydraConfig.get().runtime.choices.method}/")
        return
    if is_experiment(cfg):
        from harness.runner.experiment import run_experiment
        if cfg.get("plan"):  # +plan=true: price every run (harness/runner/pricing.py), run nothing
            from harness.runner.pricing import print_prices
            return print_prices(cfg)
        if run_experiment(cfg):
            sys.exit(1)  # some runs failed: their records and the tables say which and why
        return
    from harness.core.locks import folder_lock
    from harness.reporting.report import refuse_tracked

    refuse_tracked(Path(cfg.results_dir) / cfg.group, bool(cfg.get("overwrite_results")))  # before the run, not after
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    # the run's folder is locked before torch loads (run_one holds it too), so a second process on the
    # same stamp is refused in seconds; rl: rank 0 of a launch holds it (RANK: no torch import to ask)
    with folder_lock(run_dir, "the run folder") if os.environ.get("RANK", "0") == "0" else contextlib.nullcontext():
        from harness.core.distributed import is_main_process
        from harness.runner.run import run_one

        run_one(cfg, run_dir)
    if not is_main_process():  # rl: only rank 0 writes tables (harness/core/distributed.py)
        return
    from harness.core.records import RECORD_NAME
    from harness.reporting.report import rebuild

    out = Path(cfg.results_dir) / cfg.group
    print(rebuild(Path(cfg.runs_dir) / cfg.group, out, title=cfg.group))
    split = sorted(p.name for p in out.iterdir() if (p / "table.md").is_file())  # one folder per model and task
    files = (f"table.md; one folder per model and task: {', '.join(split)}" if split
             else "table.md, table.csv, passk.png")
    print(f"record: {run_dir / RECORD_NAME}\ntables: {out}/ ({files})")
