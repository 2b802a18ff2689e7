"""Where the largest updates land: each group's share of the top-k and top-fraction largest |delta|, and
each group's largest |delta|.

The paper: ES's top 100 are mostly norm weights (72 and 80 of 100), GRPO's all token embeddings
(Llama-3.2-3B) or LM head (R1-Distill). Selection is exact and memory-light: each tensor's own top
candidates first, then the global top among them. Ties at the cut are broken by torch.topk.

The maximum is reported as a set (max_set): in bf16/fp16 |delta| takes few distinct values, so many
coordinates can share the largest, and NOTE-076 counts such a set ("117 of 144 maximum-magnitude
coordinates are LayerNorm weights"); a top-k cut inside that tie is torch.topk's order, the set is not.
Ties are exact for runs kept in bf16/fp16: delta arrives as the float64 difference of the stored values
kept as fp32 (harness/analysis/update.py deltas), and the difference of two 2-byte floats fits fp32's
24-bit significand whenever they are within a factor 2^13 of each other or one is zero (a larger
move is rounded to fp32, relative error at most 2^-24). Each group's share of all coordinates
(group_share) sits beside the counts: "norms are 76 of the top 100" reads against "norms are 0.03%".
"""
from __future__ import annotations

import math

import torch

from harness.analysis.groups import GROUPS, group_of


def top_coordinates(delta: dict[str, torch.Tensor], k: int) -> list[tuple[float, str, int]]:
    """The k largest |delta| as (|delta|, parameter name, flat index), largest first."""
    cands_v, cands_t, cands_i = [], [], []
    names = list(delta)
    for t, name in enumerate(names):
        a = delta[name].reshape(-1).abs()
        v, i = torch.topk(a, min(k, a.numel()))
        cands_v.append(v)
        cands_i.append(i)
        cands_t.append(torch.full_like(i, t))
    v, i, t = torch.cat(cands_v), torch.cat(cands_i), torch.cat(cands_t)
    top = torch.topk(v, min(k, v.numel()))
    return [(float(v[j]), names[int(t[j])], int(i[j])) for j in top.indices]


def group_sizes(delta: dict[str, torch.Tensor]) -> dict[str, int]:
    """Coordinates per group (every tensor, updated or not), in GROUPS order."""
    n = {g: 0 for g in GROUPS}
    for name, d in delta.items():
        n[group_of(name)] += d.numel()
    return {g: v for g, v in n.items() if v}


def max_set(delta: dict[str, torch.Tensor]) -> dict:
    """Every coordinate whose |delta| equals the largest: {"max_abs", "size", "by_group"} (empty for no update)."""
    mx = max((float(d.abs().max()) for d in delta.values() if d.numel()), default=0.0)
    by = {g: 0 for g in GROUPS}
    if mx > 0:
        for name, d in delta.items():
            by[group_of(name)] += int((d.abs() == mx).sum())
    by = {g: v for g, v in sorted(by.items(), key=lambda kv: -kv[1]) if v}
    return {"max_abs": mx, "size": sum(by.values()), "by_group": by}


def localisation(delta: dict[str, torch.Tensor], top_k: int = 100, top_fraction: float = 0.001,
                 n_list: int = 10) -> dict:
    """Group counts among the top_k and the top `top_fraction` of coordinates, max |delta| per group, the
    max-|delta| set with its ties by group, each group's share of coordinates, and the first `n_list`
    coordinates (rank, group, parameter, index, |delta|)."""
    total = sum(d.numel() for d in delta.values())
    k_frac = max(1, math.ceil(top_fraction * total))
    nonzero = sum(int((d != 0).sum()) for d in delta.values())
    ranked = top_coordinates(delta, max(top_k, k_frac))

    def counts(rows):
        c = {g: 0 for g in GROUPS}
        for value, name, _ in rows:
            if value > 0:  # a zero update is not a "largest update"
                c[group_of(name)] += 1
        return {g: v for g, v in c.items() if v}
    maxes = {}
    for name, d in delta.items():
        g = group_of(name)
        maxes[g] = max(maxes.get(g, 0.0), float(d.abs().max()) if d.numel() else 0.0)
    return {"top_k": top_k, "top_k_counts": counts(ranked[:top_k]), "top_fraction": top_fraction, "k_fraction": k_frac,
            "top_fraction_counts": counts(ranked[:k_frac]), "max_abs": maxes, "n_coordinates": total,
            "n_nonzero": nonzero, "max_set": max_set(delta),
            "group_share": {g: n / total for g, n in group_sizes(delta).items()} if total else {},
            "top": [{"rank": r + 1, "group": group_of(n), "param": n, "index": i, "abs": v}
                    for r, (v, n, i) in enumerate(ranked[:n_list])]}
