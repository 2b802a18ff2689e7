"""GRPO's reference model is held in the precision the policy trains in (the fp32 master), so the KL is exactly 0
before the first update, also for a bf16 model (methods/grpo.py _trl_args; a bf16 reference gave 4.8e-5 at step 1
on CPU: the policy's fp32 forward against a rounded one).

    python -m pytest tests/test_grpo_reference.py -q
"""
import json

import torch

from harness.core.budget import Ledger
from harness.core.steplog import make_ledger


def test_a_bf16_models_reference_is_fp32_and_the_first_kl_is_exactly_zero(tmp_path, tiny_policy, toy_task,
                                                                         monkeypatch):
    from trl import GRPOTrainer

    from methods.grpo import GRPO
    policy = tiny_policy(eval_mode=False)
    policy.model.to(torch.bfloat16)
    refs = []
    real_init = GRPOTrainer.__init__

    def spy(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        refs.append(self.ref_model)

    monkeypatch.setattr(GRPOTrainer, "__init__", spy)
    ledger = Ledger(limit=1e18)
    ledger.listeners = make_ledger(ledger.kind, ledger.limit, tmp_path, progress=False).listeners
    GRPO(prompts_per_step=4, num_generations=4, max_completion_length=8, learning_rate=1e-3, beta=1e-3,
         max_steps=2, checkpoint_every=0).train(policy, toy_task("digits", n_train=32), ledger, tmp_path)
    (ref,) = refs
    assert {p.dtype for p in ref.parameters()} == {torch.float32}
    kl = [json.loads(line)["extras"]["kl"] for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert kl[0] == 0.0, kl  # the same weights, the same fp32 forward: not merely small
    assert kl[1] > 0, kl  # and the KL does see the first update (lr 1e-3 moves the policy)
