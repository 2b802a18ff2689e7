"""The one shared cost model: FLOPs of forward, generation and training passes.

Conventions (a multiply-add counts as 2 FLOPs, as in torch.utils.flop_counter):
- Forward FLOPs per token = 2 x matmul_params + attention-score term.
- matmul_params: every Linear weight of attention (q, k, v, o) and of the gated MLP (gate, up,
  down) in every layer, plus the LM head (V x d). The input embedding is a lookup, not a
  matmul, so it is excluded; when embeddings are tied with the head the head matmul still
  costs 2*V*d per token, so it is counted once, as the head. Biases, norms, rotary and
  softmax are elementwise and ignored (well under 1% at these shapes).
- Attention-score term: per layer, QK^T and AV each cost 2 * n_heads * head_dim * ctx per
  token, i.e. 4 * n_heads * head_dim * ctx, where ctx = positions attended to, including
  the token itself (causal: position p attends to p+1 positions). GQA shares K/V heads but
  every query head still does its own dot products, so n_heads (not kv heads) is used.
- Training step = 3 x forward (backward = 2 x forward).
- Generation = prefill of the prompt (one causal forward) + each decoded token as a 1-token
  forward attending to all previous positions (KV cache). Its total therefore equals a causal
  forward over prompt + completion tokens.

Configs are HF Qwen2/Llama-shaped `PretrainedConfig`s. Test: python -m pytest tests/test_flops.py -q
"""
from __future__ import annotations

from transformers import PretrainedConfig


def _head_dim(config: PretrainedConfig) -> int:
    # Qwen2Config has no head_dim attribute; the model derives it the same way.
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def matmul_params(config: PretrainedConfig) -> int:
    """Number of weights that take part in matmuls (attention, MLP, LM head).

    Args:
        config: Qwen2/Llama-shaped config (gated MLP with gate, up and down matrices).

    Returns:
        The parameter count N such that the linear part of a forward costs 2*N FLOPs per token.
    """
    d, hd = config.hidden_size, _head_dim(config)
    q_dim = config.num_attention_heads * hd
    kv_dim = config.num_key_value_heads * hd
    attn = d * q_dim + 2 * d * kv_dim + q_dim * d  # q, k, v, o
    mlp = 3 * d * config.intermediate_size  # gate, up, down
    head = config.vocab_size * d  # counted once whether tied or not
    return config.num_hidden_layers * (attn + mlp) + head


def _attn_flops_per_ctx(config: PretrainedConfig) -> int:
    """Attention-score FLOPs per token per attended position, summed over layers."""
    return 4 * config.num_hidden_layers * config.num_attention_heads * _head_dim(config)


def _ctx_sum(start: int, stop: int) -> int:
    """Sum of contexts of positions start..stop-1, i.e. sum_{j=start+1}^{stop} j (closed form)."""
    return (stop * (stop + 1) - start * (start + 1)) // 2


def forward_flops(config: PretrainedConfig, seq_len: int, batch: int = 1) -> float:
    """FLOPs of a full causal forward over `seq_len` tokens.

    Args:
        config: model config.
        seq_len: tokens per sequence; position p attends to p+1 positions.
        batch: number of sequences of that length.

    Returns:
        Total FLOPs for the batch.
    """
    per_seq = 2 * matmul_params(config) * seq_len + _attn_flops_per_ctx(config) * _ctx_sum(0, seq_len)
    return float(batch * per_seq)


def generation_flops(config: PretrainedConfig, prompt_tokens: list[int], completion_tokens: list[int]) -> float:
    """FLOPs of sampling with a KV cache: prefill each prompt, then decode token by token.

    Args:
        config: model config.
        prompt_tokens: prompt length per generated sequence (a prompt sampled n times appears n times).
        completion_tokens: completion length per generated sequence, aligned with `prompt_tokens`.

    Returns:
        Total FLOPs. Decoded token t (0-based) attends to prompt + t + 1 positions.

    Raises:
        ValueError: if the two lists differ in length.
    """
    if len(prompt_tokens) != len(completion_tokens):
        raise ValueError(
            f"generation_flops: {len(prompt_tokens)} prompt lengths but {len(completion_tokens)} completion lengths"
        )
    two_n, attn = 2 * matmul_params(config), _attn_flops_per_ctx(config)
    total = 0
    for p, c in zip(prompt_tokens, completion_tokens):
        prefill = two_n * p + attn * _ctx_sum(0, p)
        decode = two_n * c + attn * _ctx_sum(p, p + c)
        total += prefill + decode
    return float(total)


def train_flops(config: PretrainedConfig, seq_lens: list[int]) -> float:
    """FLOPs of one forward + backward over the given sequences (3 x forward).

    Args:
        config: model config.
        seq_lens: length of each training sequence (prompt + completion).

    Returns:
        Total FLOPs.
    """
    return 3.0 * sum(forward_flops(config, s) for s in seq_lens)


def lora_train_flops(config: PretrainedConfig, seq_lens: list[int], lora_params: int) -> float:
    """FLOPs of one forward + backward of a LoRA-adapted model (frozen base, trainable adapters).

    The rule, per token (N = matmul_params, P = adapter parameters, each adapter a pair x@A, @B):
      forward                      2N + 2P   (base matmuls, plus the unmerged adapters)
      backward, frozen base        2N        (input gradients: the gradient still flows through every
                                              frozen matmul down to the first adapter) and no weight
                                              gradients (that is what LoRA saves: 2N of full training's 4N)
      backward, adapters           4P        (input gradient + weight gradient)
      minus, first layer           2 x (q, k, v weights of layer 0): their input is the frozen
                                   embedding, which needs no gradient, so autograd skips it
    plus the attention-score term 3x (forward QK^T and AV, backward of both). Total per token:
    4N + 6P - 2 x qkv_0, against full training's 6N. Checked against FlopCounterMode on peft-wrapped
    zoo models in tests/test_lora.py: exact for the matmuls with target_modules=all-linear, except
    the layer-0 q/k/v adapters' input gradients (2 x r x d each, also skipped) which this charges.
    With fewer targets (e.g. q_proj, v_proj) the layer-0 attention backward is partly skipped too
    (no dK without a k adapter): also charged, under 0.2% of a zoo-4m step.

    Args:
        config: the base model's config.
        seq_lens: length of each training sequence (prompt + completion).
        lora_params: trainable adapter parameters (peft's `get_nb_trainable_parameters()[0]`).

    Returns:
        Total FLOPs.
    """
    hd = _head_dim(config)
    qkv0 = config.hidden_size * (config.num_attention_heads * hd + 2 * config.num_key_value_heads * hd)
    per_token = 4 * matmul_params(config) + 6 * lora_params - 2 * qkv0
    attn = _attn_flops_per_ctx(config)
    return float(sum(per_token * s + 3 * attn * _ctx_sum(0, s) for s in seq_lens))
