"""The MBPP judge's own limits, expected values computed without the candidate, degenerate rows.

A candidate's value is rebuilt in the harness, so the judge bounds that work itself
(tasks/judge/mbpp_judge.Limits); a non-literal expected side (task 596's `sys.getsizeof(...)`) is
computed in a clean sandbox run, never judged next to the candidate; rows that a trivial answer
passes (tasks/judge/mbpp_trivial.py) are left out of every split.

    python -m pytest tests/test_mbpp_judge_limits.py -q
"""
import ast
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tasks.base import TaskDataError
from tasks.judge import mbpp_judge, mbpp_trivial
from tasks.judge.mbpp_runner import MAX_DEPTH, MAX_INT_HEX_DIGITS, MAX_NODES, encode
from tasks.mbpp import MBPP

HOSTILE = Path(__file__).parent / "hostile"
DATA = Path(__file__).parents[1] / "tasks" / "data" / "mbpp" / "mbpp.jsonl"
P = 2**61 - 1  # hash(k * P) == 0 for every plain int k
# one constant passes: test 37, 203, 339, train 667, 674, 816, 899; `assert f(x) == a, b`: 313, 362,
# 436; the rest an argument, a fixed index or slice of one, or its negation
DEGENERATE = {"test": [37, 45, 203, 225, 313, 339, 351, 362, 404, 418, 436, 443, 457, 487],
              "validation": [582],
              "train": [658, 667, 674, 698, 713, 744, 816, 847, 890, 899, 904, 951]}
MESSAGE_TESTS = [313, 362, 436]


@pytest.fixture(scope="module")
def task():
    return MBPP(n_eval=None)


def _shipped(task_id: int) -> dict:
    return next(r for r in map(json.loads, DATA.open()) if r["task_id"] == task_id)


def _colliding(n: int) -> list:
    return ["S", [["i", format(k * P, "x")] for k in range(1, n + 1)]]


def _over(tagged, kind: str, limits=mbpp_judge.LIMITS, deadline=None):
    with pytest.raises(mbpp_judge.OverLimit) as caught:
        mbpp_judge.decode(tagged, limits, deadline)
    assert caught.value.kind == kind


# ---- each limit, just inside and just past it ----

def test_items_limit():
    small = mbpp_judge.Limits(items=101)
    assert mbpp_judge.decode(["l", [["i", "1"]] * 100], small) == [1] * 100  # 101 nodes
    _over(["l", [["i", "1"]] * 101], "items", small)
    _over(["l", [["l", [["i", "1"]] * 60]] * 2], "items", small)  # counted across containers


def test_depth_limit():
    def nested(depth):
        value = ["i", "1"]
        for _ in range(depth):
            value = ["l", [value]]
        return value
    assert mbpp_judge.decode(nested(MAX_DEPTH)) is not None
    _over(nested(MAX_DEPTH + 1), "depth")


def test_int_digits_limit():
    assert mbpp_judge.decode(["i", "f" * MAX_INT_HEX_DIGITS]) == 16 ** MAX_INT_HEX_DIGITS - 1
    _over(["i", "-" + "f" * (MAX_INT_HEX_DIGITS + 1)], "int_digits")


def test_chars_limit():
    small = mbpp_judge.Limits(chars=10)
    assert mbpp_judge.decode(["l", [["s", "abcde"], ["y", "0a0b0c0d0e"[:4]]]], small) == ["abcde", b"\n\x0b"]
    _over(["l", [["s", "abcdef"], ["s", "abcde"]]], "chars", small)


@pytest.mark.parametrize("tag", ["S", "F", "d"])
def test_same_hash_limit_before_building(tag):
    limit = mbpp_judge.LIMITS.same_hash
    def value(n):
        items = _colliding(n)[1]
        return [tag, [[k, ["k", None]] for k in items] if tag == "d" else items]
    assert len(mbpp_judge.decode(value(limit))) == limit
    _over(value(limit + 1), "same_hash")
    within_items = value(MAX_NODES // 2 - 1)
    start = time.perf_counter()
    _over(within_items, "same_hash")  # refused before the quadratic build
    assert time.perf_counter() - start < 2


def test_same_hash_counts_nested_collisions():
    """Tuples of colliding ints collide as tuples; equal hashes are counted, not types."""
    tuples = ["S", [["t", [["i", format(k * P, "x")]]] for k in range(1, 40)]]
    _over(tuples, "same_hash")
    floats_and_ints = ["S", [["i", "1"], ["f", "1.5"], ["s", "1"]]]
    assert len(mbpp_judge.decode(floats_and_ints)) == 3


def test_time_limit_is_a_deadline_not_a_signal():
    _over(["l", [["i", "1"]] * 5000], "time", deadline=time.monotonic() - 1)
    with ThreadPoolExecutor(1) as pool:  # no signal.alarm: the same on a worker thread
        future = pool.submit(mbpp_judge.decode, ["l", [["i", "1"]] * 5000], mbpp_judge.LIMITS,
                             time.monotonic() - 1)
        with pytest.raises(mbpp_judge.OverLimit, match=r"judge limit \(time\)"):
            future.result(timeout=5)


def test_runner_sends_no_more_than_the_judge_takes():
    assert (MAX_NODES, MAX_DEPTH, MAX_INT_HEX_DIGITS) == (
        mbpp_judge.LIMITS.items, mbpp_judge.LIMITS.depth, mbpp_judge.LIMITS.int_hex_digits)
    assert len(encode(list(range(MAX_NODES - 1)))[1]) == MAX_NODES - 1
    for too_much in (list(range(MAX_NODES)), 16 ** MAX_INT_HEX_DIGITS):
        with pytest.raises(Exception, match="too large"):
            encode(too_much)


def test_verdict_reports_the_limit_and_stops():
    checks = [mbpp_judge.plan("assert f(1) == {1}"), mbpp_judge.plan("assert f(2) == 2")]
    v = mbpp_judge.verdict(checks, ({"i": 0, "value": _colliding(100)}, {"i": 1, "value": ["i", "2"]}), True)
    assert v.passed == (False, False) and v.limit == "same_hash" and "share a hash" in v.reason


# ---- through the task: hostile programs ----

def _hostile(name: str, function: str, n: int | None = None) -> str:
    source = (HOSTILE / name).read_text()
    if n is not None:
        source = source.replace("N = 40_000", f"N = {n}")
    return f"```python\nESBENCH_TEST_FUNC = {function!r}\n{source}\n```"


@pytest.mark.parametrize("n", [40_000, 100_000])
def test_colliding_hash_set_scores_zero_within_seconds(n):
    """40k items reach the judge (before: over a minute per completion); 100k are refused by the
    runner's own limit already, in the sandbox."""
    task = MBPP(n_eval=None, timeout_s=20, memory_mb=1024)
    row = _shipped(11)
    start = time.perf_counter()
    verdict = task.judge_completion(_hostile("colliding_hash_set.py", "remove_Occ", n),
                                    row["test_list"], row["test_setup_code"])
    assert not verdict.ok and time.perf_counter() - start < 15
    if n < MAX_NODES:
        assert verdict.limit == "same_hash" and task.judge_stats()["over_limit"] == {"same_hash": 1}
    else:
        assert "too large" in verdict.reason and verdict.limit is None


def test_forged_oversized_value_stops_at_the_judge():
    """A program that finds the runner's emit and sends a value past every runner limit."""
    forge = ("import sys\nframe = sys._getframe()\nwhile 'emit' not in frame.f_locals:\n"
             "    frame = frame.f_back\nbig = ['l', [['i', '1']] * 150000]\n"
             "for i in range(len(frame.f_locals['args']['items'])):\n"
             "    frame.f_locals['emit']({'i': i, 'value': big})\n"
             "frame.f_locals['emit']({'done': True})\nimport os\nos._exit(0)\n")
    task = MBPP(n_eval=None, timeout_s=20)
    row = _shipped(11)
    start = time.perf_counter()
    verdict = task.judge_completion(forge, row["test_list"], row["test_setup_code"])
    assert verdict.limit == "items" and not verdict.ok and time.perf_counter() - start < 15


def test_verdict_says_why_a_program_failed():
    t = MBPP()
    tests = ["assert add(1, 2) == 3", "assert add(2, 2) == 4"]
    assert t.judge_completion("def add(a, b):\n    return a - b", tests).reason == "test 0: wrong value"
    assert "NameError" in t.judge_completion("add = undefined_name", tests).reason
    assert "ZeroDivisionError" in t.judge_completion("def add(a, b):\n    return 1 / 0", tests).reason
    assert "timed out" in MBPP(timeout_s=1).judge_completion("while True:\n    pass", tests).reason


def test_judge_s_is_the_configured_wall_clock():
    row = _shipped(11)
    gold = f"```python\n{row['code']}\n```"
    assert MBPP(judge_s=30).judge_completion(gold, row["test_list"]).ok
    late = MBPP(judge_s=1e-9).judge_completion(gold, row["test_list"])
    assert not late.ok and late.limit == "time"


# ---- expected values computed without the candidate ----

def test_task_596_is_judged_outside_and_the_forgery_scores_zero(task):
    row = _shipped(596)
    assert all(c.outside and isinstance(c.expected, int)
               for c in task.checks(row["test_list"], row["test_setup_code"]))
    forgery = f"```python\n{(HOSTILE / 'frame_forgery.py').read_text()}\n```"
    gold = f"```python\n{row['code']}\n```"
    fresh = MBPP(n_eval=None)
    assert fresh.reward([forgery, gold], test_list=[row["test_list"]] * 2) == [0.0, 1.0]
    stats = fresh.judge_stats()
    assert stats["tests_inside"] == 0 and stats["tests_outside"] == 6 and stats["clean_runs"] == 1


def test_no_shipped_test_is_judged_inside(task):
    assert task.survey()["tests_inside"] == {"test": 0, "validation": 0, "train": 0}
    assert not any("inside" in note for note in task.run_info()["notes"])


def test_expected_side_is_computed_without_the_candidate():
    """The candidate cannot change what its value is compared with (here by patching sys)."""
    tests = ["assert f(()) == sys.getsizeof(())", "assert f([1]) == sys.getsizeof([1])"]
    cheat = "import sys\nsys.getsizeof = lambda x: 7\ndef f(x):\n    return 7"
    honest = "import sys\ndef f(x):\n    return sys.getsizeof(x)"
    assert MBPP().reward([cheat, honest], test_list=[tests] * 2) == [0.0, 1.0]


def test_expected_side_may_use_setup_names_and_falls_back_inside_without_them():
    t = MBPP()
    setup = "data = [3, 1, 2]"
    tests = ["assert f(data) == sorted(data)", "assert f([2, 1]) == g([1, 2])"]
    checks = t.checks(tests, setup)
    assert checks[0].outside and checks[0].expected == [1, 2, 3]
    assert not checks[1].outside  # g is the candidate's: nothing clean to compute
    good = "def f(x):\n    return sorted(x)\ndef g(x):\n    return x"
    assert t.reward([good, "def f(x):\n    return x\ng = f"], test_list=[tests] * 2,
                    test_setup_code=[setup] * 2) == [1.0, 0.0]


def test_a_row_whose_expected_side_cannot_finish_is_a_data_error():
    # sum() over an endless iterator never ends and never allocates: the timeout decides (a growing list
    # raced the memory limit, and on an idle machine the MemoryError won: a value, not a timeout)
    with pytest.raises(TaskDataError, match=r"clean sandbox run failed 2 times \(timed out\).*task.timeout_s"):
        MBPP(timeout_s=1).checks(["assert f(1) == sum(iter(int, 1))"])


def test_an_expected_side_that_raises_is_a_data_error_not_an_inside_test():
    """Before, it fell back to running the assert in the sandbox, where a forged result passes."""
    with pytest.raises(TaskDataError, match=r"expected side .sum\(\[1, .a.\]\). cannot be "
                                            r"computed \(TypeError: .*fix the row's test"):
        MBPP().checks(["assert f(1) == sum([1, 'a'])"])
    unsendable = MBPP().checks(["assert f(1) == decimal.Decimal('1.5')"])  # a value, just not plain
    assert not unsendable[0].outside


def test_a_shipped_row_whose_expected_side_raises_names_file_line_and_task(tmp_path):
    path = tmp_path / "mbpp.jsonl"
    rows = [{"task_id": 11, "text": "t", "test_list": ["assert f(1) == 1"]},
            {"task_id": 12, "text": "t", "test_list": ["assert f(1) == 1 // 0"]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(TaskDataError, match=r"mbpp\.jsonl: line 2 \(task_id 12\): .*"
                                            r"ZeroDivisionError") as e:
        MBPP(path=str(path)).load("test")
    assert "\n" not in str(e.value)


# ---- degenerate rows ----

def test_degenerate_rows_are_found_on_the_shipped_data(task):
    assert task.survey()["degenerate"] == DEGENERATE
    info = task.run_info()
    assert info["degenerate_rows"] == DEGENERATE
    answers = info["degenerate_answers"]
    assert answers["45"] == "return a[0][0]" and answers["487"] == "return a[0][::-1]"
    assert answers["904"] == "return not a[0]" and answers["203"] == "return 2"
    assert all("only a is checked" in answers[str(i)] for i in MESSAGE_TESTS)
    notes = info["notes"]
    assert any(n.startswith("14 of 500 test rows are degenerate") and "487 (return a[0][::-1])" in n
               and n.endswith("excluded from the score") for n in notes)
    assert any(n.startswith("1 of 90 validation rows") and "582 (return not a[0])" in n for n in notes)
    assert any(n.startswith("12 of 374 train rows") and n.endswith("excluded from training")
               for n in notes)
    for split, ids in DEGENERATE.items():
        assert not set(ids) & set(task.load(split)["task_id"])


def _trivial(row: dict, label: str) -> str:
    """The trivial answer `label` ("return a[0][0]") as a completion for the row's function."""
    call = next(n for n in ast.walk(ast.parse(row["test_list"][0])) if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Name) and n.func.id not in dir(__builtins__))
    return f"```python\ndef {call.func.id}(*a, **k):\n    {label}\n```"


def test_each_trivial_answer_found_scores_one_in_the_sandbox(task):
    """What the harness-side check claims, run for real: every degenerate row (but the three whose
    tests check less than they show) is passed by its trivial answer; the reference too."""
    answers = task.run_info()["degenerate_answers"]
    ids = [i for ids in DEGENERATE.values() for i in ids if i not in MESSAGE_TESTS]
    rows = [_shipped(i) for i in ids]
    completions = [_trivial(r, answers[str(r["task_id"])]) for r in rows]
    assert task.reward(completions, test_list=[r["test_list"] for r in rows],
                       test_setup_code=[r["test_setup_code"] for r in rows]) == [1.0] * len(rows)


def test_tests_written_with_a_message_check_only_the_first_value(task):
    """`assert neg_nos([-1,4,5,-6]) == -1,-6` passes for -1 alone and fails the negatives the test
    shows, as the reference returns only the first: why 313, 362 and 436 are out, not fixed."""
    row = _shipped(436)
    shown = "```python\ndef neg_nos(l):\n    return tuple(x for x in l if x < 0)\n```"
    assert task.reward([shown, f"```python\n{row['code']}\n```"],
                       test_list=[row["test_list"]] * 2) == [0.0, 1.0]
    assert "436" in task.run_info()["degenerate_answers"]


@pytest.mark.parametrize("tests, answer", [
    (["assert f(1, 2) == 1", "assert f(-5, -4) == -5"], "return a[0]"),
    (["assert f([1, 2], 3) == 3", "assert f([], 4) == 4"], "return a[1]"),
    (["assert f([3, 2]) == [2, 3]", "assert f('ab') == 'ba'"], "return a[0][::-1]"),
    (["assert f([0, 5]) == False", "assert f([7]) == False", "assert f([]) == True"], "return not a[0]"),
    (["assert f((1, 'x')) == 'x'", "assert f((2, 'y')) == 'y'"], "return a[0][1]"),
    (["assert set(f([1, 2])) == {1, 2}", "assert set(f([3])) == {3}"], "return a[0]"),
    (["assert f(1, 2) == 3", "assert f(2, 2) == 4"], None),
    (["assert f([1, 2]) == [1, 2]", "assert f([3, 1]) == [1, 3]"], None),  # sorting: no fixed piece
    (["assert f(data) == 3", "assert f([4]) == 4"], None),  # a setup name: only constants count
    (["assert f(data) == 3", "assert f([4]) == 3"], "return 3"),
])
def test_trivial_answers_on_planned_checks(tests, answer):
    checks = [mbpp_judge.plan(t, frozenset({"data"})) for t in tests]
    assert mbpp_trivial.trivial_answer(checks) == answer


def _constant(row: dict, checks) -> str:
    """`def f(*a, **k): return <the value the prompt's test shows>`."""
    call = next(n for n in ast.walk(ast.parse(row["test_list"][0])) if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Name) and n.func.id not in dir(__builtins__))
    return f"```python\ndef {call.func.id}(*a, **k):\n    return {checks[0].expected!r}\n```"


def _constants_on(task, rows) -> list[float]:
    completions = [_constant(r, task.checks(r["test_list"], r["test_setup_code"])) for r in rows]
    return task.reward(completions, test_list=[r["test_list"] for r in rows],
                       test_setup_code=[r["test_setup_code"] for r in rows])


def test_a_constant_function_earns_nothing_on_training_data(task):
    """On the rows degenerate by a constant it scores 1: left out of training, it earns nothing."""
    answers = task.run_info()["degenerate_answers"]
    excluded = [_shipped(i) for i in DEGENERATE["train"]
                if not answers[str(i)].startswith(("return a", "return not a"))]
    assert [r["task_id"] for r in excluded] == [667, 674, 816, 899]
    assert _constants_on(task, excluded) == [1.0] * len(excluded)
    train = list(task.load("train"))
    assert _constants_on(task, train[::25]) == [0.0] * len(train[::25])


@pytest.mark.slow
def test_a_constant_function_earns_nothing_on_any_training_row(task):
    train = list(task.load("train"))
    rewards = _constants_on(task, train)
    assert sum(rewards) == 0, [r["task_id"] for r, x in zip(train, rewards) if x]


def test_degenerate_rows_of_a_user_file(tmp_path):
    rows = [{"task_id": 11, "text": "t", "test_list": ["assert f(1) == 2", "assert f(2) == 2"]},
            {"task_id": 12, "text": "t", "test_list": ["assert f(1) == 1", "assert f(2) == 2"]},
            {"task_id": 13, "text": "t", "test_list": ["assert f(1)", "assert f(2) == True"]},
            {"task_id": 14, "text": "t", "test_list": ["assert f(1) == 2"]},
            {"task_id": 15, "text": "t", "test_list": ["assert f(1) == 2", "assert f(2) != 2"]}]
    path = tmp_path / "mbpp.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = MBPP(path=str(path))
    assert task.survey()["degenerate"]["test"] == [11, 12, 13, 14]
    assert task.load("test")["task_id"] == [15]
    assert task.run_info()["notes"] == [
        "4 of 5 test rows are degenerate (a trivial answer passes every test, or a test checks "
        "less than it shows): 11 (return 2), 12 (return a[0]), 13 (return True), 14 (return 2); "
        "excluded from the score"]
