"""Conciseness task: prompt set, length reward, the paper's normalisation.

    python -m pytest tests/test_task_conciseness.py -q
"""
import doctest
from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

import tasks.conciseness
from tasks.base import TaskDataError
from tasks.conciseness import Conciseness, normalised_reward

CONF = Path(__file__).parents[1] / "conf" / "task" / "conciseness.yaml"


def test_doctests():
    assert doctest.testmod(tasks.conciseness).failed == 0


def test_config_and_splits():
    t = instantiate(OmegaConf.load(CONF))
    assert isinstance(t, Conciseness) and t.max_new_tokens > 0
    train, val, test = (t.load(s) for s in ("train", "validation", "test"))
    assert (len(train), len(val), len(test)) == (2, 2, 8)
    assert not set(val["prompt"]) & {*train["prompt"], *test["prompt"]}  # own prompts (tests/test_splits.py)
    assert not set(train["prompt"]) & set(test["prompt"])
    assert all(0 < len(x) <= 20 for x in test["target"])


def test_reward_is_minus_length_difference():
    t = Conciseness()
    completions = ["  Jupiter\n", "jupiter", "It is Jupiter.", "", "x" * 2007]
    assert t.reward(completions, target=["Jupiter"] * 5) == [0.0, 0.0, -7.0, -7.0, -2000.0]


def test_extract_and_is_correct():
    t = Conciseness()
    assert t.extract_answer("  Paris \n") == "Paris" and t.extract_answer(" \n") is None
    assert t.is_correct(" paris", target="Paris")
    assert not t.is_correct("Paris, France", target="Paris")
    assert not t.is_correct("Lyon", target="Paris")  # same length, full reward, still wrong


def test_normalised_reward():
    assert normalised_reward(-2000) == 0.0 and normalised_reward(0) == 1.0
    assert Conciseness.normalised_reward(-1000) == 0.5


def test_malformed_prompt_file(tmp_path):
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"split": "train", "prompt": "Hi?", "target": "Hi"}\n{"split": "dev"}\n')
    with pytest.raises(TaskDataError, match=r"p\.jsonl:2: field `split` is 'dev'"):
        Conciseness(path=str(bad)).load("train")
    bad.write_text('{"split": "train", "prompt": "Hi?", "target": "Hi"}\n')
    with pytest.raises(TaskDataError, match="no rows with split='test'"):
        Conciseness(path=str(bad)).load("test")


def test_normalised_reward_is_the_papers_scale():
    task = Conciseness(normalise=True)
    assert task.reward(["Jupiter", "x" * 2007], target=["Jupiter", "Jupiter"]) == [1.0, 0.0]


GOOD = '{"split": "train", "prompt": "Hi?", "target": "Hi"}'


@pytest.mark.parametrize("text, message", [
    (GOOD + '\n{"split": "train", "prompt": "x"', r"p\.jsonl:2: not valid JSON .*cut off"),
    (GOOD + '\n{"split": "train", "prompt": "x"}\n', r"p\.jsonl:2: field `target` is missing"),
    (GOOD + '\n{"split": "train", "prompt": 5, "target": "x"}\n', r"p\.jsonl:2: field `prompt` is 5"),
    (GOOD + '\n["train", "x", "y"]\n', r"p\.jsonl:2: the row is an array"),
    ("", r"p\.jsonl is empty"),
])
def test_malformed_rows_name_file_line_and_field(tmp_path, text, message):
    bad = tmp_path / "p.jsonl"
    bad.write_text(text)
    with pytest.raises(TaskDataError, match=message):
        Conciseness(path=str(bad))  # the constructor reads every row, before any model loads


def test_rows_are_checked_when_the_task_is_built(tmp_path):
    bad = tmp_path / "p.jsonl"
    bad.write_text(GOOD + '\n{"split": "test", "prompt": "Hello?", "target": 7}\n')
    with pytest.raises(TaskDataError, match=r"p\.jsonl:2: field `target` is 7; each row needs \"split\" "
                                            r"\(\"train\", \"validation\" or \"test\"\) and string \"prompt\""):
        Conciseness(path=str(bad))
    bad.write_text(GOOD + "\n")  # a file without test rows builds; load("test") names what is missing
    with pytest.raises(TaskDataError, match="no rows with split='test'; add at least one"):
        Conciseness(path=str(bad)).load("test")


def test_bad_task_path_and_counts(tmp_path):
    with pytest.raises(TaskDataError, match="is a directory"):
        Conciseness(path=str(tmp_path)).load("train")
    with pytest.raises(TaskDataError, match="not a file path"):
        Conciseness(path=[1]).load("train")
    with pytest.raises(TaskDataError, match="task.n_eval"):
        Conciseness(n_eval=0)
