"""A malformed row in a task's data file fails when the task is built, before any model loads:
one temp file per task, run through run_one with the model loader replaced by
one that fails the test, so the TaskDataError must come first; each names file:line and the fix.

    python -m pytest tests/test_task_data_checks.py -q
"""
import csv
import json
import re

import pytest

import harness.runner.run as run_module
from harness.runner.run import run_one
from tasks.base import TaskDataError

EVAL_ONLY = ["model=zoo-100k", "device=cpu", "group=t", "method=base", "task.n_eval=2", "eval.n_prompts=2"]


def _countdown(tmp_path):
    """The ES paper's format (a JSON list of {context, numbers, target}), one row with target "x"."""
    rows = [{"context": "c", "numbers": [3, 7, 12], "target": 22}] * 2200
    rows[1700] = {"context": "c", "numbers": [3, 7, 12], "target": "x"}
    path = tmp_path / "countdown.json"
    path.write_text("[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n]\n")
    return (["task=countdown_think", "task.source=paper", f"task.path={path}"],
            r"countdown\.json:1702: field `target` is 'x'; it must be a finite integer")


def _csqa(tmp_path):
    def row(i, key="B"):
        return {"id": f"q{i}", "answerKey": key, "question": {"stem": "Where is milk kept cold?", "choices": [
            {"label": k, "text": t} for k, t in zip("ABCDE", ["oven", "fridge", "box", "shelf", "yard"])]}}
    (tmp_path / "train_rand_split.jsonl").write_text("".join(json.dumps(row(i)) + "\n" for i in range(8)))
    (tmp_path / "dev_rand_split.jsonl").write_text(json.dumps(row(8)) + "\n" + json.dumps(row(9, "F")) + "\n")
    return (["task=csqa", "task.source=local", f"task.path={tmp_path}"],
            r"dev_rand_split\.jsonl:2: field `answerKey` is 'F', not among the choice labels A, B, C, D, E; "
            r"use rows with answers")


def _gpqa(tmp_path):
    path = tmp_path / "gpqa_diamond.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Record ID", "Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2",
                    "Incorrect Answer 3"])
        w.writerows([["r1", "Q?", "c", "i1", "i2", "i3"], ["r2", "Q?", "c", "i1", "i2", ""]])
    return (["task=gpqa", "task.source=local", f"task.path={path}"],
            r"gpqa_diamond\.csv:3: field `Incorrect Answer 3` is empty; each row needs")


def _hotpotqa(tmp_path):
    good = {"_id": "a", "question": "Which town?", "answer": "Caddesby", "context": [["T", ["s."]]]}
    (tmp_path / "hotpot_dev_distractor_v1.json").write_text(json.dumps([good]))
    (tmp_path / "hotpot_train_v1.1.json").write_text("[\n" + json.dumps(good) + ",\n"
                                                     + json.dumps({**good, "answer": 7}) + "\n]\n")
    return (["task=hotpotqa", f"task.path={tmp_path}"],  # the train file: unread by an eval-only run until now
            r"hotpot_train_v1\.1\.json:3: field `answer` is a number, not a string; each row needs")


def _conciseness(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"split": "test", "prompt": "Hi?", "target": "Hi"}\n{"split": "test", "prompt": "Yo?"}\n')
    return (["task=conciseness", f"task.path={path}"],
            r"prompts\.jsonl:2: field `target` is missing; each row needs")


@pytest.mark.parametrize("case", [_countdown, _csqa, _gpqa, _hotpotqa, _conciseness])
def test_a_bad_row_fails_before_the_model_loads(compose, tmp_path, monkeypatch, case):
    overrides, message = case(tmp_path)

    def no_model(cfg, method=None):
        raise AssertionError("the model was loaded before the task's data were checked")
    monkeypatch.setattr(run_module, "policy_from", no_model)
    with pytest.raises(Exception) as caught:  # Hydra's instantiate wraps it (InstantiationException)
        run_one(compose(*EVAL_ONLY, *overrides), tmp_path / "run")
    error = caught.value
    while not isinstance(error, TaskDataError) and error.__cause__ is not None:
        error = error.__cause__
    assert isinstance(error, TaskDataError), repr(caught.value)
    assert re.search(message, str(error)) and "\n" not in str(error), str(error)


def test_a_bad_held_out_task_fails_before_the_model_loads(compose, tmp_path, monkeypatch):
    """eval.tasks are built with the main task, so a malformed held-out file costs no training run."""
    overrides, message = _conciseness(tmp_path)
    path = overrides[1].split("=", 1)[1]

    def no_model(cfg, method=None):
        raise AssertionError("the model was loaded before the held-out task's data were checked")
    monkeypatch.setattr(run_module, "policy_from", no_model)
    with pytest.raises(TaskDataError, match=message):
        run_one(compose(*EVAL_ONLY, "eval.tasks=[conciseness]",
                        f"+eval.task_overrides={{conciseness: {{path: '{path}'}}}}"), tmp_path / "run")
