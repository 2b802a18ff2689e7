"""Where the largest updates land: each group's share of the top-k and top-fraction largest |delta|, and
each group's largest |delta|.

The paper: ES's top 100 are mostly norm weights (72 and 80 of 100), GRPO's all token embeddings
(Llama-3.2-3B) or LM head (R1-Distill). Selection is exact and memory-light: each tensor's own top
candidates first, then the global top among them. Ties at the cut are broken by torch.topk.
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


def localisation(delta: dict[str, torch.Tensor], top_k: int = 100, top_fraction: float = 0.001,
                 n_list: int = 10) -> dict:
    """Group counts among the top_k and the top `top_fraction` of coordinates, max |delta| per group,
    and the first `n_list` coordinates (rank, group, parameter, index, |delta|)."""
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
            "n_nonzero": nonzero,
            "top": [{"rank": r + 1, "group": group_of(n), "param": n, "index": i, "abs": v}
                    for r, (v, n, i) in enumerate(ranked[:n_list])]}
