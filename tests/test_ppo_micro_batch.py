"""PPO's training micro-batch (methods/ppo_config.py train_micro_batch): with method.train_micro_batch null it is
GRPO's rule on PPO's activations, the one number methods/ppo.py trains with and the planner prices.

    python -m pytest tests/test_ppo_micro_batch.py -q
"""
from __future__ import annotations

import pytest

from harness.core import gpu_memory as gm
from harness.core import train_memory as tm
from harness.core.model_shapes import load_shape
from harness.core.paths import ZOO_DIR
from methods.ppo_config import PPOMethodConfig, ppo_memory, train_micro_batch

ZOO = sorted(p.name for p in ZOO_DIR.iterdir() if (p / "config.json").is_file())


def per_sequence(shape, tokens: int, completion: int, compute: int) -> int:
    """What one sequence keeps for PPO's backward, by hand: policy and value layers (fp32 masters), every
    position's logits."""
    p = tm.precision_of(4, compute)
    return (2 * tm.activation_bytes(shape, 1, tokens, p)
            + tm.logit_bytes(shape, 1, tokens, completion, p, all_positions=True))


def test_a_15b_minibatch_is_split_into_the_largest_micro_batch_that_fits_the_allowance():
    """Qwen2.5-1.5B at a 150-token prompt + 1,024-token completion keeps ~11.8 GB a sequence, more than GRPO's
    8 GiB allowance: one sequence a micro-batch (gradients accumulated over the 64); at 60 tokens, the largest
    divisor of 64 under the allowance."""
    shape, c = load_shape("Qwen/Qwen2.5-1.5B-Instruct"), PPOMethodConfig()
    assert per_sequence(shape, 1174, 1024, 2) > gm.MICRO_BATCH_ACTIVATIONS
    assert train_micro_batch(c, shape, 1, 1174, 1024, 2) == 1 < c.prompts_per_step
    short = train_micro_batch(c, shape, 1, 60, 16, 2)
    cap = gm.MICRO_BATCH_ACTIVATIONS // per_sequence(shape, 60, 16, 2)
    assert 64 % short == 0 and short <= cap < 2 * short and 1 < short < 64
    # per rank under FSDP: the rank's share of the minibatch, the same cap
    assert train_micro_batch(c, shape, 4, 60, 16, 2) == min(short, 16)


@pytest.mark.parametrize("name", ZOO)
def test_the_zoo_keeps_the_whole_minibatch_in_one_micro_batch(name):
    """The zoo's tiny models and vocabulary on the CPU (fp32 compute): zoo Countdown's prompt and completion
    (under 50 tokens; 128 here) keep all 64 sequences in one forward, so CPU results do not change."""
    assert train_micro_batch(PPOMethodConfig(), load_shape(name), 1, 128, 16, 4) == 64


def test_an_explicit_micro_batch_or_several_minibatches_are_kept():
    shape = load_shape("Qwen/Qwen2.5-1.5B-Instruct")
    assert train_micro_batch(PPOMethodConfig(train_micro_batch=8), shape, 1, 1174, 1024, 2) == 8
    # TRL accumulates across minibatches, so with several of them each trains whole, as before
    assert train_micro_batch(PPOMethodConfig(num_mini_batches=4), shape, 1, 1174, 1024, 2) == 16


@pytest.mark.parametrize("model,completion,gpus", [("Qwen/Qwen2.5-0.5B-Instruct", 60, 1),
                                                   ("Qwen/Qwen2.5-3B-Instruct", 1024, 4)])
def test_the_planner_prices_the_micro_batch_ppo_trains(model, completion, gpus):
    """ppo_memory's activations and logits are train_micro_batch's on the FSDP count it plans (80 GB GPUs)."""
    shape, c = load_shape(model), PPOMethodConfig()
    tokens = 150 + completion
    parts, n, _ = ppo_memory(c, shape, tokens, gpu_gb=80.0, headroom=0.9, prompt_tokens=150)
    micro = train_micro_batch(c, shape, n, tokens, completion, 2)
    assert n == gpus and micro < 64 // n
    assert parts["activations"] == tm.activation_bytes(shape, micro, tokens, tm.FP32_MASTER)
    assert parts["logits"] == tm.logit_bytes(shape, micro, tokens, completion, tm.FP32_MASTER, all_positions=True)


def test_methods_ppo_trains_with_that_micro_batch(tmp_path):
    """methods/ppo.py imports the same function and hands its size to TRL (per-device batch x accumulation =
    the rank's prompts); several minibatches keep TRL's whole-batch slicing."""
    import methods.ppo as ppo
    from harness.core.steplog import make_ledger

    assert ppo.train_micro_batch is train_micro_batch
    ledger = make_ledger("samples", 64, tmp_path, progress=False)
    cfg = ppo.PPO(prompts_per_step=64)._trl_config(ledger, tmp_path, 8, 0, on_cpu=True, micro=4)
    assert (cfg.per_device_train_batch_size, cfg.gradient_accumulation_steps) == (4, 16)
    cfg = ppo.PPO(prompts_per_step=64, num_mini_batches=4)._trl_config(ledger, tmp_path, 8, 0, on_cpu=True, micro=16)
    assert (cfg.per_device_train_batch_size, cfg.gradient_accumulation_steps) == (64, 1)
