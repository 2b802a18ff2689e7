"""The confirmation's fresh arithmetic test split shares no problem with any split an earlier run saw."""
import pytest
from omegaconf import OmegaConf

from harness.core.paths import CONF_DIR
from tasks.arithmetic import SPLITS, Arithmetic
from tasks.base import TaskDataError


def _problems(task: Arithmetic, split: str) -> set:
    return {(r["a"], r["op"], r["b"]) for r in task.load(split)}


def test_the_confirmations_test_split_is_disjoint_from_every_earlier_split():
    cfg = OmegaConf.load(CONF_DIR / "experiment" / "placebo_real_confirm.yaml")
    fresh = Arithmetic(test_seed=int(cfg.task.test_seed))
    earlier = Arithmetic()  # every earlier arithmetic run used seed 0, digits 2, ops +-, at most these sizes
    assert not _problems(fresh, "test") & set().union(*(_problems(earlier, s) for s in SPLITS))
    assert len(_problems(fresh, "test")) == 500
    # train and validation are the design's own: unchanged
    assert fresh.load("train")["prompt"] == earlier.load("train")["prompt"]
    assert fresh.load("validation")["prompt"] == earlier.load("validation")["prompt"]


def test_no_experiment_file_before_the_confirmation_moved_the_arithmetic_seed():
    for path in sorted((CONF_DIR / "experiment").glob("*.yaml")):
        text = path.read_text()
        if "arithmetic" in text and path.stem != "placebo_real_confirm":
            assert "test_seed" not in text and "task.seed" not in text, path.name


def test_a_test_seed_equal_to_the_seed_is_refused():
    with pytest.raises(TaskDataError, match="test_seed"):
        Arithmetic(test_seed=0)
