"""Every config composes, and every `_target_` binds to its callable's signature without building it.

    python -m pytest tests/test_configs.py -q
"""
import inspect
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import get_method
from omegaconf import OmegaConf

from harness.evaluate import EvalConfig
from harness.run import CONF_DIR

GROUPS = ["model", "task", "method", "budget", "eval"]


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def _compose(overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def _bind(node):
    kwargs = {k: v for k, v in OmegaConf.to_container(node, resolve=True).items() if k != "_target_"}
    inspect.signature(get_method(node._target_)).bind(**kwargs)


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in options(g)])
def test_every_option_composes_and_binds(group, option):
    cfg = _compose([f"{group}={option}"])
    for node in (cfg.task, cfg.method):
        _bind(node)
    EvalConfig(**OmegaConf.to_container(cfg.eval, resolve=True))
    assert cfg.model.name_or_path and cfg.budget.kind in ("flops", "samples")


@pytest.mark.parametrize("experiment", options("experiment"))
def test_every_experiment_composes_and_binds(experiment):
    cfg = _compose([f"experiment={experiment}"])
    for cell in cfg.get("cells", []):
        child = _compose([f"experiment={experiment}", *cell.overrides])
        _bind(child.method)
        _bind(child.task)
    for grid in cfg.get("grids", []):
        child = _compose([f"experiment={experiment}", *grid.overrides])
        for key in grid.axes:
            assert OmegaConf.select(child, key) is not None, f"grid axis {key} is not a config key"
        _bind(child.method)


def test_every_config_opens_with_its_command():
    for path in CONF_DIR.rglob("*.yaml"):
        head = [ln for ln in path.read_text().splitlines()[:3] if ln.startswith("#")]
        assert any("python -m harness" in ln for ln in head), f"{path} should open with its launch command"
