"""Run an experiment: a list of fixed cells plus RL grids selected on the validation split.

An experiment file (conf/experiment/*.yaml) declares
  cells: [{label, overrides}]                      # e.g. base, ES with its one fixed setting
  grids: [{name, overrides, axes: {key: [values]}}] # e.g. GRPO over beta x learning rate
Every cell and grid point is composed from the same command line plus its own overrides and run in
turn. Grid points are evaluated on validation and test; the main table takes, per grid, the point
with the best validation `select_by` metric (never test), and a second table lists the whole grid.
Tables are rebuilt from records alone: `python -m harness.tables runs/<group>/<stamp>`.
"""
from __future__ import annotations

import itertools
import logging
import re
from pathlib import Path

from hydra import compose
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger("esbench")


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.=-]+", "_", text).strip("_")


def grid_points(grid: DictConfig) -> list[dict]:
    """The cartesian product of a grid's axes, as {override key: value} dicts, in file order."""
    keys = list(grid.axes)
    return [dict(zip(keys, vals)) for vals in itertools.product(*(grid.axes[k] for k in keys))]


def plan(cfg: DictConfig) -> list[tuple[str, list[str], str | None]]:
    """(label, overrides, grid name) for every run of the experiment, in order."""
    runs = [(c.label, list(c.overrides), None) for c in cfg.get("cells", [])]
    for g in cfg.get("grids", []):
        for point in grid_points(g):
            label = f"{g.name} " + " ".join(f"{k.split('.')[-1]}={v:g}" for k, v in point.items())
            sets = [f"{k}={v}" for k, v in point.items()]
            runs.append((label, [*g.overrides, *sets, "eval_splits=[validation,test]"], g.name))
    return runs


def run_experiment(cfg: DictConfig) -> None:
    """Run every cell and grid point, then write the main and grid tables to results/<group>/."""
    from harness.run import run_one
    from harness.tables import write_experiment_tables

    root = Path(HydraConfig.get().runtime.output_dir)
    cli = [o for o in HydraConfig.get().overrides.task]
    runs = plan(cfg)
    for i, (label, overrides, grid) in enumerate(runs, 1):
        extra = [f"+grid={grid}"] if grid else []
        child = compose(config_name="config", overrides=[*cli, *overrides, f"label='{label}'", *extra])
        print(f"[{i}/{len(runs)}] {label}", flush=True)
        run_one(child, root / slug(label))
    out = Path(cfg.results_dir) / cfg.group
    write_experiment_tables(root, out, select_by=cfg.get("select_by", "greedy_acc"), title=cfg.group)
    print((out / "table.md").read_text())
    print(f"records: {root}\ntables: {out}/table.md, grid.md, table.csv, passk.png")
