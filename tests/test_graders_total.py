"""Graders are total and maj@k does not depend on order.

1. `extract_answer`, `is_correct`, `judge` and `reward` return a value for every string, never an
   exception. Before: GSM8K's `extract_answer` raised OverflowError on `#### 10000000000e300/7`
   and ValueError (the 4,300-digit limit) on `\\boxed{\\Gamma(9999.5)}`, while `reward()` returned
   0, so one such sample ended an evaluation's maj@k and the run with it. Fuzzed here with a
   seeded generator (hypothesis is not a dependency): random unicode, numbers past every float
   and integer limit, nested LaTeX, 1 MB inputs.
2. maj@k votes over the answers the judge scores: before, `\\boxed{5.}` and `\\boxed{5\\%}`
   extracted as 5 but were judged wrong for gold 5, and `#### 18.00000000001` extracted as 18, so
   maj@3 of [that, right, right] was 0 and reversed 1. Every permutation now gives one maj@k.
3. Evaluation's grading path reads each completion once, under its slice, in parallel
   (harness/evaluation/grading.py).

    python -m pytest tests/test_graders_total.py -q
"""
import itertools
import random

import pytest

from harness.evaluation.grading import judge_all
from harness.evaluation.metrics import maj_at_k
from tasks.gsm8k import GSM8K
from tasks.hotpotqa import HotpotQA
from tasks.judge import bounded, budget
from tasks.math500 import MATH500

PIECES = ["####", "#### ", r"\boxed{", "}", "{", r"\frac{", r"\sqrt{", "^{", "!", "e300", "e-400",
          "/7", "/0", "10000000000", "9" * 400, "1" * 5000, ",", ",\\!", ".", "-", "\u2212", "±",
          r"\Gamma(", "9999.5)", r"\sin(", r"\lfloor", r"\rfloor", "x", r"\text{ cents}", " or ",
          " not ", "The answer is ", "answer: ", r"\pm", r"\to", r"\\", "$", r"\%", "\n", " ",
          "\x00", "\udcff", "\U0001f600", "ⅷ", "٣", "twenty", "nine", "(", ")", "[", "]",
          r"\left(", r"\right)", r"\begin{pmatrix}", r"\end{pmatrix}", "&", "=", r"\approx",
          "2^{1024}", "7^{1000}", "9999!", "1e308", "inf", "nan", "NaN", "0x1p1024"]
HOSTILE = [r"#### 10000000000e300/7", r"\boxed{\Gamma(9999.5)}", r"\boxed{2^{1024}}",
           r"\boxed{7^{1000}}", r"\boxed{9999!}", "#### " + "9" * 5000, "#### 1e99999",
           "#### 1" + ",000" * 2000, r"\boxed{" * 300 + "}" * 300, r"\boxed{\frac{1}{0}}",
           "#### 1/0", r"\boxed{10^{-9999}}", r"\boxed{1/9999!}", "\udcff#### 18\x00",
           "The answer is " + "1" * 1_000_000, r"\boxed{" + "x" * 1_000_000 + "}",
           "ⅷ" * 1_000_000]


def fuzz(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = [rng.choice(PIECES) if rng.random() < 0.8
                 else "".join(chr(rng.randrange(1, 0x30000)) for _ in range(rng.randrange(1, 8)))
                 for _ in range(rng.randrange(1, 12))]
        out.append("".join(parts))
    return out


@pytest.fixture(scope="module")
def graders():
    return [GSM8K(), MATH500(), HotpotQA()]


def test_graders_never_raise_on_hostile_or_random_strings(graders):
    texts = HOSTILE + fuzz(0, 80)
    for task in graders:
        golds = ["18", r"10,\!080", r"5.4 \text{ cents}", "University of Oxford", "x"]
        for i, text in enumerate(texts):
            gold = golds[i % len(golds)]
            answer = task.extract_answer(text)
            assert answer is None or isinstance(answer, str)
            assert task.is_correct(text, answer=gold) in (True, False)
        rewards = task.reward(texts, answer=[golds[i % len(golds)] for i in range(len(texts))])
        assert len(rewards) == len(texts) and all(0.0 <= r <= 1.0 for r in rewards)


@pytest.mark.parametrize("text", HOSTILE[:5])
def test_the_issue_cases_are_no_answer(graders, text):
    gsm8k, math500, _ = graders
    assert gsm8k.extract_answer(text) is None
    assert gsm8k.is_correct(text, answer="18") is False
    assert math500.is_correct(text, answer="1024") is False


def majorities(task, samples: list[str], gold: str) -> set[float]:
    """maj@k (k = all samples) over every order of the samples, graded as evaluation grades. The
    samples hold a strict majority: a tie goes to the answer seen first (metrics.py), by design."""
    results = set()
    for order in itertools.permutations(samples):
        correct, answers = judge_all(task, list(order), [{"answer": gold}] * len(order))
        results.add(maj_at_k(answers, correct, k=len(order)))
    return results


@pytest.mark.parametrize("samples, gold", [
    ([r"\boxed{5.}", r"\boxed{5}", r"\boxed{5}"], "5"),  # the issue's [wrong-form, right, right]
    ([r"\boxed{5.}", r"\boxed{5}", r"\boxed{6}"], "5"),
    ([r"\boxed{5\%}", r"\boxed{5}", r"\boxed{7}"], "5"),
    ([r"\boxed{5 \text{ dollars}}", r"\boxed{5 \text{ dollars}}", r"\boxed{5 \text{ cents}}",
      r"\boxed{5}"], r"5 \text{ cents}"),
    ([r"\boxed{3 \vee 5}", r"\boxed{5}", r"\boxed{5}", r"\boxed{3}"], "5"),
    ([r"\boxed{10,\!080}", r"\boxed{10080}", r"\boxed{10,080}", r"\boxed{3}"], r"10,\!080"),
])
def test_math500_majority_is_the_same_in_every_order(graders, samples, gold):
    assert len(majorities(graders[1], samples, gold)) == 1


@pytest.mark.parametrize("samples, gold", [
    (["#### 18.00000000001", "#### 18", "#### 18"], "18"),  # the issue's example
    (["#### 18.00000000001", "#### 18.00000000001", "#### 18"], "18"),
    ([r"\boxed{5.}", r"\boxed{5\%}", "#### 5", "#### 6", "#### 6"], "5"),
    (["#### 1/3", "#### 0.3333333333", "#### 0.3333333333", "#### 4"], "4"),
    (["#### 18, 19", "#### 18, 19", "#### 18", "#### 18", "#### 19"], "18"),
])
def test_gsm8k_majority_is_the_same_in_every_order(graders, samples, gold):
    assert len(majorities(graders[0], samples, gold)) == 1


def test_one_answer_class_is_judged_as_one(graders):
    """A vote's correctness is a property of its answer: equal keys, equal judgements."""
    gsm8k, math500, _ = graders
    for task, gold, texts in [
            (gsm8k, "18", fuzz(1, 60) + ["#### 18", r"\boxed{18.0}", "#### 18.00000000001",
                                         "18", r"\boxed{\frac{36}{2}}", "#### eighteen"]),
            (math500, "5", fuzz(2, 40) + [r"\boxed{5.}", r"\boxed{5\%}", r"\boxed{ 5 }",
                                          r"\boxed{x=5}", r"\boxed{5.0}", r"\boxed{\dfrac{10}{2}}"])]:
        pairs = task.judge_all(texts, [{"answer": gold}] * len(texts))
        by_key = {}
        for ok, key in pairs:
            if key is not None:
                by_key.setdefault(key, set()).add(ok)
        assert all(len(v) == 1 for v in by_key.values()), by_key
        assert [task.is_correct(t, answer=gold) for t in texts] == [ok for ok, _ in pairs]
        assert [task.extract_answer(t) for t in texts] == [key for _, key in pairs]


def test_evaluation_grades_in_parallel_each_under_its_slice(graders):
    """Four slow MATH answers took 24 s one after another on the evaluation path."""
    import time

    math500 = graders[1]
    slow = [r"\boxed{\sin(x)^{9999}}"] * 4 + [r"\boxed{18}"]
    math500.is_correct(r"\boxed{1}", answer="1")
    start, cpu = time.monotonic(), bounded.worker_cpu()
    correct, answers = judge_all(math500, slow, [{"answer": "18"}] * len(slow))
    assert correct == [False] * 4 + [True] and answers[-1] == "18"
    # one slice each (CPU: a loaded machine stretches wall time), never 4 x 5 s one by one
    assert bounded.worker_cpu() - cpu < 4 * (budget.SLICE_S + bounded.CPU_GRACE_S) + 1
    assert time.monotonic() - start < budget.call_bound(5, bounded.MAX_WORKERS, budget.WALL_S)


TEXT_TASKS = ["arithmetic", "countdown", "csqa", "gpqa", "conciseness", "hotpotqa"]  # no sandbox


@pytest.mark.parametrize("name", TEXT_TASKS)
def test_every_text_task_is_total(name):
    """The same strings against the other graders, each with a real row's columns."""
    from pathlib import Path

    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    conf = OmegaConf.load(Path(__file__).parents[1] / "conf" / "task" / f"{name}.yaml")
    task = instantiate(conf)
    rows = task.load("test").select(range(1))
    row = {k: v[0] for k, v in rows.to_dict().items() if k != "prompt"}
    texts = HOSTILE + fuzz(3, 60)
    for text in texts:
        answer = task.extract_answer(text)
        assert answer is None or isinstance(answer, str)
        assert task.is_correct(text, **row) in (True, False)
    rewards = task.reward(texts, **{k: [v] * len(texts) for k, v in row.items()})
    assert len(rewards) == len(texts)
