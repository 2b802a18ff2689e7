"""HumanEval task: data and splits, the judging plan, canonical and wrong solutions, data and hub
errors, and the hostile programs of tests/hostile/ through HumanEval's own path.

All 164 canonical solutions run in the default suite (~10 s on 2 cores).

    python -m pytest tests/test_task_humaneval.py -q
"""
import doctest
import glob
import gzip
import json
import os
import time
from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

import tasks.humaneval
from tasks.base import TaskDataError
from tasks.humaneval import HumanEval, plan, program

CONF = Path(__file__).parents[1] / "conf" / "task" / "humaneval.yaml"
DATA = Path(tasks.humaneval.__file__).parent / "data" / "humaneval" / "HumanEval.jsonl.gz"
HOSTILE_DIR = Path(__file__).parent / "hostile"
MEMORY_ATTACKS = ("fork_children_300mib", "tmpfs_nested_ns")  # run alone in test_sandbox_hostile
HOSTILE = sorted(p for p in HOSTILE_DIR.glob("*.py") if p.stem not in MEMORY_ATTACKS)
# Judged wholly by value: lists, floats within a tolerance, a tuple computed in a clean run, a
# substituted name, an unrolled loop, sampled random inputs; 33 mixes value tests with inside ones.
HOSTILE_ROWS = ("HumanEval/0", "HumanEval/2", "HumanEval/8", "HumanEval/44", "HumanEval/151",
                "HumanEval/38", "HumanEval/53", "HumanEval/33")
PARTLY_INSIDE = ["HumanEval/32", "HumanEval/33"]
LEFTOVER_GLOBS = ("/tmp/esbench-hostile*", "/dev/shm/esbench-hostile*")


@pytest.fixture(scope="module")
def task():
    return HumanEval(workers=2)


@pytest.fixture(scope="module")
def rows(task):
    return {r["task_id"]: r for r in task.load("test")}


def _columns(rows: list[dict]) -> dict:
    return {c: [r[c] for r in rows] for c in ("code_prompt", "test", "entry_point")}


def test_doctests():
    assert doctest.testmod(tasks.humaneval).failed == 0


def test_config_and_splits(task, rows):
    t = instantiate(OmegaConf.load(CONF))
    assert isinstance(t, HumanEval) and t.max_new_tokens > 0 and t.n_eval == 164
    assert len(rows) == 164 and list(rows)[:2] == ["HumanEval/0", "HumanEval/1"]
    row = rows["HumanEval/0"]
    assert row["prompt"] == row["code_prompt"] and row["prompt"].startswith("from typing import")
    assert row["entry_point"] == "has_close_elements"
    for split in ("train", "validation"):
        with pytest.raises(TaskDataError, match="evaluation-only"):
            task.load(split)
    with pytest.raises(TaskDataError, match="only test"):
        task.load("dev")
    assert len(HumanEval(n_eval=5).load("test")) == 5
    with pytest.raises(TaskDataError, match="local or hub"):
        HumanEval(source="ftp")


def test_plan_counts(task):
    """How the shipped problems are judged; a change here changes what the scores mean."""
    survey = task.survey()
    assert len(survey["by_value"]) == 162 and survey["inside"] == PARTLY_INSIDE
    assert survey["degenerate"] == ["HumanEval/34"]  # one test only
    notes = task.run_info()["notes"]
    assert any("2 of 164" in n and "HumanEval/32" in n for n in notes)


def test_plan_shapes():
    checks = plan("def check(candidate):\n    assert candidate(1) == [1, 2]\n"
                  "    assert abs(candidate(2) - 2.0/3.0) < 1e-6\n    assert True, 'x'\n"
                  "    print\n    assert not candidate(3)\n", "f").checks
    assert [c.outside for c in checks] == [True, True, True]
    assert [c.src for c in checks] == ["candidate(1)", "candidate(2)", "bool(candidate(3))"]
    assert checks[1].expected_src == "2.0 / 3.0"  # computed in a clean run, never sent along
    unrolled = plan("def check(candidate):\n    for x in range(2, 5):\n"
                    "        assert candidate(x) == str(x)\n", "f").checks
    assert [c.src for c in unrolled] == ["candidate(2)", "candidate(3)", "candidate(4)"]
    let = plan("def check(candidate):\n    lst = list(range(3))\n    total = sum(lst)\n"
               "    assert candidate(lst) == total\n", "f").checks
    assert [(c.src, c.expected_src) for c in let] == [("candidate(list(range(3)))",
                                                       "sum(list(range(3)))")]
    mixed = plan("import math\ndef check(candidate):\n    import random\n    assert candidate(1) == 1\n"
                 "    for _ in range(3):\n        x = random.randint(0, 9)\n"
                 "        assert candidate(x) == x\n", "f")
    assert [c.outside for c in mixed.checks] == [False, True] and mixed.inside_statements == 2
    assert "import math" in mixed.setup and mixed.setup.endswith("candidate = f\n")
    assert "_esbench_check(candidate)" in mixed.checks[0].src  # at the first inside statement
    assert "_esbench_record.append(((x,), x))" in mixed.sample  # sampled in a clean run


def test_random_loops_become_fixed_value_tests(task, rows):
    """HumanEval/38's 100 random strings, drawn once in a seeded clean run: every check is a
    value test, the same for every completion."""
    row = rows["HumanEval/38"]
    found = task.plan(row["test"], row["entry_point"], row["code_prompt"])
    assert found.by_value and len(found.checks) == 100 and found.sample is None
    assert all(c.src.startswith("candidate('") and isinstance(c.expected, str)
               for c in found.checks)
    identity = "    return s\n"  # passes only if the tests were dropped
    assert task.reward([identity], **_columns([row])) == [0.0]


def test_every_canonical_solution_passes(task, rows):
    """All 164, judged as a model's completion would be; prints the time taken."""
    every = list(rows.values())
    start = time.monotonic()
    rewards = task.reward([task.gold_completion(**r) for r in every], **_columns(every))
    took = time.monotonic() - start
    print(f"\n164 canonical solutions judged in {took:.1f} s with {task.workers} workers")
    assert rewards == [1.0] * 164, [r["task_id"] for r, x in zip(every, rewards) if x != 1.0]


def test_accepted_completion_forms(task, rows):
    row = rows["HumanEval/2"]  # truncate_number(number: float) -> float
    body = "    return number % 1.0\n"
    full = "def truncate_number(number: float) -> float:\n    return number % 1.0\n"
    forms = [body, f"```python\n{body}```", full, f"Here it is:\n```python\n{full}```\nDone.",
             row["prompt"] + body, f"```\n{full}"]
    assert task.reward(forms, **_columns([row] * len(forms))) == [1.0] * len(forms)
    assert program("def f():\n    '''d'''", "    return 1") == "def f():\n    '''d'''\n    return 1"


def test_wrong_solutions_fail(task, rows):
    r0, r2, r8 = rows["HumanEval/0"], rows["HumanEval/2"], rows["HumanEval/8"]
    wrong = [
        (r0, "    return False\n"),                      # right for some tests only
        (r0, rows["HumanEval/1"]["canonical_solution"]),  # another problem's solution
        (r2, "    return round(number % 1.0, 1)\n"),      # outside the 1e-6 tolerance
        (r8, "    return (sum(numbers), 0)\n"),           # wrong against the clean-run value
        (r0, "    return numbers[0] <\n"),                # syntax error
        (r0, "    raise ValueError\n"),
        (r0, ""),                                        # the prompt's stub returns None
    ]
    completions = [c for _, c in wrong]
    assert task.reward(completions, **_columns([r for r, _ in wrong])) == [0.0] * len(wrong)
    verdict = task.judge_completion("    return (sum(numbers), 0)\n", r8["code_prompt"],
                                    r8["test"], r8["entry_point"])
    assert not verdict.ok and "wrong value" in verdict.reason


def test_extract_answer(task):
    assert task.extract_answer("```python\n    return 1  \n\n```") == "    return 1"
    assert task.extract_answer("   \n") is None


def _write_rows(path: Path, rows: list, gz: bool = False):
    text = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())


def _good_row() -> dict:
    return {"task_id": "X/0", "prompt": "def f(x):\n    '''x + 1'''\n",
            "canonical_solution": "    return x + 1\n",
            "test": "def check(candidate):\n    assert candidate(1) == 2\n", "entry_point": "f"}


@pytest.mark.parametrize("bad, message", [
    ({"entry_point": 5}, r"x\.jsonl:2: field `entry_point` is a number, not a string"),
    ({"test": None}, r"x\.jsonl:2: field `test` is null, not a string"),
    ({"prompt": "MISSING"}, r"x\.jsonl:2: field `prompt` is missing"),
    ({"test": "def check(candidate):\n    assert (\n"}, r"x\.jsonl:2: field `test` is not valid"),
    ({"test": "def test(candidate):\n    pass\n"}, r"x\.jsonl:2: field `test` defines no"),
    ({"entry_point": "f g"}, r"x\.jsonl:2: field `entry_point` \('f g'\) is not a Python name"),
    ({"canonical_solution": "return x +\n"}, r"x\.jsonl:2: fields `prompt` \+ `canonical"),
])
def test_malformed_row_names_file_line_and_field(tmp_path, bad, message):
    row = {k: v for k, v in {**_good_row(), **bad}.items() if v != "MISSING"}
    path = tmp_path / "x.jsonl"
    _write_rows(path, [_good_row(), row])
    with pytest.raises(TaskDataError, match=message) as e:
        HumanEval(path=str(path)).load("test")
    assert "\n" not in str(e.value)


def test_user_files_plain_and_gzip(tmp_path):
    plain, gz = tmp_path / "h.jsonl", tmp_path / "h.jsonl.gz"
    _write_rows(plain, [_good_row()])
    _write_rows(gz, [_good_row(), "[1, 2]"], gz=True)
    task = HumanEval(path=str(plain), workers=1)
    rows = task.load("test")
    assert len(rows) == 1 and task.reward(["    return x + 1\n"], **_columns(list(rows))) == [1.0]
    with pytest.raises(TaskDataError, match=r"h\.jsonl\.gz:2: the row is an array, not an object"):
        HumanEval(path=str(gz)).load("test")
    (tmp_path / "broken.jsonl.gz").write_bytes(b"not gzip at all")
    with pytest.raises(TaskDataError, match="is not valid gzip"):
        HumanEval(path=str(tmp_path / "broken.jsonl.gz")).load("test")
    with pytest.raises(TaskDataError, match="not found"):
        HumanEval(path=str(tmp_path / "none.jsonl")).load("test")
    with pytest.raises(TaskDataError, match="only read with task.source=local"):
        HumanEval(source="hub", path=str(plain))


def test_shipped_file_is_the_released_one():
    import hashlib
    assert hashlib.sha256(DATA.read_bytes()).hexdigest() == \
        "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef"


def test_hub_offline_fails_in_one_line(monkeypatch):
    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'openai/openai_humaneval' on the Hub\n(offline)")
    monkeypatch.setattr(tasks.humaneval.datasets, "load_dataset", offline)
    with pytest.raises(TaskDataError, match="source=local") as e:
        HumanEval(source="hub").load("test")
    assert "\n" not in str(e.value) and "openai/openai_humaneval" in str(e.value)


def test_hub_really_offline():
    """tests/conftest.py sets HF_DATASETS_OFFLINE: the real loader fails, in one line (or, where
    a cache holds the dataset, loads the same 164 problems)."""
    assert os.environ.get("HF_DATASETS_OFFLINE") == "1"
    try:
        rows = HumanEval(source="hub").load("test")
    except TaskDataError as e:
        assert "\n" not in str(e) and "task.source=local" in str(e)
    else:
        assert len(rows) == 164


def _sandbox_dirs() -> set[str]:
    return set(glob.glob(f"/tmp/esbench-sandbox-{os.getpid()}-*"))


@pytest.mark.parametrize("hostile", HOSTILE, ids=[p.stem for p in HOSTILE])
def test_hostile_programs_score_zero(task, rows, hostile):
    """Each program of tests/hostile/ as a completion (module-level code after the prompt's stub,
    the tested function's name in ESBENCH_TEST_FUNC) scores 0 on problems judged by value, and
    the harness survives it with nothing left behind."""
    before = _sandbox_dirs()
    picked = [rows[t] for t in HOSTILE_ROWS]
    completions = [f"\nESBENCH_TEST_FUNC = {r['entry_point']!r}\n{hostile.read_text()}\n"
                   for r in picked]
    assert task.reward(completions, **_columns(picked)) == [0.0] * len(picked), hostile.stem
    left = [p for pattern in LEFTOVER_GLOBS for p in glob.glob(pattern)]
    assert not left, f"{hostile.stem} left {left} on the host"
    assert not (_sandbox_dirs() - before), f"{hostile.stem} left a sandbox dir behind"

