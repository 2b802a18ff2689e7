"""The HF engine: today's path (harness.policy.generate on the policy's own model, ES ops in place)."""
from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from harness.engines.base import Engine, master_checksum
from harness.policy import Generation, Policy, generate
from methods.es_core import NoiseSpec, es_update, perturb, restore


class HFEngine(Engine):
    """transformers `generate` on `policy.model`; ES perturbs that model's parameters in place."""

    name = "hf"

    def __init__(self, policy: Policy):
        self.policy = policy
        named = list(policy.model.named_parameters())  # tied weights appear once
        self.names = [n for n, _ in named]
        self.params = [p for _, p in named]
        self.master: list[torch.Tensor] | None = None
        self._buf: torch.Tensor | None = None
        self.spec = NoiseSpec()

    def generate(self, prompts, *, n=1, greedy=True, temperature=1.0, top_p=1.0, max_new_tokens=32,
                 batch_size=64, seed=None) -> Generation:
        return generate(self.policy, prompts, n=n, greedy=greedy, temperature=temperature, top_p=top_p,
                        max_new_tokens=max_new_tokens, batch_size=batch_size, seed=seed)

    @torch.no_grad()
    def init_master(self, path=None) -> None:
        if path is None:
            self.master = [p.detach().float().clone() for p in self.params]
        else:
            saved = load_file(str(path), device=str(self.params[0].device))
            missing = [n for n in self.names if n not in saved]
            if missing:
                raise ValueError(f"{path} lacks {len(missing)} of the model's tensors (e.g. {missing[0]}); "
                                 "it was written for a different model")
            self.master = [saved[n].float().clone() for n in self.names]
        self._buf = torch.empty(max(p.numel() for p in self.params), dtype=torch.float32,
                                device=self.params[0].device)
        self.restore()

    def save_master(self, path) -> None:
        save_file({n: m.detach().cpu().contiguous() for n, m in zip(self.names, self.master)}, str(path))

    def set_noise(self, indices=None, rank=None) -> None:
        self.spec = NoiseSpec(None if indices is None else tuple(indices), rank)

    def perturb(self, member_seed: int, sigma: float) -> None:
        perturb(self.params, self.master, member_seed, sigma, self._buf, self.spec)

    def restore(self) -> None:
        restore(self.params, self.master)

    def update(self, member_seeds, z, alpha, n=None) -> float:
        norm = es_update(self.master, member_seeds, z, alpha, self._buf, self.spec, n)
        self.restore()
        return norm

    def checksum(self) -> str:
        return master_checksum(self.master)

    @torch.no_grad()
    def load_from(self, model: torch.nn.Module) -> None:
        if model is not self.policy.model:
            for p, q in zip(self.params, model.parameters()):
                p.copy_(q)
