"""The HF engine: harness.core.policy.generate on the policy's own model (its weights are the policy's)."""
from __future__ import annotations

import torch

from harness.engines.base import Engine
from harness.core.policy import Generation, Policy, generate


class HFEngine(Engine):
    """transformers `generate` on `policy.model`; whoever changes that model's weights changes the engine's."""

    name = "hf"

    def __init__(self, policy: Policy):
        self.policy = policy

    def generate(self, prompts, *, n=1, greedy=True, temperature=1.0, top_p=1.0, max_new_tokens=32,
                 batch_size=64, seed=None, progress=None) -> Generation:
        return generate(self.policy, prompts, n=n, greedy=greedy, temperature=temperature, top_p=top_p,
                        max_new_tokens=max_new_tokens, batch_size=batch_size, seed=seed, progress=progress)

    @torch.no_grad()
    def load_from(self, model: torch.nn.Module) -> None:
        if model is not self.policy.model:
            for p, q in zip(self.policy.model.parameters(), model.parameters()):
                p.copy_(q)
