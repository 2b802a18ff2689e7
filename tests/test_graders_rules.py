"""Graders that match their own rules: one test per class of hole, with the red team's examples
and new ones of each class.

- comma golds are numbers (`10,\\!080`): before, read as a list, so the hedge and relation guards
  were skipped and `\\boxed{3 \\vee 10080}`, `\\boxed{3 = 10080}`, "10080 or 3" scored 1;
- units are compared, not dropped: `\\boxed{5.4 \\text{ dollars}}` scored for gold `5.4 \\text{ cents}`;
- an overflowing value is no answer: `\\boxed{2^{1024}}` scored for gold 1024 (rule 4 read 1024);
- every hedge scores 0: "#### 18, 19", "#### 18 or maybe 19", "#### 18 ± 1", "The answer is not
  18.", `\\boxed{3 \\to 5}`, `\\boxed{3 \\\\ 5}` each scored for one of their numbers;
- HotpotQA: a strict prefix of the gold ("University of", 0.80 for gold "University of Oxford")
  earned more than the discriminating token ("Oxford", 0.50).

    python -m pytest tests/test_graders_rules.py -q
"""
import pytest

from tasks.answers import single_value
from tasks.gsm8k import GSM8K
from tasks.hotpotqa import HotpotQA
from tasks.hotpotqa_grade import priced_f1
from tasks.math500 import MATH500


@pytest.fixture(scope="module")
def gsm8k():
    return GSM8K()


@pytest.fixture(scope="module")
def math500():
    return MATH500()


@pytest.mark.parametrize("gold", [r"10,\!080", r"\$32,\!348", "1,000", r"1,\!234,\!567"])
def test_a_thousands_comma_makes_one_value(gold):
    assert single_value(gold)


@pytest.mark.parametrize("gold", ["1, 2", r"(3, \frac{\pi}{2})", "3,4", r"1,\!2"])
def test_a_list_stays_a_list(gold):
    assert not single_value(gold) or gold.startswith("(")


@pytest.mark.parametrize("completion, expected", [
    (r"\boxed{3 \vee 10080}", False), (r"\boxed{3 = 10080}", False),
    ("The final answer is 10080 or 3", False), (r"\boxed{10080 \to 3}", False),
    (r"\boxed{10080}", True), (r"\boxed{10,080}", True), (r"\boxed{10,\!080}", True),
    (r"\boxed{x = 10080}", True)])
def test_comma_golds_get_every_guard(math500, completion, expected):
    assert math500.is_correct(completion, answer=r"10,\!080") is expected


@pytest.mark.parametrize("completion, gold, expected", [
    (r"\boxed{5.4 \text{ dollars}}", r"5.4 \text{ cents}", False),
    (r"\boxed{5.4 \text{ cents}}", r"5.4 \text{ cents}", True),
    (r"\boxed{5.4 \text{cent}}", r"5.4 \text{ cents}", True),
    (r"\boxed{5.4}", r"5.4 \text{ cents}", True),  # no unit stated: judged by value
    (r"\boxed{864 \mbox{ inches}^2}", r"864 \mbox{ inches}^2", True),
    (r"\boxed{864 \text{ feet}^2}", r"864 \mbox{ inches}^2", False),
    (r"\boxed{15 \text{ cm}^2}", r"15\mbox{ cm}^2", True),
    (r"\boxed{15 \text{ cm}}", r"15\mbox{ cm}^2", False),
    (r"\boxed{18.90 \text{ cents}}", r"\$18.90", False),
    (r"\boxed{\$18.90}", r"\$18.90", True), (r"\boxed{18.90 \text{ dollars}}", r"\$18.90", True),
    (r"\boxed{\frac{270}{7} \text{ radians}}", r"\frac{270}7\text{ degrees}", False),
    (r"\boxed{\frac{270}{7}^\circ}", r"\frac{270}7\text{ degrees}", True),
    (r"\boxed{\text{Evelyn}}", r"\text{Evelyn}", True)])
def test_units_are_compared_not_dropped(math500, completion, gold, expected):
    assert math500.is_correct(completion, answer=gold) is expected


@pytest.mark.parametrize("completion, gold", [
    (r"\boxed{2^{1024}}", "1024"), (r"\boxed{7^{1000}}", "1000"), (r"\boxed{9999!}", "9999"),
    (r"The answer is $\boxed{2^{1024}}$.", "2"), (r"#### \boxed{2^{1024}}", "2"),
    ("#### 10000000000e300/7", "7"), ("#### 2e308", "2"), (r"\boxed{10^{400}}", "400"),
    (r"\boxed{(10^{9})!}", "9")])
def test_an_overflowing_value_is_no_answer(gsm8k, completion, gold):
    assert gsm8k.extract_answer(completion) is None
    assert gsm8k.is_correct(completion, answer=gold) is False


@pytest.mark.parametrize("completion", [
    "#### 18, 19", "#### 19, 18", "#### 18 or maybe 19", "#### 18 or perhaps $19", "#### 18 ± 1",
    "#### 18 +/- 1", "#### 18 to 19", "#### 18 and 19", "#### 18; 19", "The answer is not 18.",
    "The answer isn't 18.", "#### not 18", r"\boxed{18 \to 19}", r"\boxed{19 \to 18}",
    r"\boxed{18 \\ 19}", r"\boxed{18 \rightarrow 19}", r"\boxed{18, 19}", r"\boxed{18 \pm 1}",
    "answer: 18, 19 or 20", "It is 18 or 19."])
@pytest.mark.parametrize("gold", ["18", "19"])
def test_every_hedge_scores_zero_in_gsm8k(gsm8k, completion, gold):
    assert gsm8k.is_correct(completion, answer=gold) is False


@pytest.mark.parametrize("completion", [
    r"\boxed{3 \to 5}", r"\boxed{3 \\ 5}", r"\boxed{3 \rightarrow 5}", r"\boxed{3 \implies 5}",
    "The final answer is not 5.", "The final answer is not 3.", r"\boxed{3 \vee 5}",
    r"\boxed{3 \text{ or } 5}", r"\boxed{\pm 5}"])
@pytest.mark.parametrize("gold", ["3", "5"])
def test_every_hedge_scores_zero_in_math500(math500, completion, gold):
    assert math500.is_correct(completion, answer=gold) is False


@pytest.mark.parametrize("completion, gold", [
    ("#### 18", "18"), ("#### 1,000", "1000"), ("The answer is 18, not 19.", "18"),
    ("#### 18\nThe answer is 18 or so.", "18"), (r"\boxed{18 \text{ eggs}}", "18"),
    (r"\boxed{5\%}", "5"), (r"\boxed{5.}", "5"), ("#### -18", "-18"), ("#### 18 dollars", "18")])
def test_committed_answers_still_score_in_gsm8k(gsm8k, completion, gold):
    assert gsm8k.is_correct(completion, answer=gold) is True


@pytest.mark.parametrize("completion, gold", [
    (r"\boxed{\begin{pmatrix} 1 \\ 2 \end{pmatrix}}", r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}"),
    (r"\boxed{1 \pm \sqrt{19}}", r"1 \pm \sqrt{19}"), (r"\boxed{5.}", "5"), (r"\boxed{5\%}", "5"),
    ("The final answer is 5, not 3.", "5"), (r"\boxed{\pi r^2}", r"\pi r^2")])
def test_committed_answers_still_score_in_math500(math500, completion, gold):
    assert math500.is_correct(completion, answer=gold) is True


@pytest.mark.parametrize("gold, prefix, token", [
    ("University of Oxford", "University of", "Oxford"),  # the red team's example
    ("University of Cambridge", "University", "Cambridge"),
    ("Bank of New York Mellon", "Bank of New York", "Mellon"),
    ("the Republic of Ireland", "Republic of", "Ireland")])
def test_a_strict_prefix_of_the_gold_earns_no_more_than_its_discriminating_token(gold, prefix, token):
    """Definition (tasks/hotpotqa_grade.py): a strict prefix earns one gold token's F1, 2/(n+1)."""
    assert priced_f1(prefix, gold) <= priced_f1(token, gold)
    n = len(gold.lower().replace("the ", "").split())
    assert priced_f1(prefix, gold) == pytest.approx(2 / (n + 1))
    assert priced_f1(gold, gold) == 1.0


def test_hedging_on_a_shared_prefix_does_not_beat_committing():
    """Two candidates sharing a prefix, each right half the time: committing to either full
    answer earns more in expectation than the shared prefix."""
    golds = ["University of Oxford", "University of Cambridge"]
    hedge = sum(priced_f1("University of", g) for g in golds) / 2
    commit = sum(priced_f1("University of Oxford", g) for g in golds) / 2
    assert hedge < commit
    assert HotpotQA().reward(["Answer: University of", "Answer: Oxford"],
                             answer=["University of Oxford"] * 2) == [0.5, 0.5]


@pytest.mark.parametrize("prediction, gold, score", [
    ("Sefferly", "Ann Sefferly", 2 / 3), ("Ann", "Ann Sefferly", 2 / 3),  # one token of two
    ("Paris", "Paris", 1.0), ("of Oxford", "University of Oxford", 0.8)])
def test_other_partial_answers_keep_their_f1(prediction, gold, score):
    assert priced_f1(prediction, gold) == pytest.approx(score)
