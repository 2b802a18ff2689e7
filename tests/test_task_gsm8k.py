"""GSM8K task: data, answer extraction, reward, and data/hub errors.

    python -m pytest tests/test_task_gsm8k.py -q
"""
import doctest
from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

import tasks.gsm8k
from tasks.base import TaskDataError
from tasks.gsm8k import GSM8K

CONF = Path(__file__).parents[1] / "conf" / "task" / "gsm8k.yaml"


@pytest.fixture(scope="module")
def task():
    return GSM8K(n_eval=None)


def test_doctests():
    assert doctest.testmod(tasks.gsm8k).failed == 0


def test_config_builds_the_task():
    t = instantiate(OmegaConf.load(CONF))
    assert isinstance(t, GSM8K) and t.max_new_tokens > 0 and t.n_eval == 500
    assert len(t.load("test")) == 500


def test_splits(task):
    train, val, test = (task.load(s) for s in ("train", "validation", "test"))
    assert (len(train), len(val), len(test)) == (6973, 500, 1319)
    assert not set(train["question"]) & set(val["question"])
    assert {"prompt", "answer"} <= set(test.column_names)
    assert "####" in test[0]["prompt"] and test[0]["answer"] == "18"


def test_gold_solutions_score_one(task):
    test = task.load("test")
    assert task.reward(test["solution"], answer=test["answer"]) == [1.0] * len(test)


@pytest.mark.parametrize("completion, expected", [
    ("#### 18", "18"),
    ("She makes 9 * 2 = $18 every day.", "18"),  # no marker: last number
    ("#### 1,000", "1000"),
    ("The total is $5.00", "5"),
    ("first #### 3 then corrected\n#### 4", "4"),  # the last marker wins
    ("12-4=8", "8"),  # subtraction, not -8 or -4
    ("The temperature fell to -5 degrees", "-5"),
    ("#### 2.50", "2.5"),
    ("I do not know the answer.", None),  # no number at all
    ("#### \n", None),  # a marker with nothing after it
    ("", None),
])
def test_extract_answer(task, completion, expected):
    assert task.extract_answer(completion) == expected


def test_reward_gold_garbage_and_tolerance(task):
    completions = ["#### 18", "#### 18.0000001", "#### 17", "banana", "#### eighteen", ""]
    assert task.reward(completions, answer=["18"] * 6) == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    assert task.is_correct("so $1,234,567 in all", answer="1234567")


def test_hub_unreachable_gives_clear_error(monkeypatch):
    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub")
    monkeypatch.setattr(tasks.gsm8k.datasets, "load_dataset", offline)
    with pytest.raises(TaskDataError, match="source=local"):
        GSM8K(source="hub").load("test")


def test_bad_source_and_split():
    with pytest.raises(TaskDataError, match="local or hub"):
        GSM8K(source="ftp")
    with pytest.raises(TaskDataError, match="split"):
        GSM8K().load("dev")


def test_malformed_user_file_names_file_and_row(tmp_path):
    (tmp_path / "test.jsonl").write_text(
        '{"question": "1+1?", "answer": "2\\n#### 2"}\n{"question": "x", "answer": "no marker"}\n')
    with pytest.raises(TaskDataError, match=r"test\.jsonl: row 2"):
        GSM8K(path=str(tmp_path)).load("test")
    with pytest.raises(TaskDataError, match="not found"):
        GSM8K(path=str(tmp_path)).load("train")
