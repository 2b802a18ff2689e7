"""Mean per-token entropy of the policy's own samples on a fixed held-out prompt set, during training.

For each sampled completion token t, H_t = -sum_v p(v | prefix) log p(v | prefix), the entropy of the
whole next-token distribution at temperature T (exact, not a one-sample estimate), averaged over all
completion tokens of all samples. The paper reports token entropy falling under GRPO and moving
little under ES. Measured by an `EvalEvery` listener (harness/core/steplog.py) on the first
`entropy_prompts` validation prompts of the training task (or, with `analysis.entropy_task=gpqa`,
the first test prompts of that held-out task, as NOTE-076 measured it during GSM8K training) with a
fixed sampling seed, against FLOPs; recorded in record.entropy (each row names its task), never charged.
A task with no such split (MATH-500 and HumanEval are evaluation-only) or an empty one raises NoPrompts
when the listener is built, and the run goes on without it (harness/runner/run.py notes it in the record).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from harness.core.policy import Policy, generate
from tasks.base import TaskDataError


class NoPrompts(ValueError):
    """The task has no prompts on the split entropy is measured on; the message says which and why."""


@torch.no_grad()
def token_entropies(model, prompt_ids: list[list[int]], completion_ids: list[list[int]], pad_id: int,
                    temperature: float = 1.0, batch_size: int = 64) -> list[float]:
    """Entropy (nats) of the next-token distribution at every completion token, flattened in order."""
    out: list[float] = []
    device = next(model.parameters()).device
    for b in range(0, len(prompt_ids), batch_size):
        ps, cs = prompt_ids[b:b + batch_size], completion_ids[b:b + batch_size]
        seqs = [p + c for p, c in zip(ps, cs)]
        width = max(map(len, seqs))
        ids = torch.full((len(seqs), width), pad_id, device=device)
        mask = torch.zeros_like(ids)
        for i, s in enumerate(seqs):
            ids[i, :len(s)], mask[i, :len(s)] = torch.tensor(s, device=device), 1
        logits = model(input_ids=ids, attention_mask=mask).logits.float() / temperature
        logp = F.log_softmax(logits, dim=-1)
        ent = -(logp.exp() * logp).sum(-1)  # [batch, width]: entropy of the distribution after each position
        for i, (p, c) in enumerate(zip(ps, cs)):
            out += ent[i, len(p) - 1:len(p) - 1 + len(c)].tolist()  # token t is predicted at position t-1
    return out


def sample_entropy(policy: Policy, prompts: list[str], n: int, max_new_tokens: int, temperature: float = 1.0,
                   seed: int = 1234) -> dict:
    """Sample `n` completions per prompt and return their mean per-token entropy and token count."""
    g = generate(policy, prompts, n=n, greedy=False, temperature=temperature, max_new_tokens=max_new_tokens,
                 batch_size=max(1, len(prompts) * n), seed=seed)
    enc = policy.tokenizer([policy.format(p) for p in prompts], add_special_tokens=False)["input_ids"]
    pairs = [(enc[i], c) for i, cs in enumerate(g.completion_ids) for c in cs if c]
    if not pairs:
        return {"entropy": float("nan"), "entropy_tokens": 0}
    ents = token_entropies(policy.model, [p for p, _ in pairs], [c for _, c in pairs], policy.tokenizer.pad_token_id,
                           temperature)
    return {"entropy": sum(ents) / len(ents), "entropy_tokens": len(ents)}


def entropy_fn(policy: Policy, task, n_prompts: int, n_samples: int, temperature: float = 1.0,
               split: str = "validation"):
    """The listener's callback: entropy on the first `n_prompts` prompts of `split` (a fixed set).

    Raises:
        NoPrompts: `split` does not exist for the task, or holds no prompts.
    """
    try:
        rows = task.load(split)
    except TaskDataError as e:  # e.g. "MATH-500 is evaluation-only: there is no validation split"
        raise NoPrompts(str(e)) from None
    if len(rows) == 0 or "prompt" not in rows.column_names:  # an empty file's Dataset has no columns at all
        raise NoPrompts(f"{getattr(task, 'name', type(task).__name__)} has no {split} prompts")
    prompts = rows.select(range(min(n_prompts, len(rows))))["prompt"]

    def fn() -> dict:
        return {**sample_entropy(policy, prompts, n_samples, task.max_new_tokens, temperature),
                "task": task.name, "split": split}
    return fn
