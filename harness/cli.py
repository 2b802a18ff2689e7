"""The Hydra entry point: `python -m harness ...` composes the config and runs one run or an experiment.

    python -m harness method=base                       # evaluate the default zoo model
    python -m harness method=es budget.flops=4e12       # train with ES, then evaluate
    python -m harness                                   # the quickstart comparison
    python -m harness -m method=es seed=0,1,2           # a Hydra multirun
    python -m harness experiment=X +plan=true           # price every run of an experiment (harness/plan.py)

Data flows one way: cli -> experiment -> run -> (method, evaluation) -> records -> reporting.
"""
from __future__ import annotations

import signal
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from omegaconf import DictConfig
from omegaconf.errors import InterpolationResolutionError

from harness.budget import BudgetError
from harness.distributed import DistributedError, is_main_process
from harness.engines import EngineError
from harness.evaluation.evaluate import EvalConfigError
from harness.experiment import ExperimentError, run_experiment
from harness.plan import PlanError, print_plan
from harness.policy import ModelLoadError
from harness.records import RECORD_NAME
from harness.run import CONF_DIR, Terminated, run_one
from harness.schema import ConfigError, is_experiment, validate
from harness.tables import rebuild
from tasks.base import TaskDataError

# InterpolationResolutionError: a ${...} that cannot resolve, e.g. a budget priced for a model with no shape
USER_ERRORS = (ModelLoadError, TaskDataError, BudgetError, EvalConfigError, InstantiationException, ExperimentError,
               ConfigError, EngineError, InterpolationResolutionError, PlanError,
               DistributedError)  # EngineError: a missing vLLM extra, too few GPUs, a dead or diverged ES worker


def _on_sigterm(signum, frame):
    raise Terminated(f"signal {signum} (SIGTERM): the run was stopped from outside (timeout, Slurm, kill)")


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    # SIGTERM becomes an exception, so the run's record is rewritten as interrupted (with how far
    # it got) and a rerun with the same stamp resumes from its checkpoint.
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        validate(cfg)
        if is_experiment(cfg):
            if cfg.get("plan"):  # +plan=true: price every run (harness/plan.py), run nothing
                return print_plan(cfg)
            if run_experiment(cfg):
                sys.exit(1)  # some runs failed: their records and the tables say which and why
            return
        run_dir = Path(HydraConfig.get().runtime.output_dir)
        run_one(cfg, run_dir)
        if not is_main_process():  # rl: only rank 0 writes tables (harness/distributed.py)
            return
        out = Path(cfg.results_dir) / cfg.group
        print(rebuild(Path(cfg.runs_dir) / cfg.group, out, title=cfg.group))
        print(f"record: {run_dir / RECORD_NAME}\ntables: {out}/ (table.md, table.csv, passk.png)")
    except USER_ERRORS as e:
        # A configuration or data problem: one line that names the fix, not a library traceback.
        print(f"esbench: error: {e}", file=sys.stderr)
        sys.exit(2)
    except (Terminated, KeyboardInterrupt) as e:
        print(f"esbench: interrupted: {e}; rerun the same command with stamp=... to resume", file=sys.stderr)
        sys.exit(143 if isinstance(e, Terminated) else 130)
