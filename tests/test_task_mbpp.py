"""MBPP task and the sandbox: data, code extraction, reward, and hostile programs.

    python -m pytest tests/test_task_mbpp.py -q
"""
import doctest
import os
import time
from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

import tasks.judge.sandbox
import tasks.mbpp
from tasks.base import TaskDataError
from tasks.judge import mbpp_judge
from tasks.judge.mbpp_runner import Unserialisable, encode
from tasks.judge.sandbox import isolation, run_python
from tasks.mbpp import MBPP, extract_code

CONF = Path(__file__).parents[1] / "conf" / "task" / "mbpp.yaml"


@pytest.fixture(scope="module")
def task():
    return MBPP(n_eval=None)


def _lingering(marker: str) -> list[int]:
    """Live processes whose command line holds `marker` (zombies have an empty one)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            pass
    return found


def _gone(marker: str, wait_s: float = 3) -> bool:
    deadline = time.monotonic() + wait_s
    while _lingering(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _lingering(marker)


def test_doctests():
    assert doctest.testmod(tasks.mbpp).failed == 0
    assert doctest.testmod(tasks.judge.sandbox).failed == 0


def test_config_and_splits(task):
    t = instantiate(OmegaConf.load(CONF))
    assert isinstance(t, MBPP) and t.max_new_tokens > 0
    sizes = {s: task.load(s)["task_id"] for s in ("train", "validation", "test")}
    # 374, 90 and 500 rows less the degenerate ones (tests/test_mbpp_judge_limits.py)
    assert [len(sizes[s]) for s in ("train", "validation", "test")] == [362, 89, 486]
    assert (min(sizes["test"]), max(sizes["test"])) == (11, 510)
    assert (min(sizes["validation"]), max(sizes["validation"])) == (511, 600)
    assert (min(sizes["train"]), max(sizes["train"])) == (601, 974)
    row = task.load("test")[0]
    assert row["test_list"][0] in row["prompt"] and row["test_list"][1] not in row["prompt"]


def test_reference_solutions_score_one(task):
    rows = task.load("test").filter(lambda r: r["task_id"] in (11, 12, 367))  # 367 needs setup
    completions = [f"Sure:\n```python\n{code}\n```\nDone." for code in rows["code"]]
    assert task.reward(completions, test_list=rows["test_list"],
                       test_setup_code=rows["test_setup_code"]) == [1.0, 1.0, 1.0]


def test_garbage_and_wrong_code_score_zero(task):
    tests = [["assert add(1, 2) == 3", "assert add(0, 0) == 0"]] * 4
    completions = ["I cannot do that.", "def add(a, b) return a + b",
                   "def add(a, b):\n    return a - b", "```python\n```"]
    assert task.reward(completions, test_list=tests) == [0.0] * 4


@pytest.mark.parametrize("completion, code", [
    ("```python\nx = 1\n```\ntext\n```python\nx = 2\n```", "x = 1\n"),
    ("```py\nx = 1\n```", "x = 1\n"),
    ("```\nx = 1\n```", "x = 1\n"),
    ("x = 1", "x = 1"),
    ("```python\nx = 1\n", "x = 1\n"),  # unterminated: cut off by max_new_tokens
])
def test_extract_code(completion, code):
    assert extract_code(completion) == code


def test_isolation_is_reported():
    assert "rlimits" in isolation()


def test_ok_needs_a_clean_run_to_the_end():
    assert run_python("print('hi')").ok and run_python("print('hi')").stdout_tail == "hi"
    assert not run_python("import os; os._exit(0)").ok  # skips the tests, exit status 0
    assert not run_python("raise SystemExit(0)").ok
    assert not run_python("assert 1 == 2").ok


@pytest.mark.parametrize("name, code, limit", [
    ("infinite loop", "while True:\n    pass", 1),
    ("sleep past the timeout", "import time\ntime.sleep(60)", 1),
    ("10 GB allocation", "x = bytearray(10 * 2**30)", 5),
    ("growing allocation", "chunks = []\nwhile True:\n    chunks.append(bytearray(2**26))", 5),
    ("closed stdout", "import os\nos.close(1)", 5),
    ("huge output", "while True:\n    print('x' * 10000)", 2),
])
def test_hostile_programs_score_zero(name, code, limit):
    """Speed is measured by `python -m harness.tools.bench_sandbox`, not asserted here."""
    assert not run_python(code, timeout_s=limit).ok, name


def test_fork_bomb_is_contained_and_cleaned_up():
    if os.geteuid() == 0 and "uid-drop" not in isolation():
        pytest.skip("root without a dropped uid ignores RLIMIT_NPROC: a real fork bomb")
    marker = f"forkbomb-{os.getpid()}-{time.time_ns()}"
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    code = f"import os, sys\nos.execv(sys.executable, [sys.executable, '-c', {bomb!r}, {marker!r}])"
    assert not run_python(code, timeout_s=1).ok
    assert _gone(marker)


def test_detached_children_are_killed():
    marker = "987.654321"
    code = ("import os\nfor _ in range(3):\n    if os.fork() == 0:\n        os.setsid()\n"
            f"        os.execv('/bin/sleep', ['sleep', {marker!r}])\nprint('parent exits')")
    run_python(code, timeout_s=2)
    escaper = f"import os, time\nos.setsid()\nos.execv('/bin/sleep', ['sleep', '{marker}1'])"
    assert run_python(escaper, timeout_s=1).timed_out
    assert _gone(marker)


def test_rm_rf_home_leaves_the_real_home(tmp_path, monkeypatch):
    home = tmp_path / "home"  # stands in for the harness's HOME; the real one is never at risk
    home.mkdir()
    sentinel = home / "sentinel.txt"
    sentinel.write_text("keep me")
    monkeypatch.setenv("HOME", str(home))
    code = "import os\nos.system('rm -rf ~ 2>/dev/null')\nprint(os.path.expanduser('~'))"
    if "uid-drop" in isolation():  # another uid cannot delete our files even by their path
        code += f"\nimport shutil\nshutil.rmtree({str(home)!r}, ignore_errors=True)"
    result = run_python(code)
    assert sentinel.read_text() == "keep me"
    assert result.stdout_tail.strip() != str(home)  # the sandbox's HOME is its own temp dir
    assert not Path(result.stdout_tail.strip()).exists()  # and is deleted afterwards


def test_no_inherited_environment(monkeypatch):
    monkeypatch.setenv("ESBENCH_FAKE_SECRET", "hunter2")
    result = run_python("import os\nprint(sorted(os.environ))\nprint(os.environ.get('SECRET'))")
    assert result.ok and "hunter2" not in result.stdout_tail
    assert "ESBENCH_FAKE_SECRET" not in result.stdout_tail


def test_no_network():
    if "net-ns" not in isolation():
        pytest.skip(f"no network namespace on this host (isolation: {isolation()})")
    code = ("import socket\nprint([n.split(':')[0].strip() for n in open('/proc/net/dev')][2:])\n"
            "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=1)\n"
            "    print('connected')\nexcept OSError:\n    print('blocked')")
    result = run_python(code)
    assert result.ok and result.stdout_tail.splitlines() == ["['lo']", "blocked"]


def test_uid_only_fallback_still_contains_programs(monkeypatch):
    """The fallback for root hosts without `unshare`: a dropped uid and rlimits, no namespaces."""
    if os.geteuid() != 0:
        pytest.skip("only root can drop to another uid")
    sandbox = tasks.judge.sandbox
    fallback = sandbox._probe(sandbox._Mode((), sandbox._mode().python, drop_uid=True))
    if fallback is None or "uid-drop" not in fallback.labels:
        pytest.skip("this host cannot run the interpreter as another uid")
    monkeypatch.setattr(tasks.judge.sandbox, "_mode", lambda: fallback)
    assert run_python("import os\nprint(os.getuid() != 0)").stdout_tail == "True"
    assert not run_python("import os\nos._exit(0)").ok
    marker = "876.543219"
    code = ("import os\nfor _ in range(3):\n    if os.fork() == 0:\n        os.setsid()\n"
            f"        os.execv('/bin/sleep', ['sleep', {marker!r}])\nprint('parent exits')")
    # a generous wall-clock limit: the point is the children's end, and a loaded CI host took > 2 s to start
    assert run_python(code, timeout_s=30).ok
    assert _gone(marker)


def test_hostile_completions_through_the_reward(task):
    hostile = ["```python\nwhile True: pass\n```", "import os\nos._exit(0)",
               "import os\nos.close(1)\ndef add(a, b):\n    return a + b"]
    fast = MBPP(timeout_s=1)
    assert fast.reward(hostile, test_list=[["assert add(1, 2) == 3"]] * 3) == [0.0] * 3


def test_malformed_user_file(tmp_path):
    bad = tmp_path / "mbpp.jsonl"
    bad.write_text('{"task_id": 11, "text": "t", "test_list": ["assert True"]}\n{"task_id": 12}\n')
    with pytest.raises(TaskDataError, match=r"mbpp\.jsonl: line 2"):
        MBPP(path=str(bad)).load("test")


@pytest.mark.parametrize("test, outside", [
    ("assert f(1) == 2", True), ("assert 2 == f(1)", True), ("assert f(1) != [1, (2, 3)]", True),
    ("assert set(f(1)) == set([1, 2])", True), ("assert f(1) is None", True),
    ("assert math.isclose(f(1), 2.5, rel_tol=0.001)", True), ("assert f(1)", True),
    ("assert not f(1)", True), ("assert f(1) == g(2)", False), ("assert f(1) is [1]", False),
    ("assert f(1) == 1 or f(1) == 2", False), ("assert f(1).startswith('a')", False),
    ("x = f(1)\nassert x == 2", False), ("assert f(1) == 2 == 2", False),
])
def test_judge_plan_splits_what_it_can(test, outside):
    check = mbpp_judge.plan(test)
    assert check.outside == outside
    if outside:
        assert "2.5" not in check.src and "[1, 2]" not in check.item()["src"]


def _judge(test: str, value) -> bool:
    return mbpp_judge.plan(test).accepts({"i": 0, "value": encode(value)})


def test_judge_compares_plain_values_with_the_tests_own_rules():
    assert _judge("assert f(1) == (1, [2])", (1, [2])) and not _judge("assert f(1) == (1, [2])", [1, [2]])
    assert _judge("assert set(f(1)) == set([2, 1])", {1, 2})
    assert _judge("assert math.isclose(f(1), 2.5, rel_tol=0.01)", 2.51)
    assert not _judge("assert math.isclose(f(1), 2.5, rel_tol=0.001)", 2.51)
    assert _judge("assert f(1) == 2", 2.0) and not _judge("assert f(1) == 2", "2")
    assert _judge("assert f(1) == {'a': 1}", __import__("collections").Counter(a=1))
    assert mbpp_judge.decode(encode(-3 ** 10000)) == -3 ** 10000  # beyond int's str-digit limit
    assert _judge("assert f(1) is None", None) and not _judge("assert f(1) is None", 0)


def test_judge_sees_through_lying_objects():
    class AlwaysEqual(int):
        def __eq__(self, other):
            return True
        __hash__ = int.__hash__
    assert not _judge("assert f(1) == 5", AlwaysEqual(4)) and _judge("assert f(1) == 5", AlwaysEqual(5))
    with pytest.raises(Unserialisable):
        encode(object())
    assert not mbpp_judge.plan("assert f(1) == 5").accepts({"i": 0, "error": "unserialisable"})


@pytest.mark.parametrize("tagged", [["k", 1], ["i", "12 "], ["l", "x"], ["zz", []], ["d", [[1]]],
                                    ["f", "1" * 100], "i", ["S", [["l", []]]]])
def test_decode_rejects_malformed_values(tagged):
    with pytest.raises((ValueError, TypeError)):
        mbpp_judge.decode(tagged)


def test_verdict_needs_one_record_per_test_in_order():
    checks = [mbpp_judge.plan("assert f(1) == 1"), mbpp_judge.plan("assert f(2) == 2")]
    good = ({"i": 0, "value": ["i", "1"]}, {"i": 1, "value": ["i", "2"]})
    assert mbpp_judge.verdict(checks, good, True).passed == (True, True)
    assert mbpp_judge.verdict(checks, good, False).passed == (False, False)
    assert mbpp_judge.verdict(checks, good[:1], True).passed == (False, False)
    assert mbpp_judge.verdict(checks, good[::-1], True).passed == (False, False)
    wrong = mbpp_judge.verdict(checks, (good[0], {"i": 1, "value": ["i", "3"]}), True)
    assert wrong.passed == (True, False) and wrong.reason == "test 1: wrong value" and not wrong.ok


def test_printing_cannot_pass_a_test(task):
    fake = "print('{\"i\": 0, \"value\": [\"i\", \"3\"]}')\nprint('done')"
    assert task.reward([fake], test_list=[["assert add(1, 2) == 3"]]) == [0.0]


def test_judge_counts_and_run_info():
    t = MBPP()
    t.reward(["def add(a, b):\n    return a + b"],
             test_list=[["assert add(1, 2) == 3", "assert add(1, 2) == sum([1, 2])",
                         "assert add(1, 2) == add(2, 1)"]])
    # sum([1, 2]) is computed in a clean sandbox run; add(2, 1) needs the candidate: inside
    assert t.judge_stats() == {"programs": 1, "tests_outside": 2, "tests_inside": 1,
                               "clean_runs": 1, "over_limit": {}}
    info = t.run_info()
    assert info["judge"] == t.judge_stats() and info["sandbox_layers"]["rlimits"]
    assert info["notes"] and all(isinstance(n, str) for n in info["notes"])


def test_check_trainable_names_missing_layers(monkeypatch):
    weak = {**dict.fromkeys(tasks.judge.sandbox.layers(), True), "hidden_fs": False, "no_new_privs": False}
    monkeypatch.setattr(tasks.judge.sandbox, "layers", lambda: weak)
    with pytest.raises(TaskDataError, match="hidden_fs, no_new_privs.*allow_weak_sandbox=true"):
        MBPP().check_trainable()
    MBPP(allow_weak_sandbox=True).check_trainable()


def test_sandbox_hides_the_project_and_data():
    if not tasks.judge.sandbox.layers()["hidden_fs"]:
        pytest.skip(f"no minimal root on this host (isolation: {isolation()})")
    data = str(Path(tasks.mbpp.__file__).parent / "data" / "mbpp" / "mbpp.jsonl")
    code = (f"import os\nprint(os.path.exists({data!r}), os.path.exists({str(CONF)!r}), "
            "sorted(os.listdir('/tmp')), sorted(os.listdir('/dev/shm')))")
    assert run_python(code).stdout_tail == "False False [] []"
