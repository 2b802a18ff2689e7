"""GRPO through TRL (methods/grpo.py) on a tiny random Qwen2 model, on CPU.

Run: python -m pytest tests/test_grpo.py -q

Each training run is 1-2 steps of 4 prompts x 4 completions x 8 new tokens; the FLOPs the ledger
was charged are recomputed from the per-sequence token counts the method logged, and those counts
are checked against what TRL itself reports (its `num_tokens` and mean completion length).
"""
import json

import pytest
import torch

from harness.core.budget import BudgetError, Ledger
from harness.core.flops import generation_flops, scoring_flops
from harness.core.steplog import make_ledger
from methods.grpo import GRPO, GRPOMethodConfig

HP = dict(prompts_per_step=4, num_generations=4, max_completion_length=8, learning_rate=1e-3, beta=0.0)
BATCH = 16  # prompts_per_step x num_generations


@pytest.fixture
def policy(tiny_policy):
    """A fresh tiny policy in training mode, as make_model builds it (a test checks GRPO leaves it in eval)."""
    return tiny_policy(eval_mode=False)


@pytest.fixture(scope="session")
def task(toy_task):
    """Countdown prompts with a dense reward (share of digits in the completion), so that a random
    model's completions differ in reward and GRPO has a non-zero advantage to follow."""
    return toy_task("digits", n_train=64)


def run(tmp_path, policy, task, ledger=None, **overrides):
    """Train `policy`; return (policy, params before, ledger, train_log rows, summary)."""
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    ledger = ledger or Ledger(limit=1e18)
    ledger.listeners = make_ledger(ledger.kind, ledger.limit, tmp_path, progress=False).listeners
    summary = GRPO(**{**HP, **overrides}).train(policy, task, ledger, tmp_path)
    logged = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    rows = [{**r, **r["extras"]} for r in logged]  # the method's numbers are the StepStats' extras
    return policy, before, ledger, rows, summary


def hand_flops(config, row, *, updates_per_forward: int) -> float:
    """generation + (3 update + extra scoring forwards) x forward, from the logged token counts."""
    p, c = row["prompt_tokens"], row["completion_tokens"]
    scoring = scoring_flops(config, p, c)  # LM head at completion positions only (logits_to_keep)
    return generation_flops(config, p, c) + updates_per_forward * scoring


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory, tiny_policy, task):
    return run(tmp_path_factory.mktemp("grpo"), tiny_policy(eval_mode=False), task, max_steps=2)


def test_two_steps_train_and_charge(two_steps):
    policy, before, ledger, rows, summary = two_steps
    assert summary["steps"] == ledger.steps == len(rows) == 2
    assert ledger.flops > 0 and ledger.samples == 2 * BATCH
    changed = [n for n, p in policy.model.named_parameters() if not torch.equal(p, before[n])]
    assert changed, "no parameter changed after two GRPO steps"
    assert not policy.model.training


def test_step_flops_match_hand_computation_and_trl_counts(two_steps):
    policy, _, ledger, rows, _ = two_steps
    cfg, seen = policy.model.config, 0
    for row, charged in zip(rows, ledger.history):
        assert len(row["prompt_tokens"]) == len(row["completion_tokens"]) == BATCH
        assert all(1 <= c <= 8 for c in row["completion_tokens"])
        seen += sum(row["prompt_tokens"]) + sum(row["completion_tokens"])
        assert seen == row["trl_num_tokens"] == row["tokens_seen"]  # TRL's own prompt+completion token total
        assert charged.flops == pytest.approx(row["flops"]) and row["reward_mean"] is not None
        mean_len = sum(row["completion_tokens"]) / BATCH
        assert mean_len == pytest.approx(row["completion_mean_len"])
        assert sum(row["flops_step"].values()) == pytest.approx(hand_flops(cfg, row, updates_per_forward=3))
    assert ledger.flops == pytest.approx(sum(hand_flops(cfg, r, updates_per_forward=3) for r in rows))
    assert ledger.executed_flops >= ledger.flops  # what ran, padding included (harness/core/budget.py)


def test_tiny_budget_stops_after_exactly_one_step(two_steps, tmp_path, policy, task):
    first_step = two_steps[2].history[0].flops
    _, _, ledger, rows, summary = run(tmp_path, policy, task, ledger=Ledger(limit=0.9 * first_step))
    assert summary["steps"] == ledger.steps == len(rows) == 1
    assert ledger.exhausted and ledger.samples == BATCH
    # the stop rule (harness/core/budget.py): the step is charged pro rata, 0.9 of it, to the FLOP
    assert ledger.flops == ledger.limit and ledger.last_step_fraction == pytest.approx(0.9)


def test_budget_below_one_step_fails_before_training(tmp_path, policy, task):
    with pytest.raises(BudgetError, match="raise budget.flops"):
        run(tmp_path, policy, task, ledger=Ledger(limit=1e3))


def test_beta_builds_reference_from_saved_initial_model(tmp_path, policy, task):
    policy, _, ledger, rows, _ = run(tmp_path, policy, task, beta=1e-3, max_steps=1)
    assert (tmp_path / "init_model" / "config.json").is_file()
    assert policy.model.config.name_or_path != str(tmp_path / "init_model")  # restored after TRL built it
    # Before the first update the policy equals the reference, so a reference built from the saved
    # initial weights gives KL 0 (a different model would not).
    assert rows[0]["kl"] == pytest.approx(0.0, abs=1e-7)
    assert ledger.history[0].extras["flops_step"]["reference"] > 0
    row, cfg = rows[0], policy.model.config
    scoring = scoring_flops(cfg, row["prompt_tokens"], row["completion_tokens"])
    assert row["flops_step"]["reference"] == pytest.approx(scoring)
    assert sum(row["flops_step"].values()) == pytest.approx(hand_flops(cfg, row, updates_per_forward=4))


def test_num_iterations_reuses_batch_and_pays_old_logprobs(tmp_path, policy, task):
    policy, _, ledger, rows, _ = run(tmp_path, policy, task, num_iterations=2, max_steps=2)
    cfg = policy.model.config
    first, second = rows
    assert sum(first["flops_step"].values()) == pytest.approx(hand_flops(cfg, first, updates_per_forward=4))
    assert second["prompt_tokens"] == [] and second["flops_step"]["generation"] == 0
    assert second["flops_step"]["update"] == first["flops_step"]["update"]  # same batch, trained again
    assert ledger.samples == BATCH


def test_prompts_go_through_the_chat_template(tmp_path, policy, task):
    policy.tokenizer.chat_template = "{{ 'SYSTEM: solve the countdown problem. USER: ' + messages[-1]['content'] }}A:"
    policy.chat_template = True
    _, _, _, rows, _ = run(tmp_path, policy, task, max_steps=1)
    wrapper = len(policy.format(""))  # 45 characters around each raw prompt (~10 characters)
    raw = {len(p) for p in task.load("train")["prompt"]}
    assert all(n - wrapper in raw for n in rows[0]["prompt_tokens"])


@pytest.mark.parametrize("bad, message", [
    (dict(loss_type="ppo"), "use one of grpo, dr_grpo, dapo"),
    (dict(num_generations=1), "at least 2"),
    (dict(gradient_accumulation_steps=3), "must divide"),
    (dict(learning_rate=0.0), "must be > 0"),
    (dict(num_iterations=2, checkpoint_every=3), "multiple of method.num_iterations"),
])
def test_config_validation_names_the_fix(bad, message):
    with pytest.raises(ValueError, match=message):
        GRPOMethodConfig(**bad)


def test_method_is_data_and_rejects_unknown_keys():
    assert (GRPO.name, GRPO.label_keys, GRPO.trains) == ("grpo", ("beta", "learning_rate"), True)
    with pytest.raises(TypeError, match="grpo has no hyperparameter 'lr'; valid: learning_rate, beta"):
        GRPO(lr=1e-5)


def test_a_bf16_model_trains_fp32_weights_that_a_tiny_rate_moves(tmp_path, policy, task, monkeypatch):
    """GRPO trains an fp32 copy of a bf16 model (TRL's own default when it loads a model): one AdamW step at lr
    1e-6 moves most fp32 weights, where bf16 weights would keep nearly all (half a bf16 ulp is ~1e-3 of a weight).
    The reference and vLLM read init_model, written in bf16; the model comes back in bf16 for evaluation."""
    import methods.grpo as grpo
    policy.model.to(torch.bfloat16)
    start = {n: p.detach().float().clone() for n, p in policy.model.named_parameters()}
    seen = {}
    real = grpo.trained_model

    def spy(accelerator, model, *args, **kwargs):  # the trained module, before it is cast back
        out = real(accelerator, model, *args, **kwargs)
        seen.update({n: p.detach().clone() for n, p in out.named_parameters()})
        return out

    monkeypatch.setattr(grpo, "trained_model", spy)
    policy, _, _, _, summary = run(tmp_path, policy, task, learning_rate=1e-6, beta=1e-3, max_steps=1)
    assert summary["trained_dtype"] == "float32" and all(p.dtype == torch.float32 for p in seen.values())
    total = sum(t.numel() for t in start.values())
    moved = sum(int((seen[n] != start[n]).sum()) for n in start) / total
    kept_in_bf16 = sum(int((seen[n].bfloat16().float() != start[n]).sum()) for n in start) / total
    assert moved > 0.5 and kept_in_bf16 < 0.05 * moved, (moved, kept_in_bf16)
    assert policy.model.dtype == torch.bfloat16 and str(policy.model.config.dtype).endswith("bfloat16")
    assert json.loads((tmp_path / "init_model" / "config.json").read_text())["dtype"] == "bfloat16"


def test_micro_batches_bound_the_device_batch_and_keep_the_step(tmp_path, policy, task):
    """method.micro_batch_size splits each device's share of a step into micro-batches (gradients accumulated):
    TRL gets the bounded per-device batch and as many accumulation steps, the same generation batch, and the
    run's token cross-check and charge still hold; null sizes it from the estimated activations."""
    from harness.core.model_shapes import load_shape
    from methods.grpo import micro_batches
    ledger = Ledger(limit=1e18)
    args = GRPO(**{**HP, "micro_batch_size": 4})._trl_args(policy, ledger, tmp_path, 8, longest_prompt=40)
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (4, 4)
    assert args.steps_per_generation == 4 and args.generation_batch_size == BATCH
    odd = GRPO(**{**HP, "micro_batch_size": 3, "gradient_accumulation_steps": 2})  # largest divisor of 8 <= 3
    assert (odd._trl_args(policy, ledger, tmp_path, 8).per_device_train_batch_size,
            odd._trl_args(policy, ledger, tmp_path, 8).gradient_accumulation_steps) == (2, 8)
    whole = GRPO(**HP)._trl_args(policy, ledger, tmp_path, 8, longest_prompt=40)  # null: a tiny model fits whole
    assert (whole.per_device_train_batch_size, whole.gradient_accumulation_steps) == (BATCH, 1)
    # null at 1.5B, 64 completions of 1,024 tokens after 150-token prompts, bf16 autocast on the fp32 master
    # (harness/core/train_memory.py: ~5.6 GiB of activations and logits each): one per micro-batch; with gradient
    # checkpointing (~2.0 GiB) three fit, so the largest divisor of 64 at most three: two
    cfg = GRPOMethodConfig(prompts_per_step=8, num_generations=8)
    shape = load_shape("Qwen/Qwen2.5-1.5B-Instruct")
    assert micro_batches(cfg, shape, 1, 150, 1024, 2) == (1, 64)
    cfg.gradient_checkpointing = True
    assert micro_batches(cfg, shape, 1, 150, 1024, 2) == (2, 32)
    _, _, ledger, rows, summary = run(tmp_path, policy, task, micro_batch_size=4, max_steps=1)
    assert summary["steps"] == 1 and ledger.samples == BATCH and len(rows[0]["completion_tokens"]) == BATCH
    with pytest.raises(ValueError, match="micro_batch_size=0 must be >= 1"):
        GRPOMethodConfig(micro_batch_size=0)


def test_a_launch_smaller_than_the_plan_is_refused_in_one_line():
    """On a GPU, GRPO and PPO on engine=hf refuse a launch the planner says is too small (one process for a 7B
    model, as a Slurm job of the submitit launcher runs it), naming the accelerate launch that fits."""
    from harness.core.distributed import DistributedError
    from harness.core.model_shapes import load_shape
    from methods.ppo import PPO
    small, big = load_shape("Qwen/Qwen2.5-1.5B-Instruct"), load_shape("Qwen/Qwen2.5-7B-Instruct")
    GRPO()._check_gpus(small, "bfloat16", 80_000_000_000, 150, 1024)  # fits one GPU: nothing raised
    with pytest.raises(DistributedError, match=r"method=grpo on .* needs 4 GPUs sharded with FSDP .* runs in "
                                               r"one process; launch it with accelerate .*--num_processes 4") as e:
        GRPO()._check_gpus(big, "bfloat16", 80_000_000_000, 150, 1024)
    assert "\n" not in str(e.value)
    with pytest.raises(DistributedError, match=r"method=ppo on .* needs \d+ GPUs sharded"):
        PPO()._check_gpus(big, 80_000_000_000, 1174)
