"""MATH-500 task: data, boxed extraction, math-verify scoring, hostile answers, threads, budgets.

    python -m pytest tests/test_task_math500.py -q
"""
import doctest
import json
import re
import threading
import time
from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

import tasks.answers
import tasks.judge.bounded
import tasks.judge.budget
import tasks.judge.expansion
import tasks.math500
from tasks.base import TaskDataError
from tasks.judge import bounded
from tasks.math500 import MATH500, last_boxed

CONF = Path(__file__).parents[1] / "conf" / "task" / "math500.yaml"

HOSTILE = [
    r"\boxed{2^{2^{2^{2^{100}}}}}",  # power tower: sympy would never finish
    r"\boxed{9^9^9^9}",
    r"\boxed{9^{123456789}}",
    r"\boxed{100!!!!!}",
    r"\boxed{" + "1+" * 5000 + "1}",  # huge expression
    r"\boxed{" + "(" * 3000 + "}",
    r"\boxed{\frac{\frac{\frac{}{}}{}}",  # malformed LaTeX
    r"\boxed{5",  # cut off mid-answer
    r"}}}}{{{\boxed",
    r"$\sqrt{" * 300 + "$",
    r"\boxed{\begin{pmatrix} 1 \\ 2 \end{pmatrix",
    "\\boxed{\x00\udcff}",
]
# Round two: each passed the old guard; on a worker thread, where math-verify's SIGALRM timeouts
# are off, the first four never returned, and the nesting took 12 s (tasks/judge/bounded.py).
EXPLODING = [
    r"\boxed{(10^{9999})^{9999}}",
    r"\boxed{((10^{999})^{999})^{999}}",
    r"\boxed{10^{9999\cdot 9999}}",
    r"\boxed{(10^{9})!}",
    r"\boxed{" + "(" * 450 + "1" + ")" * 450 + "}",
]
DEADLINE_S = 30


def scored_within(score, completions, deadline_s=DEADLINE_S, thread=True):
    """score(c) for each completion, on a fresh worker thread (or this one), within deadline_s."""
    out = []
    start = time.monotonic()
    if not thread:
        out = [score(c) for c in completions]
    else:  # a daemon thread: a hang fails this test instead of hanging the session
        worker = threading.Thread(target=lambda: out.extend(score(c) for c in completions),
                                  daemon=True)
        worker.start()
        worker.join(deadline_s)
        assert not worker.is_alive(), f"scoring on a worker thread ran past {deadline_s} s"
    assert time.monotonic() - start < deadline_s
    return out


@pytest.fixture(scope="module")
def task():
    return MATH500()


def test_doctests():
    for module in (tasks.math500, tasks.judge.bounded, tasks.judge.expansion, tasks.answers,
                   tasks.judge.budget):
        assert doctest.testmod(module).failed == 0


def test_config_and_splits():
    t = instantiate(OmegaConf.load(CONF))
    assert isinstance(t, MATH500) and t.max_new_tokens > 0
    test = t.load("test")
    assert len(test) == 500 and {"prompt", "answer"} <= set(test.column_names)
    assert r"\boxed{}" in test[0]["prompt"]
    for split in ("train", "validation"):
        with pytest.raises(TaskDataError, match="evaluation-only"):
            t.load(split)


def test_reference_solutions_score_one(task):
    rows = task.load("test").select(range(40))
    assert task.reward(rows["solution"], answer=rows["answer"]) == [1.0] * 40


@pytest.mark.parametrize("gold, completion", [
    (r"\frac{1}{2}", r"so the answer is $\boxed{0.5}$"),
    (r"\left( 3, \frac{\pi}{2} \right)", r"\boxed{(3, \pi/2)}"),
    ("10", r"first \boxed{7}, no wait: \boxed{10}"),  # the last box counts
    ("5", "The final answer is 5."),  # math-verify's other anchors when there is no box
])
def test_equivalent_answers_score_one(task, gold, completion):
    assert task.is_correct(completion, answer=gold)


def test_garbage_scores_zero(task):
    completions = ["I don't know", r"\boxed{7}", "", r"\boxed{}"]
    assert task.reward(completions, answer=["10"] * 4) == [0.0] * 4


@pytest.mark.parametrize("completion", HOSTILE)
def test_hostile_answers_do_not_crash_or_hang(task, completion):
    assert task.is_correct(completion, answer="5") is False
    task.extract_answer(completion)


def test_worker_threads_score_like_the_main_thread(task):
    completions = [r"\boxed{\frac{1}{2}}", r"\boxed{0.5}", r"\boxed{3}"] + HOSTILE[:6] + EXPLODING
    threaded = scored_within(lambda c: task.is_correct(c, answer="0.5"), completions)
    main = scored_within(lambda c: task.is_correct(c, answer="0.5"), completions, thread=False)
    assert threaded == main == [True, True, False] + [False] * 11


@pytest.mark.parametrize("answer", [a[len("\\boxed{"):-1] for a in EXPLODING] + [
    r"2^{2^{100}}", "9^9^9", r"9^{9}^{9}", r"9^{99999}", "99999!", "100!!", r"(5!)!", r"10^{9}!",
    r"{10^{9}}^{9}", r"\left(10^{99}\right)^{99}", "(" * 9 + "1" + ")" * 9, "x" * 1001])
def test_the_guard_refuses_exploding_shapes(answer):
    assert bounded.risky(answer)


@pytest.mark.parametrize("answer", [
    r"\frac{\sqrt{21}}{5}", r"2^{2005}", r"(x^2+1)^2", "9999!", r"\frac{10!}{5!}", r"90^\circ",
    r"11,\! 111,\! 111,\! 100", r"\left( 3, \frac{\pi}{2} \right)", r"e^{i\pi}", r"\{1,2\}",
    "(" * 8 + "1" + ")" * 8, r"3\sqrt{2}", r"\$32,\!348", "Wow!! So $x^2$ is 4!"])
def test_the_guard_passes_ordinary_answers(answer):
    assert not bounded.blocked(answer)  # neither guard: risky, nor the expansion bound


def test_the_guard_passes_every_shipped_answer(task):
    rows = task.load("test")
    boxes = [last_boxed(s) for s in rows["solution"]]
    assert [a for a in list(rows["answer"]) + boxes if a is not None and bounded.blocked(a)] == []


def test_an_answer_past_the_guard_is_killed_at_the_limit(task, monkeypatch):
    """The backstop: with the expansion guard off, a variable dodges `risky`, yet sympy still
    builds 10^(9999*9999)."""
    slow = r"\boxed{(10^{9999}x)^{9999}}"
    assert not bounded.risky(slow[len("\\boxed{"):-1])
    assert tasks.judge.expansion.costly(slow[len("\\boxed{"):-1])  # refused by the guard that is off
    monkeypatch.setattr(tasks.judge.bounded, "costly", lambda text: None)
    tasks.judge.bounded._POOL.close()  # one worker (earlier reward calls started up to four)
    task.is_correct(r"\boxed{1}", answer="1")  # a worker is up: the limit below is all it gets
    monkeypatch.setattr(tasks.judge.bounded, "LIMIT_S", 1.0)
    before = task.run_info()["math_verify"]
    start = time.monotonic()
    assert scored_within(lambda c: task.is_correct(c, answer="5"), [slow]) == [False]
    assert time.monotonic() - start < 10
    after = task.run_info()["math_verify"]  # stopped by its worker's CPU timer, or killed
    assert after["timeouts"] + after["over_budget"] == before["timeouts"] + before["over_budget"] + 1
    assert task.is_correct(r"\boxed{5}", answer="5")  # the same or a fresh worker serves the next
    assert task.run_info()["math_verify"]["worker_starts"] <= after["worker_starts"] + 1


def test_concurrent_callers_each_get_their_own_answer(task):
    """Four threads at once (up to MAX_WORKERS workers): no reply goes to the wrong caller."""
    rows = task.load("test").select(range(30))
    pairs = [(s, a) for s, a in zip(rows["solution"], rows["answer"])]
    pairs += [(s, a) for s, a in zip(rows["solution"], rows["answer"][1:])]  # mostly wrong
    expected = [task.is_correct(c, answer=a) for c, a in pairs]
    assert 30 <= sum(expected) < len(pairs)
    timeouts, results = task.run_info()["math_verify"]["timeouts"], {}

    def score(k):
        results[k] = [task.is_correct(c, answer=a) for c, a in pairs[k::4]]

    threads = [threading.Thread(target=score, args=(k,), daemon=True) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE_S)
    assert sorted(results) == [0, 1, 2, 3]
    assert all(results[k] == expected[k::4] for k in range(4))
    assert task.run_info()["math_verify"]["timeouts"] == timeouts


def test_a_dead_worker_is_replaced(task):
    task.is_correct(r"\boxed{1}", answer="1")
    for worker in list(tasks.judge.bounded._POOL.idle):
        worker.proc.kill()
        worker.proc.wait()
    before = task.run_info()["math_verify"]["timeouts"]
    assert task.is_correct(r"\boxed{\frac{1}{2}}", answer="0.5")
    assert task.run_info()["math_verify"]["timeouts"] == before  # no score lost to it


@pytest.mark.parametrize("text, boxed, canonical", [
    (r"\boxed{\frac{a}{\sqrt{b^{2}}}}", r"\frac{a}{\sqrt{b^{2}}}", r"\frac{a}{\sqrt{b^{2}}}"),
    (r"\boxed{1} then \fbox{ \dfrac{1}{2} }", r" \dfrac{1}{2} ", r"\frac{1}{2}"),
    (r"\boxed{90^\circ}", r"90^\circ", "90"),
    (r"\boxed{x = .5}", "x = .5", "0.5"),
    (r"\boxed{10,\!080}", r"10,\!080", "10,080"),
    ("no box here", None, None),
    (r"\boxed{unclosed", None, None),
])
def test_last_boxed_and_normalisation(task, text, boxed, canonical):
    assert last_boxed(text) == boxed
    assert task.extract_answer(text) == canonical


def test_malformed_user_file(tmp_path):
    bad = tmp_path / "test.jsonl"
    bad.write_text('{"problem": "1+1?", "answer": "2"}\n{"problem": "x"}\n')
    with pytest.raises(TaskDataError, match=r"test\.jsonl:2: field `answer` is missing"):
        MATH500(path=str(bad)).load("test")


GOOD = '{"problem": "1+1?", "answer": "2", "level": 1}'


@pytest.mark.parametrize("text, message", [
    (GOOD + '\n{"problem": "x", "answer": "3"', r"test\.jsonl:2: not valid JSON .*cut off"),
    (GOOD + '\n{"problem": "x", "answer": 3}\n', r"test\.jsonl:2: field `answer` is a number"),
    (GOOD + '\n{"problem": "x", "answer": "3", "level": "Level 5"}\n',
     r"test\.jsonl:2: field `level` is a string"),
    (GOOD + '\n{"problem": "x", "answer": "3", "level": true}\n',
     r"test\.jsonl:2: field `level` is a boolean"),
    (GOOD + '\n{"problem": "x", "answer": "3", "subject": ["a"]}\n',
     r"test\.jsonl:2: field `subject` is an array"),
    (GOOD + '\n"just a string"\n', r"test\.jsonl:2: the row is a string"),
    (GOOD + '\n{"problem": "x", "answer": NaN}\n', r"test\.jsonl:2: field `answer` is a number"),
    ("", r"test\.jsonl is empty"),
])
def test_malformed_rows_name_file_line_and_field(tmp_path, text, message):
    bad = tmp_path / "test.jsonl"
    bad.write_text(text)
    with pytest.raises(TaskDataError, match=message):
        MATH500(path=str(bad)).load("test")


def test_bad_task_path_and_counts(tmp_path):
    with pytest.raises(TaskDataError, match="is a directory"):
        MATH500(path=str(tmp_path)).load("test")
    with pytest.raises(TaskDataError, match="not a file path"):
        MATH500(path=3).load("test")
    with pytest.raises(TaskDataError, match="task.n_eval"):
        MATH500(n_eval=-3)


def test_many_boxes_are_read_in_linear_time(task):
    """100,000 repeats of an unclosed \\boxed{: last_boxed uses rfind and one brace scan."""
    assert last_boxed("\\boxed{" * 100_000) is None
    assert last_boxed("\\boxed{" * 100_000 + "5}") == "5"
    assert task.is_correct("\\boxed{" * 100_000 + "5}", answer="5")



# ---- robustness: answers too costly to expand, per-call budgets, relations, hedges, regexes ----
# Each passed the old guard and kept sympy busy until its 5 s limit, one completion after another:
# sixteen copies in one reward call took 104.9 s, 117.0 s and 109.3 s.
SLOW = [
    r"\boxed{(x+y+z)^{99}}",
    r"\boxed{" + r"\sin(" * 8 + "x" + ")" * 8 + "}",
    r"\boxed{\sum_{k=1}^{9999} k^{999}}",
]
# ... and single calls over a second (6.2 s, 1.9 s, 1.5 s), and more of their kind.
COSTLY = [r"(x+1)^{9999}", r"\sqrt[9999]{2}^{9999}", r"\prod_{k=1}^{9999}k", r"(x+1)^{100}",
          r"(1+\sqrt{2})^{9999}", r"(1+i)^{9999}", r"(a+b+c+d+e)^{20}", "(x+1)**9999",
          "(a+1)(b+1)(c+1)(d+1)(e+1)(f+1)(g+1)(h+1)", r"\sin(\sin(\sin(\sin(1))))",
          "sin(sin(sin(sin(1))))", r"\exp\exp\exp\exp 1", r"\sin^2(\sin^2(\sin^2(\sin^2(1))))",
          r"\sum_{k=1}^{n} k^{99}", r"\sum_{k=1}^{\infty}\frac{1}{k^{99}}", r"\sum_{k=1}^{101} k",
          r"\prod_{k=1}^{100}(x+k)", r"\int_0^1 x^{9999} dx", r"\int e^{x^2} dx",
          r"\sqrt[101]{2}", r"\binom{99999}{50000}", r"(x+1)^{\frac{9999}{1}}",
          r"((x+y)^{30})^{30}", "99999999999999999999^{9999}", r"(10^{9999}x)^{9999}"]


@pytest.mark.parametrize("answer", COSTLY + [s[len("\\boxed{"):-1] for s in SLOW])
def test_the_expansion_guard_refuses_costly_answers(answer):
    assert tasks.judge.expansion.costly(answer) and bounded.blocked(answer)


@pytest.mark.parametrize("answer", [
    r"(x+1)^{99}", r"(x+y+z)^{12}", r"\sin(\sin(\sin(1)))", r"\sum_{k=1}^{100} k^{2}",
    r"\prod_{k=1}^{100} k", r"\sqrt[3]{2}", r"\binom{9999}{5000}", r"\sin^2 x + \cos^2 x",
    r"\log_2 8", r"(x+1)^{n}", r"2^{\frac{1}{2}}", "1+2+3+4+5+6+7+8+9+10+11+12+13+14+15+16+17+18",
    r"\frac{(x+1)^{2}}{(x-1)^{3}}", r"10^{9999}", r"5x - 7y + 11z + 4 = 0"])
def test_the_expansion_guard_passes_ordinary_answers(answer):
    assert tasks.judge.expansion.costly(answer) is None


@pytest.mark.parametrize("attack", SLOW)
def test_sixteen_costly_answers_score_within_seconds(task, attack):
    """Each batch took 105-117 s; now under 10 s (refused at once), and the gold still scores."""
    task.reward([r"\boxed{1}"] * 4, answer=["1"] * 4)  # workers up: their start is not the point
    start = time.monotonic()
    rewards = task.reward([attack] * 16 + [r"\boxed{3}"], answer=["3"] * 17)
    assert time.monotonic() - start < 10
    assert rewards == [0.0] * 16 + [1.0]


def test_the_budget_stops_answers_past_every_guard(task, monkeypatch):
    """The backstop for what the guards miss: with the expansion guard off, sixteen copies of an
    answer that takes ~6 s each (16 x 5 s one after another before budgets) each stop at their own
    slice (tasks/judge/budget.py), in parallel, counted; the gold scores wherever it stands."""
    monkeypatch.setattr(tasks.judge.bounded, "costly", lambda text: None)
    monkeypatch.setattr(tasks.judge.budget, "SLICE_S", 0.3)  # the mechanism, at a third of the cost
    task.reward([r"\boxed{1}"] * 8, answer=["1"] * 8)  # four workers up
    before, cpu = task.run_info()["math_verify"], bounded.worker_cpu()
    start = time.monotonic()
    rewards = task.reward([r"\boxed{3}"] + [r"\boxed{(x+1)^{9999}}"] * 16, answer=["3"] * 17)
    took = time.monotonic() - start
    assert rewards == [1.0] + [0.0] * 16
    assert took < tasks.judge.budget.call_bound(17, bounded.MAX_WORKERS, tasks.judge.budget.WALL_S)
    # 16 x 5 s of sympy before budgets; now one slice each (CPU: a loaded machine stretches wall time)
    assert bounded.worker_cpu() - cpu < 16 * (tasks.judge.budget.SLICE_S + bounded.CPU_GRACE_S) + 2
    after = task.run_info()["math_verify"]
    spent = after["over_budget"] + after["timeouts"] - before["over_budget"] - before["timeouts"]
    assert spent == 16  # each slow answer spent its own slice
    assert task.reward([r"\boxed{3}"], answer=["3"]) == [1.0]  # the next call has its own budget


def test_a_reward_call_grades_in_parallel_like_one_at_a_time(task):
    rows = task.load("test").select(range(24))
    wrong = list(rows["answer"][1:]) + list(rows["answer"][:1])
    completions, answers = list(rows["solution"]) * 2, list(rows["answer"]) + wrong
    expected = [float(task.is_correct(c, answer=a)) for c, a in zip(completions, answers)]
    assert task.reward(completions, answer=answers) == expected
    assert 24 <= sum(expected) < 48


@pytest.mark.parametrize("completion, gold, expected", [
    (r"\boxed{5 = 3}", "3", False),  # math-verify alone took the right side
    (r"\boxed{3 \approx 5}", "3", False),  # ... and the left side
    ("The final answer is 3 or 5", "3", False),
    ("The final answer is 5 or 3", "5", False),
    ("The final answer is $3$ or $5$.", "3", False),
    ("The final answer is 3, or equivalently 3.0", "3", True),  # "or" before no value: no hedge
    (r"\boxed{3 \vee 5}", "5", False),  # math-verify reads 5
    (r"\boxed{x = 3}", "3", True),
    (r"\boxed{\frac{6}{2} = 3}", "3", True),
    (r"\boxed{x \approx 3.0}", "3", True),
    ("The final answer is 3", "3", True),
    (r"\boxed{x=5}", "x=5", True),  # a relation in the gold: math-verify compares the whole
    (r"\boxed{0.50000001}", r"\frac{1}{2}", False),  # compared at its own 8 places
    (r"\boxed{0.5}", r"\frac{1}{2}", True),
    (r"\boxed{0.333333}", r"\frac{1}{3}", True),  # math-verify's 6 places still hold
    (r"\boxed{0.0000671}", ".0000672", False),
    (r"\boxed{0.0000672}", ".0000672", True),
    (r"\boxed 5 and \frac{3}{1}", "5", True),
    (r"\boxed 5 and \frac{3}{1}", "3", False),
    (r"\boxed{3, 5}", "3, 5", True),
])
def test_relations_hedges_and_decimals(task, completion, gold, expected):
    assert task.is_correct(completion, answer=gold) is expected


@pytest.mark.parametrize("text, boxed", [
    (r"\boxed 5 and \frac{3}{1}", "5"), (r"\boxed 42.", "42"), (r"\boxed\pi + 1", r"\pi"),
    (r"\boxed x", "x"), (r"\fbox{7}", "7"), (r"\boxed", None), (r"\boxedx{3}", None),
])
def test_a_bare_box_holds_one_token(text, boxed):
    assert last_boxed(text) == boxed


N = 64_000
ADVERSARIAL = [  # every grader regex and scan against 64k-character inputs built to backtrack
    "\\boxed{\\text{" + " " * N + "{}}}",  # took 29.6 s in normalise's \text\{\s*([^{}]*)\}
    "\\boxed{\\text{" + " " * N + "}",
    "\\boxed{" + "\\text{ " * (N // 7) + "}",
    "\\boxed{" + " ." * (N // 2) + "}", "\\boxed{" + "x=" * (N // 2) + "}",
    "\\boxed{" + "=" * N + "}", "\\boxed{" + "{" * N, "\\boxed " + "9" * N,
    "The final answer is " + "3 or " * (N // 5), "answer" * (N // 6) + " or 5",
    "\\boxed{" + "\\approx" * (N // 7) + "}", "\\boxed{" + ".1" * (N // 2) + "}",
    "\\boxed{" + "(" * (N // 2) + "}" * (N // 2), "\\boxed" * (N // 6) + "{5}",
]


@pytest.mark.parametrize("text", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_adversarial_answers_parse_in_linear_time(task, text):
    """Under 0.1 s of this thread's CPU (a busy machine does not count against it)."""
    for grade in (task.extract_answer, lambda t: task.is_correct(t, answer="5")):
        start = time.thread_time()
        grade(text)  # is_correct: an answer over 1,000 characters is refused before sympy
        assert time.thread_time() - start < 0.1


def test_rows_are_checked_when_the_task_is_built(tmp_path):
    bad = tmp_path / "test.jsonl"
    for answer, message in [("", "field `answer` is blank"),
                            ("\\frac{1}{2", "field `answer` has unbalanced braces"),
                            ("(x+1)^{9999}", "field `answer` is refused by the grader's cost guards")]:
        bad.write_text(GOOD + "\n" + json.dumps({"problem": "x", "answer": answer}) + "\n")
        with pytest.raises(TaskDataError, match=r"test\.jsonl:2: " + re.escape(message)):
            MATH500(path=str(bad))  # at build: before any model loads
