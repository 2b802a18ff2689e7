"""Conformance: every conf/task/*.yaml builds a Task that loads, gives its gold answers full reward and garbage less.

A new task is one module + one YAML; this test picks it up with no edit. A task from outside the repository
(its module on PYTHONPATH, its YAML in <dir>/task/, run with `python -m harness --config-dir <dir> task=NAME`)
is tested the same way when ESBENCH_CONFIG_DIRS names <dir> (several: separated by os.pathsep, ':'):

    python -m pytest tests/test_tasks.py -q
    PYTHONPATH=/my/plugin ESBENCH_CONFIG_DIRS=/my/plugin/conf python -m pytest tests/test_tasks.py -q
"""
import os
import time
from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from harness.core.paths import CONF_DIR
from tasks.base import Task, TaskDataError, read_jsonl

EXTRA_DIRS = [Path(d) for d in os.environ.get("ESBENCH_CONFIG_DIRS", "").split(os.pathsep) if d.strip()]


def task_files(dirs: list[Path]) -> dict[str, Path]:
    """{test id: YAML} of conf/task/ and of each extra config folder's task/ (its id then names the folder)."""
    out = {p.stem: p for p in sorted((CONF_DIR / "task").glob("*.yaml"))}
    for d in dirs:
        if not (d / "task").is_dir():
            raise pytest.UsageError(f"ESBENCH_CONFIG_DIRS names {d}, which has no task/ folder of YAMLs")
        out.update({f"{d}:{p.stem}": p for p in sorted((d / "task").glob("*.yaml"))})
    return out


TASK_FILES = task_files(EXTRA_DIRS)
TASKS = sorted(TASK_FILES)
GARBAGE = ["", "I don't know.", "<answer></answer>", "\x00" * 50 + "__import__('os')"]


def build(name: str, **overrides):
    cfg = OmegaConf.load(TASK_FILES[name])
    return instantiate(OmegaConf.merge(cfg, overrides))


@pytest.mark.parametrize("name", TASKS)
def test_task_conforms(name):
    task = build(name, n_eval=3)
    assert isinstance(task, Task) and task.name and isinstance(task.version, int)
    assert task.max_new_tokens > 0
    rows = task.load("test")
    assert 0 < len(rows) <= 3 and "prompt" in rows.column_names
    columns = {c: rows[c] for c in rows.column_names if c != "prompt"}
    gold = [task.gold_completion(**{c: v[i] for c, v in columns.items()}) for i in range(len(rows))]
    rewards = task.reward(gold, **columns)
    best = rewards[0]
    assert all(r == best for r in rewards)  # gold earns the same (full) reward on every row
    for i, g in enumerate(gold):
        row = {c: v[i] for c, v in columns.items()}
        assert task.is_correct(g, **row)
        assert task.extract_answer(g) is not None
    for bad in GARBAGE:
        rewards_bad = task.reward([bad] * len(rows), **columns)
        assert all(r < g for r, g in zip(rewards_bad, rewards))
        assert not any(task.is_correct(bad, **{c: v[i] for c, v in columns.items()}) for i in range(len(rows)))


# Linear-time answer extraction: each input is 20,000 repeats of an opening marker that a lazy
# regex such as `<answer>(.*?)</answer>` rescans to the end from. That scan is quadratic: 21 s of
# CPU for Countdown's think template at 20,000 repeats (5 s at 10,000; at the 100,000 this test
# used before, ~9 minutes, so a regression would have passed after a long wait). The linear
# extractors take at most ~0.04 s (gsm8k), so a bound of 1 s of this thread's CPU time (not wall
# time: a busy machine does not count; not the process's, which also bills other threads left by
# earlier tests) leaves 25x for a slow machine and fails on any rescan.
REPEATED = ["<answer>", "<think>", "####", "\\boxed{", "```python\n", "The answer is ", "1,"]
REPEATS, EXTRACT_CPU_S = 20_000, 1.0


@pytest.mark.parametrize("name", TASKS)
@pytest.mark.parametrize("unit", REPEATED)
def test_extract_answer_on_repeated_markers(name, unit):
    task = build(name)
    text = unit * REPEATS
    start = time.thread_time()
    found = task.extract_answer(text)
    cpu = time.thread_time() - start
    assert found is None or isinstance(found, str)
    assert cpu < EXTRACT_CPU_S, (f"{name}.extract_answer took {cpu:.1f} s of CPU on {unit!r} x {REPEATS:,}: "
                                 "it rescans the text from each marker (quadratic), as a lazy regex does")


def test_read_jsonl_names_the_line_of_a_cut_off_row(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2}\n{"a": [1, 2')
    with pytest.raises(TaskDataError, match=r"rows\.jsonl:4: not valid JSON \(.* column 12, "
                                            r"the row is cut off\); fix or delete that line"):
        read_jsonl(path, "test data")
    path.write_text('{"a": 1}\n{"a": ' + "[" * 100_000 + '\n')
    with pytest.raises(TaskDataError, match=r"rows\.jsonl:2: not usable JSON \(RecursionError"):
        read_jsonl(path, "test data")
    path.write_text('\ufeff{"a": 1}\r\n{"a": "x\u2028y"}\r\n')  # BOM, CRLF, a raw U+2028
    assert read_jsonl(path, "test data") == [(1, {"a": 1}), (2, {"a": "x\u2028y"})]


OUTSIDE_TASK = '''
import datasets


class Echo:
    """Repeat a word: a task that lives outside the esbench repository."""

    name, version, max_new_tokens = "echo", 1, 8

    def __init__(self, n_eval: int = 5):
        self.n_eval = n_eval

    def load(self, split):
        words = ["apple", "pear", "plum", "fig", "lime", "kiwi"][: self.n_eval]
        return datasets.Dataset.from_dict({"prompt": [f"Say {w}." for w in words], "word": words})

    def extract_answer(self, text):
        text = text.strip().strip(".").lower()
        return text or None

    def is_correct(self, completion, word, **_):
        return self.extract_answer(completion) == word

    def gold_completion(self, word, **_):
        return word

    def reward(self, completions, word, **_):
        return [float(self.is_correct(c, w)) for c, w in zip(completions, word)]
'''


def test_a_task_from_an_outside_config_dir_is_picked_up(tmp_path, monkeypatch):
    """ESBENCH_CONFIG_DIRS=<dir>: the YAMLs of <dir>/task/ are tested as conf/task's are (each id names <dir>)."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "echo_task.py").write_text(OUTSIDE_TASK)
    (tmp_path / "conf" / "task").mkdir(parents=True)
    (tmp_path / "conf" / "task" / "echo.yaml").write_text("_target_: echo_task.Echo\nn_eval: 5\n")
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    found = task_files([tmp_path / "conf"])
    name = f"{tmp_path / 'conf'}:echo"
    assert name in found and "countdown" in found  # beside conf/task's own
    monkeypatch.setitem(TASK_FILES, name, found[name])
    test_task_conforms(name)  # the conformance test itself, on the outside task
    with pytest.raises(pytest.UsageError, match="has no task/ folder"):
        task_files([tmp_path / "code"])
