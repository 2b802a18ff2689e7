"""Reward hacks against MBPP: every program in tests/hostile/ must score 0 and leave nothing behind.

Each hostile program solves nothing; it tries to pass the tests another way (forged success line,
skipped asserts, the dataset's own answers, an always-equal object, early exits, forged result
records, files and sockets left in /tmp and /dev/shm). A program may read `ESBENCH_TEST_FUNC`, the
tested function's name, which a model knows from the prompt. Reference solutions must still
score 1 under the same judge.

    python -m pytest tests/test_sandbox_hostile.py -q
"""
import ast
import glob
import os
import random
from pathlib import Path

import pytest

from tasks.mbpp import MBPP
from tasks.sandbox import layers

HOSTILE = sorted((Path(__file__).parent / "hostile").glob("*.py"))
ROWS = (11, 12, 59, 233, 367)  # strings, nested lists, ints, a float, setup code (all `==`)
LEFTOVER_GLOBS = ("/tmp/esbench-hostile*", "/dev/shm/esbench-hostile*")


@pytest.fixture(scope="module")
def task():
    return MBPP(n_eval=None, timeout_s=5)


@pytest.fixture(scope="module")
def rows(task):
    return [r for r in task.load("test") if r["task_id"] in ROWS]


def _tested_function(test: str) -> str:
    call = next(n for n in ast.walk(ast.parse(test)) if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Name) and n.func.id not in dir(__builtins__))
    return call.func.id


def _sandbox_dirs() -> set[str]:
    return set(glob.glob("/tmp/esbench-sandbox-*"))


@pytest.mark.parametrize("program", HOSTILE, ids=[p.stem for p in HOSTILE])
def test_hostile_program_scores_zero_and_leaves_nothing(task, rows, program):
    before = _sandbox_dirs()
    completions = [f"```python\nESBENCH_TEST_FUNC = {_tested_function(r['test_list'][0])!r}\n"
                   f"{program.read_text()}\n```" for r in rows]
    rewards = task.reward(completions, test_list=[r["test_list"] for r in rows],
                          test_setup_code=[r["test_setup_code"] for r in rows])
    assert rewards == [0.0] * len(rows), program.stem
    left = [p for pattern in LEFTOVER_GLOBS for p in glob.glob(pattern)]
    assert not left, f"{program.stem} left {left} on the host"
    assert not (_sandbox_dirs() - before), f"{program.stem} left a sandbox dir behind"


def test_reference_solutions_still_score_one(task):
    """A sample of 30 rows from every split; `python -m harness.bench_sandbox --references`
    checks all of them."""
    rows = [r for s in ("train", "validation", "test") for r in task.load(s) if r["task_id"] != 123]
    sample = random.Random(0).sample(rows, 30)  # 123's reference needs ~5 s: too slow here
    completions = [task.gold_completion(code=r["code"]) for r in sample]
    rewards = task.reward(completions, test_list=[r["test_list"] for r in sample],
                          test_setup_code=[r["test_setup_code"] for r in sample])
    assert rewards == [1.0] * 30, [r["task_id"] for r, x in zip(sample, rewards) if x != 1.0]


def test_sandbox_layers_are_reported():
    active = layers()
    assert active["rlimits"] and active["seccomp"] is False
    if os.geteuid() == 0 and active["mount_ns"]:
        assert active["hidden_fs"] and active["private_tmp"] and active["no_new_privs"]
