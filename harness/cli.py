"""The Hydra entry point: `python -m harness ...` composes the config and runs one run or an experiment.

    python -m harness method=base                       # evaluate the default zoo model
    python -m harness method=es budget.flops=4e12       # train with ES, then evaluate
    python -m harness                                   # the quickstart comparison
    python -m harness -m method=es seed=0,1,2           # a Hydra multirun

Data flows one way: cli -> experiment -> run -> (method, evaluation) -> records -> reporting.
"""
from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from omegaconf import DictConfig

from harness.budget import BudgetError
from harness.engines import EngineError
from harness.evaluation.evaluate import EvalConfigError
from harness.experiment import ExperimentError, run_experiment
from harness.policy import ModelLoadError
from harness.run import CONF_DIR, run_one
from harness.tables import markdown_table, write_tables
from tasks.base import TaskDataError

USER_ERRORS = (ModelLoadError, TaskDataError, BudgetError, EvalConfigError, InstantiationException, ExperimentError,
               EngineError)  # engine settings, a missing vLLM extra, too few GPUs, a dead or diverged ES worker


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    try:
        if cfg.get("cells") or cfg.get("grids"):
            if run_experiment(cfg):
                sys.exit(1)  # some runs failed: their records and the tables say which and why
            return
        run_dir = Path(HydraConfig.get().runtime.output_dir)
        run_one(cfg, run_dir)
        df = write_tables(Path(cfg.runs_dir) / cfg.group, Path(cfg.results_dir) / cfg.group, title=cfg.group)
        print(markdown_table(df))
        print(f"record: {run_dir / 'record.json'}\ntables: {Path(cfg.results_dir) / cfg.group}/table.md, table.csv, passk.png")
    except USER_ERRORS as e:
        # A configuration or data problem: one line that names the fix, not a library traceback.
        print(f"esbench: error: {e}", file=sys.stderr)
        sys.exit(2)
