"""A policy-gradient trainer's memory on one device for one micro-batch, term by term, as GRPO and PPO run
(TRL 1.12 under accelerate): torch-free, priced by harness/core/gpu_memory.py and the planner.

Precision (Precision): the current trainer keeps an fp32 master (weights, gradients, AdamW's two states at
4 B/param each) and computes under bf16 autocast; the trainer before it trained bf16 weights directly (2 B
each), the one results/bench/gpu_check_quick_h200.json measured (OLD_BF16). Under autocast:
  - the residual stream stays fp32 (the embedding's output is fp32 and every residual add promotes to it), so
    each RMSNorm keeps its fp32 input and output, and every projection keeps its own bf16 cast of its input
    (q, k, v cast the same norm output three times; gate and up twice);
  - rotary embeddings come out fp32 (cos/sin take the hidden states' dtype) and are cast back for attention;
  - autocast casts each weight to bf16 once per forward and linear layers keep that copy for the backward:
    2 B per matmul parameter, the tied embedding's head included (`autocast_cache`).
Per token and layer the backward reads (SDPA keeps no score matrix; k and v repeated to the query heads by
transformers' repeat_kv where a padding mask rules out SDPA's own GQA; o_proj keeps its contiguous input):
  fp32 master under autocast  26h + 10q + 8i   (2 x (4h input + 4h normalised) + 5 x 2h casts; q, k, v,
                                                 output, o_proj input at 2q; gate, act, up, product at 2i)
  bf16 weights                16h + 10q + 8i   (2 x (4h fp32 copy + 2h + 2h); attention and MLP as above)
  fp32 (CPU runs)             24h + 20q + 16i
The logits of the completion tokens (GRPO: logits_to_keep; PPO: every position, then sliced) pass through
accelerate's fp32 output cast (bf16 mixed precision, TRL's default, on either trainer), TRL's temperature
division and selective_log_softmax (per-row logsumexp); early in the backward the gather's gradient and the
rows' logsumexp gradients are alive beside the saved fp32 logits: `LOGIT_BYTES` per completion token and
vocabulary entry (three fp32 buffers; at 64 x 256 x 151,936 each is 9.3 GiB).

Calibration: harness/tools/bench_train_memory.py measured one micro-batch's resident high-water mark on CPU with
the real vocabulary and Qwen2.5-0.5B's widths at 1-2 layers and 512-4,096 tokens; results/bench/
train_memory.json holds every point and the least-squares slopes the constants below cite (tests/
test_train_memory.py checks them against that file): per token and layer 66,393 B measured against 68,096
(fp32 master; the CPU points have no padding, so 6q + 4kv in place of 10q) and 57,400 against 59,136 (bf16
weights); autocast's copies 2.0 B per matmul parameter. The bf16-weight trainer's backward on CPU also holds
about 2 x vocab x hidden bytes per sequence (its peak grows with the sequences, not the tokens), which the
H200 measurement (tests/test_train_memory.py) does not show: only its per-token slopes are compared.

The peak of a micro-batch is the larger of two moments: the start of the backward (everything the forward
kept, the logits' gradient buffers, the head's gradient) and its end (every gradient, and with a tied
embedding its dense gradient a second time before it is added). Gradient checkpointing keeps one h-wide
input per layer and recomputes one layer at a time. The optimizer step (AdamW, fused where torch offers it:
transformers' adamw_torch_fused, TRL's default) allocates no parameter-sized temporaries (measured 0 B/param);
the unfused foreach AdamW would add up to 4 B/param (`ADAMW_FOREACH_TEMPORARIES`).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Precision:
    """How a trainer holds its parameters and computes.

    Attributes:
        param_bytes: bytes per parameter of the weights, of their gradients and of each AdamW state.
        compute_bytes: bytes per element of the matmuls' inputs and outputs (autocast's dtype).
    """

    param_bytes: int
    compute_bytes: int

    @property
    def autocast(self) -> bool:
        """An fp32 master computing in a narrower dtype (autocast): weight casts kept, fp32 residual stream."""
        return self.param_bytes > self.compute_bytes

    def layer_widths(self, repeat_kv: bool = True) -> tuple[int, int, int, int]:
        """Bytes per token and layer per unit of (h, q, kv, i): see the module docstring. Without `repeat_kv`
        (no padding mask: SDPA's own GQA) k and v keep kv-wide copies instead of q-wide ones."""
        wh, a, wi = _WIDTHS["autocast" if self.autocast else self.compute_bytes]
        return (wh, 5 * a, 0, wi) if repeat_kv else (wh, 3 * a, 2 * a, wi)


# per token and layer: bytes per unit of h (the norms and their casts), bytes of each of the five attention
# tensors per unit of q (q, k, v, the output, o_proj's input) and bytes per unit of i (the MLP's four)
_WIDTHS = {"autocast": (26, 2, 8), 2: (16, 2, 8), 4: (24, 4, 16)}

FP32_MASTER = Precision(4, 2)   # methods/grpo.py, methods/ppo.py on a GPU: fp32 master under bf16 autocast
OLD_BF16 = Precision(2, 2)      # the trainer results/bench/gpu_check_quick_h200.json measured

# ---- constants measured by harness/tools/bench_train_memory.py (results/bench/train_memory.json) ----
# bytes per completion token and vocabulary entry at the start of the backward: accelerate's bf16 mixed precision
# (TRL's configs default to bf16=True, so the trainer before the fp32 master ran under it too) returns fp32
# logits, so the saved temperature-scaled logits, the gather's and the logsumexp's gradients are fp32 whatever
# the weights' dtype: fit peak.per_logit of the mode "current" (11.60; "old" measures the same chain)
LOGIT_BYTES = 11.6
# PPO (TRL's PPOTrainer: no logits_to_keep, the slice divided in place, the optimizer step and a no-grad softmax
# entropy while the logits live): per token and vocabulary entry of every position (fp32 logits, their gradient
# and the slice's zero-padded gradient; fit peak.per_token of the mode "ppo", 1,826,387 B / 151,936 = 12.0), and
# per completion token (the entropy's softmax and product: fit peak.per_logit, 7.96)
PPO_ALL_POSITION_LOGIT_BYTES = 12.0
PPO_LOGIT_BYTES = 8.0
ADAMW_FOREACH_TEMPORARIES = 4   # bytes/param: torch.optim.AdamW(foreach=True)'s intermediate lists
ADAMW_FUSED_TEMPORARIES = 0     # measured: fit "step_peak_per_param" (mode "current")


def _dims(shape) -> tuple[int, int, int, int, int, int]:
    d, i = int(shape.hidden_size), int(shape.intermediate_size)
    hd = getattr(shape, "head_dim", None) or d // shape.num_attention_heads
    q = int(shape.num_attention_heads) * int(hd)
    return d, i, q, int(shape.num_key_value_heads) * int(hd), int(shape.num_hidden_layers), int(shape.vocab_size)


def precision_of(param_bytes: int, compute_bytes: int) -> Precision:
    """The Precision of a trainer keeping `param_bytes` per parameter and computing at `compute_bytes`."""
    return Precision(int(param_bytes), int(min(compute_bytes, param_bytes)))


def matmul_params(shape) -> int:
    """Parameters autocast casts to bf16 for the forward: every layer's projections and the head."""
    d, i, q, kv, L, V = _dims(shape)
    return L * (2 * d * q + 2 * d * kv + 3 * d * i) + V * d


def layer_bytes(shape, precision: Precision, repeat_kv: bool = True) -> int:
    """Bytes one token keeps for the backward in one decoder layer (module docstring)."""
    d, i, q, kv, _, _ = _dims(shape)
    wh, wq, wkv, wi = precision.layer_widths(repeat_kv)
    return wh * d + wq * q + wkv * kv + wi * i


def activation_bytes(shape, sequences: int, tokens: int, precision: Precision, checkpointing: bool = False,
                     repeat_kv: bool = True) -> int:
    """What the decoder layers and the final norm keep for the backward of `sequences` x `tokens`."""
    d, _, _, _, L, _ = _dims(shape)
    residual = 4 if precision.autocast else precision.compute_bytes
    per_layer = layer_bytes(shape, precision, repeat_kv)
    # checkpointing: each layer's input (the residual stream) is kept and one layer at a time recomputed
    body = (L * residual * d + per_layer) if checkpointing else L * per_layer
    final_norm = (8 if precision.compute_bytes == 2 else 12) * d  # its fp32 input (or copy) and its output
    return sequences * tokens * (body + final_norm)


def logit_bytes(shape, sequences: int, tokens: int, completion_tokens: int, precision: Precision,
                all_positions: bool = False) -> int:
    """The logits and their gradient buffers at the start of the backward (module docstring); PPO's
    (`all_positions`) are every position's, with its entropy's two copies per completion token."""
    V = _dims(shape)[5]
    if all_positions:
        return int(sequences * V * (PPO_ALL_POSITION_LOGIT_BYTES * tokens + PPO_LOGIT_BYTES * completion_tokens))
    return int(sequences * LOGIT_BYTES * V * completion_tokens)


def micro_batch_parts(shape, params: int, *, precision: Precision, sequences: int, tokens: int,
                      completion_tokens: int, checkpointing: bool = False, shards: int = 1, trained: bool = True,
                      all_positions: bool = False, accumulating: bool = False, fused_adamw: bool = True
                      ) -> dict[str, int]:
    """What one micro-batch adds to the trainer's resident states at its peak, by part: autocast_cache,
    activations, logits, and `grads`: what the gradients add at the peak, the larger of the two moments in the
    module docstring. `accumulating` (several micro-batches per optimizer step): the earlier micro-batches'
    gradients are alive through this one's forward (transformers' Trainer sets them to None only after the step)."""
    d, _, _, _, _, V = _dims(shape)
    pb = precision.param_bytes
    cache = 2 * matmul_params(shape) // shards if precision.autocast else 0
    acts = activation_bytes(shape, sequences, tokens, precision, checkpointing)
    logits = logit_bytes(shape, sequences, tokens, completion_tokens, precision, all_positions)
    if not trained:  # LoRA: the frozen base's gradients are never allocated (its adapters' are in lora_states)
        return {"autocast_cache": cache, "activations": acts, "logits": logits}
    head = pb * V * d // shards  # the head's gradient, computed first
    every = pb * params // shards
    tied = bool(getattr(shape, "tie_word_embeddings", False))
    temporaries = (ADAMW_FUSED_TEMPORARIES if fused_adamw else ADAMW_FOREACH_TEMPORARIES) * params // shards
    start = cache + acts + logits + (every if accumulating else head)
    end = every + (head if tied else 0) + temporaries
    return {"autocast_cache": cache, "activations": acts, "logits": logits,
            "grads": (start - cache - acts - logits) if start >= end else end - cache - acts - logits}
