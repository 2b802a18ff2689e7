"""LoRA for GRPO and PPO (methods/lora.py) and its cost rule (harness/core/flops.py lora_train_flops).

Run: python -m pytest tests/test_lora.py -q

The rule is checked against FlopCounterMode on peft-wrapped zoo checkpoints, one training step
(forward + backward). The counter sees the linear layers as mm/addmm and eager attention's QK^T and
AV as bmm over the full seq x seq square (the causal mask comes after), so the two parts are
compared separately: matmuls against the rule's linear part, bmm against 3x the full-square term.
"""
import json

import pytest
import torch
from peft import LoraConfig, get_peft_model
from torch.utils.flop_counter import FlopCounterMode

from harness.core.budget import Ledger
from harness.core.flops import _attn_flops_per_ctx, lora_train_flops, train_flops
from harness.core.policy import load_policy
from harness.core.errors import ConfigError
from harness.core.steplog import make_ledger
from methods.base import make_config
from methods.sequential import SequentialConfig
from methods.grpo import GRPO, step_flops
from methods.lora import LoraSettings, adapter_parameters, check_peft, linear_names, lora_config
from methods.ppo import PPO
from tasks.countdown import Countdown

SEQ = 40


def _zoo(name="zoo-100k"):
    return load_policy(name, "float32", device="cpu")


def _measure(model, seq: int) -> tuple[float, float]:
    """(matmul FLOPs, attention bmm FLOPs) of one forward + backward, as FlopCounterMode counts them."""
    ids = torch.randint(0, model.config.vocab_size, (1, seq), generator=torch.Generator().manual_seed(0))
    counter = FlopCounterMode(display=False)
    with counter:
        model(input_ids=ids).logits.float().pow(2).mean().backward()
    counts = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    bmm = sum(n for op, n in counts.items() if "bmm" in op)
    return counter.get_total_flops() - bmm, bmm


@pytest.mark.parametrize("name", ["zoo-100k", "zoo-1m"])
def test_lora_train_flops_matches_flop_counter(name):
    policy = _zoo(name)
    model, cfg = policy.model, policy.model.config
    model.config._attn_implementation = "eager"  # attention as explicit bmm, so the counter sees it
    settings = LoraSettings(r=8, alpha=16, dropout=0.0)
    p = adapter_parameters(model, settings)
    wrapped = get_peft_model(model, lora_config(settings, model))
    assert p == sum(x.numel() for x in wrapped.parameters() if x.requires_grad)  # priced == trained
    matmul, bmm = _measure(wrapped, SEQ)
    attn_full_square = _attn_flops_per_ctx(cfg) * SEQ * SEQ  # what eager attention computes, per pass
    rule_attn_causal = 3 * _attn_flops_per_ctx(cfg) * SEQ * (SEQ + 1) // 2
    rule_matmul = lora_train_flops(cfg, [SEQ], p) - rule_attn_causal
    # the rule charges layer 0's q/k/v adapter input-gradients, which autograd skips: 3 x 2 x r x d per token
    skipped = 3 * 2 * settings.r * cfg.hidden_size * SEQ
    assert rule_matmul - skipped == pytest.approx(matmul, rel=1e-9)
    assert bmm == pytest.approx(3 * attn_full_square, rel=1e-9)
    # and LoRA really is cheaper than full training, but far from free (frozen input-gradients)
    assert 0.6 < lora_train_flops(cfg, [SEQ], p) / train_flops(cfg, [SEQ]) < 0.9


def test_adapter_parameters_follow_target_modules():
    model = _zoo().model
    s = LoraSettings(r=4, target_modules=["q_proj", "v_proj"])
    priced = adapter_parameters(model, s)  # before wrapping: what the methods price
    wrapped = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    assert priced == sum(x.numel() for x in wrapped.parameters() if x.requires_grad) > 0


def test_unknown_target_module_lists_the_models_linear_names():
    model = _zoo().model
    with pytest.raises(ConfigError, match="'qkv'.*q_proj.*v_proj") as e:
        lora_config(LoraSettings(target_modules=["qkv"]), model)
    assert "\n" not in str(e.value)
    assert "lm_head" not in linear_names(model)


def test_bad_peft_settings_fail_in_one_line():
    with pytest.raises(ValueError, match="method.peft='qlora' is unknown"):
        check_peft("qlora", None)
    with pytest.raises(ValueError, match="method.lora.r=0"):
        check_peft("lora", {"r": 0})
    with pytest.raises(TypeError, match="method sequential does not support method.peft"):
        make_config(SequentialConfig, {"peft": "lora"}, "sequential")  # set it on a stage instead


def _grpo(tmp_path, task, **hp):
    policy = _zoo()
    ledger = Ledger(limit=1e18)
    ledger.listeners = make_ledger(ledger.kind, ledger.limit, tmp_path, progress=False).listeners
    cfg = dict(prompts_per_step=2, num_generations=4, max_completion_length=8, learning_rate=1e-2, max_steps=1,
               checkpoint_every=0, peft="lora", lora={"r": 4, "alpha": 8, "dropout": 0.0}, **hp)
    summary = GRPO(**cfg).train(policy, task, ledger, tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    return policy, summary, rows


def test_grpo_lora_trains_adapters_and_charges_the_lora_rule(tmp_path, toy_task):
    base = _zoo().model.state_dict()
    # a dense reward (a hash of the text): any two different completions differ, so GRPO has an advantage
    policy, summary, rows = _grpo(tmp_path, toy_task("hash", n_train=16), beta=1e-3)
    params = summary["parameters"]
    assert summary["peft"] == "lora" and 0 < params["trainable"] < params["total"]
    lora_params = params["trainable"]
    ex = rows[0]["extras"]
    parts = step_flops(policy.model.config, ex["prompt_tokens"], ex["completion_tokens"],
                       (ex["prompt_tokens"], ex["completion_tokens"]),
                       reference=True, old_logprobs=False, lora_params=lora_params)
    assert rows[0]["flops"] == pytest.approx(sum(parts.values()))
    assert ex["flops_step"]["reference"] > 0  # beta > 0: the adapter-disabled reference forward is charged
    assert ex["flops_step"] == pytest.approx(parts)
    # the adapters were merged back: a plain model whose weights moved
    assert not hasattr(policy.model, "peft_config")
    assert any(not torch.equal(base[k], v) for k, v in policy.model.state_dict().items() if k in base)


def test_ppo_lora_reports_policy_adapters_and_full_value_model(tmp_path):
    policy = _zoo()
    ledger = Ledger(limit=1e18)
    ledger.listeners = make_ledger(ledger.kind, ledger.limit, tmp_path, progress=False).listeners
    summary = PPO(prompts_per_step=4, num_ppo_epochs=1, response_length=4, learning_rate=1e-3, max_updates=1,
                  rollout_batch_size=4, peft="lora", lora={"r": 4, "alpha": 8, "dropout": 0.0}).train(
        policy, Countdown(n_train=16), ledger, tmp_path)
    p = summary["parameters"]
    assert 0 < p["policy"]["trainable"] < p["policy"]["total"]
    assert p["value"]["trainable"] == p["value"]["total"]  # the value model trains fully
    assert ledger.steps == 1 and not hasattr(policy.model, "peft_config")


def test_grpo_lora_grid_is_opt_in(compose):
    from harness.runner.experiment import list_runs
    from harness.runner.schema import validate
    default = list_runs(compose("experiment=qiu2025_table1_cpu"))
    with_lora = compose("experiment=qiu2025_table1_cpu", "+include=[GRPO-LoRA]")
    validate(with_lora)
    lora_runs = [r for r in list_runs(with_lora) if r.grid == "GRPO-LoRA"]
    assert not [r for r in default if r.grid == "GRPO-LoRA"]
    assert len(list_runs(with_lora)) == len(default) + len(lora_runs) == len(default) + 6
    assert all("method.peft=lora" in r.overrides for r in lora_runs)
    with pytest.raises(ConfigError, match="'GRPO'.*not an optional grid.*include=\\[GRPO-LoRA\\]"):
        validate(compose("experiment=qiu2025_table1_cpu", "+include=[GRPO]"))
