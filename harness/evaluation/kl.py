"""Mean per-token KL divergence of a policy from a reference (base) model on sampled completions.

The k3 estimator (Schulman 2020): for tokens sampled from the policy, with
log_r = log p_ref(token) - log p_policy(token), KL(policy || ref) ~= mean of exp(log_r) - 1 - log_r.
It is unbiased, always >= 0, and exactly 0 when the two models agree. The ES paper's conciseness
table reports reward at a given KL, so the KL is measured on the same completions that are scored.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


@torch.no_grad()
def _token_logprobs(model, ids: torch.Tensor, mask: torch.Tensor, start: list[int], length: list[int]) -> list[torch.Tensor]:
    logits = model(input_ids=ids, attention_mask=mask).logits.float()
    logp = F.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None])[..., 0]
    # the token at position t is predicted by the logits at t-1
    return [logp[i, s - 1:s - 1 + n] for i, (s, n) in enumerate(zip(start, length))]


def per_token_kl(policy_model, ref_model, prompt_ids: list[list[int]], completion_ids: list[list[int]],
                 pad_id: int, batch_size: int = 64) -> list[float]:
    """Mean k3 KL over the tokens of each (prompt, completion) pair; 0.0 for an empty completion.

    Args:
        policy_model: the model the completions were sampled from.
        ref_model: the reference (base) model.
        prompt_ids, completion_ids: aligned token-id lists, one pair per completion.
        pad_id: id used to right-pad a batch (masked out).
        batch_size: pairs per forward pass.
    """
    out: list[float] = []
    device = next(policy_model.parameters()).device
    for b in range(0, len(prompt_ids), batch_size):
        seqs = [p + c for p, c in zip(prompt_ids[b:b + batch_size], completion_ids[b:b + batch_size])]
        width = max(map(len, seqs))
        ids = torch.full((len(seqs), width), pad_id, device=device)
        mask = torch.zeros_like(ids)
        for i, s in enumerate(seqs):
            ids[i, :len(s)], mask[i, :len(s)] = torch.tensor(s, device=device), 1
        start = [len(p) for p in prompt_ids[b:b + batch_size]]
        length = [len(c) for c in completion_ids[b:b + batch_size]]
        pol = _token_logprobs(policy_model, ids, mask, start, length)
        ref = _token_logprobs(ref_model, ids, mask, start, length)
        for lp, lr in zip(pol, ref):
            log_r = lr - lp
            out.append(float((log_r.exp() - 1 - log_r).mean()) if len(lp) else 0.0)
    return out
