"""PPO (methods/ppo.py): the reward adapter scores what the task scores; updates train and charge the ledger.

    python -m pytest tests/test_ppo.py -q
"""
from __future__ import annotations

import copy
import json

import pytest
import torch
from trl.experimental.utils import get_reward

from harness.core.budget import BudgetError, Ledger
from harness.core.chartok import build_char_tokenizer
from harness.core.flops import forward_flops, generation_flops
from harness.core.steplog import make_ledger
from methods.ppo import PPO, TaskRewardModel, make_value_model, update_flops
from tasks.countdown import Countdown


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


@pytest.fixture
def policy(tiny_policy, tok):
    """A fresh tiny policy on the module's tokenizer, in training mode as make_model builds it."""
    return tiny_policy(tok, eval_mode=False)


@pytest.mark.parametrize("pad_is_eos", [False, True])
def test_reward_adapter_matches_task_reward(tok, pad_is_eos):
    if pad_is_eos:  # as load_policy does for tokenizers without a pad token: EOS is masked like padding
        tok = copy.deepcopy(tok)
        tok.pad_token = tok.eos_token
    task = Countdown(n_train=64)
    rows = task.load("train").to_list()
    prompt_ids = tok([r["prompt"] for r in rows], add_special_tokens=False)["input_ids"]
    rm = TaskRewardModel(task, tok, rows, prompt_ids)
    # Prompts of different lengths, so the shorter ones are left-padded in the query.
    by_len = {len(ids): i for i, ids in enumerate(prompt_ids)}
    short, long = by_len[min(by_len)], by_len[max(by_len)]
    assert len(prompt_ids[long]) > len(prompt_ids[short])
    picks = [short, long, short, long]
    completions = [rows[short]["solution"], "(1+2)*3", "((((*/" * 3, rows[long]["solution"] + ")"]
    # The malformed one ran out of tokens without EOS, so it is the longest: generation stops
    # when every row has hit EOS or the length limit; shorter rows end in EOS then padding.
    eos = [True, True, False, True]
    width = max(len(c) + e for c, e in zip(completions, eos))
    assert width == len(completions[2])
    context = max(len(prompt_ids[i]) for i in picks)
    seqs = []
    for i, text, stop in zip(picks, completions, eos):
        query = [tok.pad_token_id] * (context - len(prompt_ids[i])) + prompt_ids[i]
        resp = tok(text, add_special_tokens=False)["input_ids"] + ([tok.eos_token_id] if stop else [])
        resp = (resp + [tok.pad_token_id] * width)[:width]
        seqs.append(query + resp)
    query_responses = torch.tensor(seqs)
    _, scores, _ = get_reward(rm, query_responses, tok.pad_token_id, context)  # exactly TRL's call
    expected = task.reward(completions, nums=[rows[i]["nums"] for i in picks], target=[rows[i]["target"] for i in picks])
    assert expected == [1.0, 0.0, 0.0, 0.0]  # correct, wrong, malformed, extra token
    assert scores.tolist() == expected
    scored = rm.drain()
    assert [s["prompt_tokens"] for s in scored] == [len(prompt_ids[i]) for i in picks]
    assert [s["completion_tokens"] for s in scored] == [len(c) + e for c, e in zip(completions, eos)]
    assert rm.drain() == []


def test_value_model_copies_backbone_with_fresh_scalar_head(policy):
    value = make_value_model(policy.model)
    assert value.score.out_features == 1
    for (n, a), (_, b) in zip(policy.model.model.state_dict().items(), value.model.state_dict().items()):
        assert torch.equal(a, b), n


def test_update_flops_counts_each_pass(policy):
    cfg = policy.model.config
    f = update_flops(cfg, [10, 12], [5, 8], num_ppo_epochs=2)
    # the policy's LM head only where log-probs are used (the completion positions)
    fwd = forward_flops(cfg, 15, head_positions=5) + forward_flops(cfg, 20, head_positions=8)
    assert f["generation"] == generation_flops(cfg, [10, 12], [5, 8])
    assert f["reference"] == fwd
    assert 0 < f["value"] < forward_flops(cfg, 15) + forward_flops(cfg, 20)  # same body, 1-output head
    assert f["train"] == pytest.approx(2 * 3 * (fwd + f["value"]))
    assert f["total"] == pytest.approx(f["generation"] + f["reference"] + f["value"] + f["train"])


def test_two_updates_train_and_charge(policy, tmp_path):
    before = [p.detach().clone() for p in policy.model.parameters()]
    task = Countdown(n_train=16, max_new_tokens=8)
    ledger = make_ledger("samples", 8, tmp_path, progress=False)  # 2 updates x 4 prompts
    out = PPO(prompts_per_step=4, learning_rate=1e-3, num_ppo_epochs=2, num_mini_batches=2).train(
        policy, task, ledger, tmp_path)
    assert out["steps"] == 2 and ledger.steps == 2 and ledger.samples == 8
    assert ledger.flops > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.model.parameters()))
    assert not policy.model.training
    log = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2] and log[-1]["flops"] == pytest.approx(ledger.flops)
    assert sum(r["extras"]["step_flops"] for r in log) == pytest.approx(ledger.flops)
    assert ledger.executed_flops > ledger.flops  # padding and TRL's LM head at prompt positions
    assert all(1 <= r["extras"]["completion_tokens_mean"] <= 8 for r in log)
    assert all(0 <= r["reward_mean"] <= 1 and r["extras"]["kl"] is not None for r in log)


def test_tiny_budget_stops_after_one_update(tok, policy, tmp_path):
    task = Countdown(n_train=16, max_new_tokens=8)
    prompt_ids = tok([r["prompt"] for r in task.load("train")], add_special_tokens=False)["input_ids"]
    cheapest = update_flops(policy.model.config, [min(map(len, prompt_ids))] * 4, [1] * 4, 1)["total"]
    method = PPO(prompts_per_step=4, num_ppo_epochs=1)
    with pytest.raises(BudgetError):
        method.train(policy, task, Ledger(limit=cheapest / 2), tmp_path)
    ledger = Ledger(limit=cheapest)  # any real update costs at least this much: it is charged pro rata
    assert method.train(policy, task, ledger, tmp_path)["steps"] == 1
    assert ledger.steps == 1 and ledger.samples == 4 and ledger.flops == cheapest
    assert 0 < ledger.last_step_fraction <= 1 and ledger.executed_flops > cheapest  # the whole update ran


def test_config_fails_early():
    with pytest.raises(ValueError, match="multiple of"):
        PPO(prompts_per_step=6, num_mini_batches=4)
    with pytest.raises(TypeError, match="ppo has no hyperparameter 'beta'; valid: kl_coef, learning_rate"):
        PPO(beta=1e-3)
    assert (PPO.name, PPO.label_keys, PPO.trains) == ("ppo", ("kl_coef", "learning_rate"), True)


def test_micro_batches_accumulate_to_the_same_update(tok, tiny_policy, tmp_path):
    """train_micro_batch is memory only: 4 prompts trained as 2 micro-batches of 2 (gradients accumulated,
    one optimizer step) move the weights as one batch of 4 does, up to the loss weighting of unequal
    response lengths; and it refuses several minibatches in one line."""
    task = Countdown(n_train=16, max_new_tokens=8)
    runs = {}
    for micro in (None, 2):
        pol = tiny_policy(tok, eval_mode=False)
        before = [p.detach().clone() for p in pol.model.parameters()]
        ledger = make_ledger("samples", 4, tmp_path / str(micro), progress=False)
        PPO(prompts_per_step=4, learning_rate=1e-3, num_ppo_epochs=1, train_micro_batch=micro).train(
            pol, task, ledger, tmp_path / str(micro))
        runs[micro] = torch.cat([(p.detach() - b).flatten() for p, b in zip(pol.model.parameters(), before)])
    whole, micro = runs[None], runs[2]
    assert whole.norm() > 0 and micro.norm() > 0
    cos = float(torch.dot(whole, micro) / (whole.norm() * micro.norm()))
    assert cos > 0.999, cos  # the same rollout, the same step; not bit-identical (summation order, weighting)
    assert float(micro.norm() / whole.norm()) == pytest.approx(1, abs=0.01)  # one Adam step, not two
    cfg = PPO(prompts_per_step=4, train_micro_batch=2)._trl_config(ledger, tmp_path, 8, 0, on_cpu=True)
    assert (cfg.per_device_train_batch_size, cfg.gradient_accumulation_steps) == (2, 2)
    with pytest.raises(ValueError, match="needs method.num_mini_batches=1"):
        PPO(prompts_per_step=4, num_mini_batches=2, train_micro_batch=2)
    with pytest.raises(ValueError, match="must divide method.prompts_per_step=4"):
        PPO(prompts_per_step=4, train_micro_batch=3)


def test_a_bf16_model_trains_fp32_policy_and_value_beside_a_bf16_reference(tok, tiny_policy, tmp_path, monkeypatch):
    """PPO trains an fp32 copy of a bf16 policy and an fp32 value model (bf16 weights would round AdamW's steps at
    lr 1e-6 away), with the frozen reference in the model's dtype; the policy comes back in bf16."""
    import methods.ppo as ppo
    pol = tiny_policy(tok, eval_mode=False)
    pol.model.to(torch.bfloat16)
    start = {n: p.detach().float().clone() for n, p in pol.model.named_parameters()}
    seen = {}
    real_trained, real_reference = ppo.trained_model, ppo.create_reference_model

    def trained(accelerator, prepared, part=None):
        out = real_trained(accelerator, prepared, part)
        seen["policy"] = {n: p.detach().clone() for n, p in out.named_parameters()}
        seen["value"] = {p.dtype for p in accelerator.unwrap_model(prepared).value_model.parameters()}
        return out

    def reference(model):
        seen["reference"] = real_reference(model)
        return seen["reference"]

    monkeypatch.setattr(ppo, "trained_model", trained)
    monkeypatch.setattr(ppo, "create_reference_model", reference)
    ledger = make_ledger("samples", 4, tmp_path, progress=False)
    task = Countdown(n_train=16, max_new_tokens=8)
    out = PPO(prompts_per_step=4, learning_rate=1e-6, num_ppo_epochs=1).train(pol, task, ledger, tmp_path)
    assert out["trained_dtype"] == "float32" and seen["value"] == {torch.float32}
    assert {p.dtype for p in seen["reference"].parameters()} == {torch.bfloat16}
    total = sum(t.numel() for t in start.values())
    moved = sum(int((seen["policy"][n] != start[n]).sum()) for n in start) / total
    kept_in_bf16 = sum(int((seen["policy"][n].bfloat16().float() != start[n]).sum()) for n in start) / total
    assert moved > 0.5 and kept_in_bf16 < 0.05 * moved, (moved, kept_in_bf16)
    assert pol.model.dtype == torch.bfloat16 and "forward" not in vars(pol.model)


def test_autocast_forward_runs_the_fp32_model_in_the_autocast_dtype():
    """What PPO wraps the fp32 policy's forward in on a GPU (rollouts run outside accelerate's autocast), on the
    CPU's autocast: the matmuls run in bf16 (the logits equal a bf16 autocast forward's) and come back fp32."""
    from methods.ppo import autocast_forward
    model = torch.nn.Linear(64, 64)
    x = torch.randn(4, 64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = model(x).float()
    plain = model(x)
    autocast_forward(model, "cpu", torch.bfloat16)
    out = model(x)
    assert out.dtype == torch.float32 and torch.equal(out, expected) and not torch.equal(out, plain)
