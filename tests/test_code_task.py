"""The sandboxed-code task base (tasks/code_task.py) shared by MBPP and HumanEval, and the judge's
place in tasks/ (tasks/judge/).

    python -m pytest tests/test_code_task.py -q
"""
import doctest
import threading

import tasks.code_task
import tasks.judge.humaneval_plan
from tasks.code_task import SandboxedCodeTask
from tasks.humaneval import HumanEval
from tasks.mbpp import MBPP


def test_doctests():
    assert doctest.testmod(tasks.code_task).failed == 0
    assert doctest.testmod(tasks.judge.humaneval_plan).failed == 0


def test_both_code_tasks_share_the_base():
    for task in (MBPP(), HumanEval()):
        assert isinstance(task, SandboxedCodeTask)
        assert task.extract_answer("```python\nx = 1\n\n```") == "x = 1"
        assert task.judge_stats() == {"programs": 0, "tests_outside": 0, "tests_inside": 0,
                                      "clean_runs": 0, "over_limit": {}}
    assert hasattr(MBPP(), "check_trainable") and not hasattr(HumanEval(), "check_trainable")


def test_once_computes_a_key_once_however_many_threads_ask():
    task = SandboxedCodeTask()
    task._sandboxed(5, 512, 2, 2.0)
    calls, cache = [], {}

    def compute():
        calls.append(1)
        return len(calls)

    threads = [threading.Thread(target=task._once, args=(cache, ("row",), compute))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [1] and cache == {("row",): 1}
