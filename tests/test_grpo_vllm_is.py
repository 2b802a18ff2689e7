"""vLLM's importance-sampling correction in GRPO: off unless method.vllm_importance_sampling_correction asks (TRL's
default is on; it is not part of GRPO), and when on, the share it masks is logged (methods/grpo.py).

    python -m pytest tests/test_grpo_vllm_is.py -q
"""
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

import methods.grpo as grpo
from harness.core.budget import Ledger
from methods.grpo import GRPO, IS_MASKED, GRPOMethodConfig, masked_share, trl_metrics

HP = dict(prompts_per_step=2, num_generations=2, learning_rate=1e-3)


def trl_args(tmp_path, tiny_policy, monkeypatch, **overrides):
    # TRL's colocated-vLLM keywords without vLLM installed: only GRPOConfig's fields are under test here
    monkeypatch.setattr(grpo, "trl_vllm_kwargs", lambda *a, **k: {"use_vllm": True, "vllm_mode": "colocate"})
    return GRPO(**{**HP, **overrides})._trl_args(tiny_policy(), Ledger(limit=1e18), tmp_path, 8, 16)


def test_the_correction_is_off_unless_asked(tmp_path, tiny_policy, monkeypatch):
    hf = trl_args(tmp_path, tiny_policy, monkeypatch)
    assert not hf.use_vllm and hf.vllm_importance_sampling_correction is False  # TRL's default is True
    vllm = trl_args(tmp_path, tiny_policy, monkeypatch, engine="vllm")
    assert vllm.use_vllm and vllm.vllm_importance_sampling_correction is False
    on = trl_args(tmp_path, tiny_policy, monkeypatch, engine="vllm", vllm_importance_sampling_correction=True)
    assert on.vllm_importance_sampling_correction is True and on.vllm_importance_sampling_mode == "sequence_mask"


def test_asking_for_it_without_vllm_is_refused_in_one_line():
    with pytest.raises(ValueError, match="engine is not vllm") as err:
        GRPOMethodConfig(vllm_importance_sampling_correction=True)
    assert "\n" not in str(err.value)


def test_masked_share_counts_sequences_or_completion_tokens():
    seq = torch.tensor([[1.2], [0.0], [0.7], [0.0]])  # sequence_mask: one ratio per sequence, 0 = dropped
    assert masked_share(seq, torch.ones(4, 3)) == (2, 4)
    tok = torch.tensor([[1.0, 0.0, 0.0], [0.0, 2.0, 1.0]])  # token_mask: padding (mask 0) is not counted
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    assert masked_share(tok, mask) == (2, 5)


def test_the_masked_fraction_reaches_the_step_log(monkeypatch):
    """The subclass adds TRL's ratios' masked share to the step's metrics; trl_metrics carries it only when there."""
    out = {"importance_sampling_ratio": torch.tensor([[1.1], [0.0], [0.9], [1.0]]),
           "completion_mask": torch.ones(4, 5)}
    monkeypatch.setattr(grpo.GRPOTrainer, "_generate_and_score_completions", lambda self, inputs: out)
    trainer = object.__new__(grpo._ISLoggingGRPOTrainer)
    trainer.accelerator = SimpleNamespace(device=torch.device("cpu"), gather=lambda t: t)  # one process
    trainer.model = SimpleNamespace(training=True)
    trainer._metrics = {"train": defaultdict(list)}
    assert trainer._generate_and_score_completions([]) is out
    assert trainer._metrics["train"][IS_MASKED] == [0.25]
    logged = trl_metrics({IS_MASKED: 0.25, "sampling/importance_sampling_ratio/mean": 0.75, "kl": 0.0})
    assert (logged["is_masked_fraction"], logged["is_ratio_mean"]) == (0.25, 0.75)
    assert "is_masked_fraction" not in trl_metrics({"kl": 0.0})  # runs without the correction log what they did
