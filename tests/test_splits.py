"""Validation never overlaps training: for every conf/task YAML and every source that
loads offline (local, zoo, fixture, a user file), the prompts of train, validation and test are
pairwise disjoint, compared by prompt text, by row id where rows have one, and for Countdown by
problem (the numbers in any order and the target); evaluation-only tasks refuse train and validation.

    python -m pytest tests/test_splits.py -q
"""
import json
from itertools import combinations
from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from tasks.base import DATA_DIR, TaskDataError
from tasks.conciseness import Conciseness
from tasks.countdown import Countdown, problem_key
from tasks.csqa import CommonsenseQA

CONF = Path(__file__).parents[1] / "conf" / "task"
SPLITS = ("train", "validation", "test")
EVAL_ONLY = {"math500", "humaneval", "gpqa"}
ID_COLUMNS = ("id", "task_id", "_id")


def task_of(name: str, **overrides):
    """The task of conf/task/<name>.yaml with every test and validation row (n_eval=null)."""
    cfg = OmegaConf.load(CONF / f"{name}.yaml")
    return instantiate(cfg, **{"n_eval": None, **overrides})


def keys(ds) -> dict[str, set]:
    """What must not repeat across splits: prompt texts, row ids, Countdown problems."""
    out = {"prompt": set(ds["prompt"])}
    for c in ID_COLUMNS:
        if c in ds.column_names:
            out[c] = {str(v) for v in ds[c]}
    if {"nums", "target"} <= set(ds.column_names):
        out["problem"] = {problem_key(r) for r in ds.select_columns(["nums", "target"])}
    return out


def assert_disjoint(task, splits=SPLITS, problems=True):
    loaded = {s: keys(task.load(s)) for s in splits}
    for a, b in combinations(splits, 2):
        for kind in loaded[a].keys() & loaded[b].keys():
            if kind == "problem" and not problems and "train" in (a, b) and "test" in (a, b):
                continue
            shared = loaded[a][kind] & loaded[b][kind]
            assert not shared, f"{a} and {b} share {len(shared)} {kind}s, e.g. {sorted(shared, key=str)[:3]}"
    return loaded


@pytest.mark.parametrize("name", sorted(p.stem for p in CONF.glob("*.yaml")))
def test_every_task_config_has_disjoint_splits(name):
    task = task_of(name)
    if name in EVAL_ONLY:
        for split in ("train", "validation"):
            with pytest.raises(TaskDataError, match=f"evaluation-only: there is no {split} split"):
                task.load(split)
        assert len(task.load("test")) > 0
        return
    # TinyZero's own train and test files share 5 problems with the numbers reordered (never the same
    # prompt text); train and test rows stay as published, validation avoids both
    loaded = assert_disjoint(task, problems=name != "countdown_think")
    assert all(loaded[s]["prompt"] for s in SPLITS)


@pytest.mark.parametrize("numbers", [3, 4])
def test_countdown_zoo_splits_are_disjoint_problems(numbers):
    assert_disjoint(Countdown(source="zoo", numbers=numbers, n_eval=None))


def test_countdown_tinyzero_validation_avoids_train_and_test():
    t = Countdown(source="tinyzero", n_eval=None)
    loaded = assert_disjoint(t, problems=False)
    assert len(loaded["validation"]["prompt"]) == 497   # the last 500 train rows less 3 repeated problems
    assert len(t.load("train")) == 7501 and len(t.load("test")) == 2001  # unchanged


def paper_file(path: Path, extra_test: list[dict] = ()) -> Path:
    """A 2,200-row file in the ES paper's countdown.json format (a JSON list of {context, numbers,
    target}): the head of the TinyZero slice, as the paper's file is; `extra_test` rows replace its
    last rows (inside the test part)."""
    head = [json.loads(line) for line in (DATA_DIR / "countdown" / "train.jsonl").read_text().splitlines()[:2200]]
    head[len(head) - len(extra_test):] = list(extra_test)
    rows = [{"context": f"Using the numbers {r['nums']}, create an equation that equals {r['target']}.",
             "numbers": r["nums"], "target": r["target"]} for r in head]
    path.write_text(json.dumps(rows, indent=1))
    return path


def test_countdown_paper_validation_is_outside_the_file(tmp_path):
    tinyzero_val = Countdown(source="tinyzero", n_eval=None).load("validation")
    leaked = [{"nums": r["nums"][::-1], "target": r["target"]} for r in tinyzero_val.select(range(5))]
    path = paper_file(tmp_path / "countdown.json", leaked)   # 5 validation problems in the paper's test rows
    for template in ("think", "compact"):
        t = Countdown(source="paper", path=str(path), template=template, n_eval=None)
        loaded = assert_disjoint(t)
        train, test = t.load("train"), t.load("test")
        assert len(train) == 200 and len(test) == 2000
        rows = json.loads(path.read_text())
        assert train["target"] == [r["target"] for r in rows[:200]]      # train: the first 200 rows
        assert test["target"] == [r["target"] for r in rows[-2000:]]     # test: the last 2,000 rows
        assert len(loaded["validation"]["problem"]) == len(tinyzero_val) - 5
        every = {problem_key({"nums": r["numbers"], "target": r["target"]}) for r in rows}
        assert not loaded["validation"]["problem"] & every                  # no row of the file at all


def test_countdown_paper_validation_through_the_config(tmp_path):
    path = paper_file(tmp_path / "countdown.json")
    assert_disjoint(task_of("countdown_think", source="paper", path=str(path)))


def test_conciseness_validation_is_its_own_prompts(tmp_path):
    t = Conciseness()
    loaded = assert_disjoint(t)
    assert [len(loaded[s]["prompt"]) for s in SPLITS] == [2, 2, 8]
    # a user file: the same split rule; a prompt in two splits is refused, missing validation rows named
    f = tmp_path / "p.jsonl"
    rows = [("train", "A?"), ("validation", "B?"), ("test", "C?")]
    f.write_text("".join(json.dumps({"split": s, "prompt": p, "target": "x"}) + "\n" for s, p in rows))
    assert_disjoint(Conciseness(path=str(f)))
    f.write_text("".join(json.dumps({"split": s, "prompt": p, "target": "x"}) + "\n"
                         for s, p in [*rows, ("validation", "A?")]))
    with pytest.raises(TaskDataError, match=r"p\.jsonl:4: the prompt is also a train prompt \(line 1\)"):
        Conciseness(path=str(f)).load("validation")
    f.write_text("".join(json.dumps({"split": s, "prompt": p, "target": "x"}) + "\n" for s, p in rows[::2]))
    with pytest.raises(TaskDataError, match="no rows with split='validation'"):
        Conciseness(path=str(f)).load("validation")


def test_csqa_local_files_split_disjointly(tmp_path):
    from test_task_multiple_choice import _csqa_dir, _csqa_row
    train = [{**_csqa_row(f"t{i}"), "question": {**_csqa_row()["question"], "stem": f"Question {i}?"}}
             for i in range(40)]
    dev = [{**_csqa_row(f"d{i}"), "question": {**_csqa_row()["question"], "stem": f"Dev question {i}?"}}
           for i in range(8)]
    loaded = assert_disjoint(CommonsenseQA(source="local", path=str(_csqa_dir(tmp_path, train, dev)), n_eval=None))
    assert len(loaded["validation"]["id"]) == 10 and len(loaded["test"]["id"]) == 8
