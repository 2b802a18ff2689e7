"""The harness's GRPO on the zoo is bit-identical to a plain TRL 1.12 script with the same GRPOConfig.

The plain script below is what a researcher would write from TRL's docs (GRPOTrainer on a saved model folder, the
task's reward, DeepSeekMath's GRPO settings: loss_type grpo, constant learning rate, beta > 0, one iteration, clip
0.2). Everything the harness adds (the ledger, token recorder, BOS handling, fp32 reference, explicit vLLM switch)
must leave every step's reward, loss, KL and grad-norm, and the final weights, exactly equal on the zoo's char
tokenizer in fp32, the quickstart's setting.

    python -m pytest tests/test_grpo_plain_trl.py -q
"""
import json

import torch

from harness.core.budget import Ledger
from harness.core.policy import Policy
from harness.core.steplog import make_ledger

STEPS, SEED = 3, 0
HP = dict(prompts_per_step=4, num_generations=4, max_completion_length=8, learning_rate=1e-3, beta=1e-3)


def plain_trl(model_dir, tok, task, out):
    """A plain TRL GRPO run: returns (per-step logs, trained model)."""
    from trl import GRPOConfig, GRPOTrainer
    args = GRPOConfig(output_dir=str(out), report_to=[], save_strategy="no", logging_steps=1, disable_tqdm=True,
                      use_cpu=True, bf16=False, seed=SEED, learning_rate=HP["learning_rate"],
                      lr_scheduler_type="constant", max_steps=STEPS, per_device_train_batch_size=16,
                      gradient_accumulation_steps=1, num_generations=HP["num_generations"],
                      max_completion_length=HP["max_completion_length"], temperature=1.0, beta=HP["beta"],
                      loss_type="grpo", num_iterations=1, epsilon=0.2)

    def reward(completions, **columns):
        return task.reward(completions=completions, **columns)
    reward.__name__ = task.name
    trainer = GRPOTrainer(model=str(model_dir), reward_funcs=reward, args=args,
                          train_dataset=task.load("train"), processing_class=tok)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h and "reward" in h]
    return logs, trainer.model


def test_harness_grpo_equals_plain_trl_on_the_zoo(tmp_path, tiny_policy, toy_task):
    from transformers import AutoModelForCausalLM

    from methods.grpo import GRPO
    task = toy_task("digits", n_train=64)
    start = tiny_policy(eval_mode=False)
    model_dir = tmp_path / "model"
    start.model.save_pretrained(model_dir)
    start.tokenizer.save_pretrained(model_dir)
    plain_logs, plain_model = plain_trl(model_dir, start.tokenizer, task, tmp_path / "plain")

    policy = Policy(AutoModelForCausalLM.from_pretrained(model_dir), start.tokenizer, str(model_dir))
    run_dir = tmp_path / "harness"
    # A budget never reached (max_steps stops both runs): every step is whole. A budget ending mid-step would
    # run the harness's last step at the learning rate x f (the stop rule, harness/core/budget.py), which a
    # plain TRL script does not do, so its last weights would differ by construction (tests/test_stop_rule.py).
    ledger = Ledger(limit=1e18)
    ledger.listeners = make_ledger(ledger.kind, ledger.limit, run_dir, progress=False).listeners
    GRPO(**HP, max_steps=STEPS, seed=SEED, checkpoint_every=0).train(policy, task, ledger, run_dir)
    rows = [{**r, **r["extras"]} for r in map(json.loads, (run_dir / "train_log.jsonl").read_text().splitlines())]

    assert len(rows) == len(plain_logs) == STEPS
    for ours, plain in zip(rows, plain_logs):
        assert (ours["reward_mean"], ours["loss"], ours["kl"], ours["grad_norm"]) == (
            plain["reward"], plain["loss"], plain["kl"], plain["grad_norm"])
    assert rows[0]["kl"] == 0.0 and rows[-1]["kl"] > 0  # the reference is used, and KL starts at exactly 0
    theirs = dict(plain_model.named_parameters())
    for name, p in policy.model.named_parameters():
        assert torch.equal(p, theirs[name]), name
    assert any(not torch.equal(p, q) for p, q in zip(policy.model.parameters(), start.model.parameters()))
