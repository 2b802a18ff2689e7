"""Held-out evaluation (eval.tasks) and KL to the base model (eval.kl_to_base).

    python -m pytest tests/test_heldout.py -q
"""
import copy
import math

import pytest
import torch

from harness.evaluation.evaluate import EvalConfig, evaluate
from harness.evaluation.kl import per_token_kl
from harness.core.policy import load_policy
from harness.core.records import Record, write_record
from harness.core.paths import CONF_DIR
from harness.runner.run import build_task
from harness.reporting.report import rebuild
from tasks.base import TaskDataError

QUICK = dict(n_samples=2, pass_ks=[1, 2], maj_ks=[2], n_prompts=4, max_new_tokens=6, n_boot=50, maj_subsets=10)


@pytest.fixture(scope="module")
def policy():
    return load_policy("zoo-100k", device="cpu")


def test_kl_is_zero_against_itself_and_matches_hand_computation(policy):
    model = policy.model
    prompt, completion = [[21, 22, 4, 23]], [[12, 21]]
    assert per_token_kl(model, model, prompt, completion, pad_id=0) == [0.0]
    other = copy.deepcopy(model)
    with torch.no_grad():
        other.lm_head.weight.add_(0.05 * torch.randn_like(other.lm_head.weight))
    kl = per_token_kl(model, other, prompt, completion, pad_id=0)[0]
    ids = torch.tensor([prompt[0] + completion[0]])
    with torch.no_grad():
        lp = torch.log_softmax(model(ids).logits[0], -1)
        lr = torch.log_softmax(other(ids).logits[0], -1)
    hand = []
    for pos, tok in ((3, 12), (4, 21)):  # logits at t-1 predict the token at t
        log_r = float(lr[pos, tok] - lp[pos, tok])
        hand.append(math.exp(log_r) - 1 - log_r)
    assert kl == pytest.approx(sum(hand) / 2, rel=1e-4) and kl > 0


def test_padding_does_not_change_kl(policy):
    model, other = policy.model, copy.deepcopy(policy.model)
    gen = torch.Generator().manual_seed(0)  # not the global RNG: the test order must not pick the weights
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=gen))
    pairs = ([[21, 22], [21, 22, 4, 23, 24, 25]], [[12, 13, 14], [12]])
    together = per_token_kl(model, other, *pairs, pad_id=0, batch_size=2)
    alone = [per_token_kl(model, other, [p], [c], pad_id=0)[0] for p, c in zip(*pairs)]
    # fp32 rounding of a padded batch differs from a single row's at ~1e-5 relative (3.8e-6 of 0.37 seen);
    # a pad that leaked into attention or the KL would move it by orders of magnitude more
    assert together == pytest.approx(alone, rel=1e-4)


def test_heldout_task_and_kl_in_evaluation(policy):
    task = build_task("conciseness")
    res = evaluate(policy, task, "test", EvalConfig(**QUICK), reference=policy.model)
    assert res.metrics["kl_to_base"]["mean"] == 0.0 and res.metrics["pass@2"]["n"] == 4
    with pytest.raises(TaskDataError, match="unknown task 'nosuch'.*countdown"):
        build_task("nosuch")


def test_heldout_block_in_tables(tmp_path):
    m = {"mean": 0.25, "ci_low": 0.2, "ci_high": 0.3, "n": 4}
    write_record(tmp_path / "a", Record(label="ES", model="zoo-1m", method="es", status="ok",
                                        metrics={"test": {"greedy_acc": m}},
                                        heldout={"gsm8k": {"metrics": {"greedy_acc": m, "kl_to_base": m}},
                                                 "gpqa": {"metrics": {"greedy_acc": m},
                                                          "task_info": {"notes": ["FIXTURE DATA, not GPQA"]}}}))
    md = rebuild(tmp_path, tmp_path / "out")
    assert "## Held-out task: gsm8k" in md and "kl_to_base" in md
    assert "- gpqa (held out): FIXTURE DATA, not GPQA" in md  # a held-out run on a fixture says so


@pytest.mark.parametrize("name", sorted(p.stem for p in (CONF_DIR / "task").glob("*.yaml")))
def test_zoo_model_evaluates_end_to_end_on_every_task(policy, name):
    # scores are near zero off Countdown; the point is that every task's pipeline runs on CPU
    res = evaluate(policy, build_task(name), "test", EvalConfig(**QUICK))
    for metric in ("greedy_acc", "pass@1", "pass@2", "maj@2", "mean_reward"):
        assert res.metrics[metric]["n"] == min(4, len(build_task(name).load("test")))
    assert 0 <= res.metrics["pass@1"]["mean"] <= res.metrics["pass@2"]["mean"] <= 1


def test_held_out_task_overrides_and_unknown_names():
    """eval.task_overrides sets a held-out task's settings on top of its YAML (e.g. {gpqa: {source: hub}})."""
    assert build_task("countdown", {"n_eval": 7}).n_eval == 7
    assert build_task("countdown").n_eval != 7
    with pytest.raises(TaskDataError, match="unknown task 'nosuch'.*choose from: .*countdown"):
        build_task("nosuch")
    from harness.evaluation.evaluate import EvalConfigError
    with pytest.raises(EvalConfigError, match="must map a task name to its settings"):
        EvalConfig(task_overrides={"gpqa": "hub"})
