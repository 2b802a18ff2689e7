"""Parameter groups of a decoder LM, named the way the drift and localisation tables report them.

Names follow HF Llama/Qwen2 module names (embed_tokens, self_attn.{q,k,v,o}_proj, mlp.*, *norm*,
lm_head); anything else falls in `other`. Tied weights: `named_parameters()` lists a tied tensor once
(under the embedding's name), so a tied LM head is counted once, in `embed`, and the tables say so.
"""
from __future__ import annotations

GROUPS = ("embed", "attn_q", "attn_k", "attn_v", "attn_o", "attn_bias", "mlp", "norm", "lm_head", "other")


def group_of(name: str) -> str:
    """The group of parameter `name` (e.g. model.layers.0.self_attn.q_proj.bias -> attn_bias)."""
    if "embed_tokens" in name or name.endswith("wte.weight"):
        return "embed"
    if "lm_head" in name:
        return "lm_head"
    if "norm" in name:
        return "norm"
    if "self_attn" in name or ".attn." in name:
        if name.endswith(".bias"):
            return "attn_bias"
        for p in ("q", "k", "v", "o"):
            if f"{p}_proj" in name:
                return f"attn_{p}"
        return "other"
    if ".mlp." in name:
        return "mlp"
    return "other"


def group_label(group: str, tied: bool) -> str:
    """The table's name for a group: a tied embedding is also the LM head."""
    return "embed = lm_head (tied)" if group == "embed" and tied else group
