"""The one shared cost model: FLOPs of forward, generation and training passes.

Conventions (a multiply-add counts as 2 FLOPs, as in torch.utils.flop_counter):
- Forward FLOPs per token = 2 x body_params + attention-score term, plus 2 x head_params at
  every position whose logits are computed (see "The LM head" below).
- body_params: every Linear weight of attention (q, k, v, o) and of the gated MLP (gate, up,
  down) in every layer. head_params: the LM head (V x d). The input embedding is a lookup, not
  a matmul, so it is excluded; when embeddings are tied with the head the head matmul still
  costs 2*V*d per position, so it is counted once, as the head. Biases, norms, rotary and
  softmax are elementwise and ignored (well under 1% at these shapes).
- Attention-score term: per layer, QK^T and AV each cost 2 * n_heads * head_dim * ctx per
  token, i.e. 4 * n_heads * head_dim * ctx, where ctx = positions attended to, including
  the token itself (causal: position p attends to p+1 positions). GQA shares K/V heads but
  every query head still does its own dot products, so n_heads (not kv heads) is used.
- Training step = 3 x forward (backward = 2 x forward), head included where it runs.

The LM head (the rule: charge the head only at positions whose logits a method needs). A
method needs logits only where they produce or score a completion token: the last prompt
position (its logits give completion token 1) and every completion position but the last. No
method needs logits at the other prompt positions, and none of HF `generate` (it passes
`logits_to_keep=1` to the prefill), vLLM, or TRL's GRPO scoring and training forwards
(`logits_to_keep`) compute them. With a 152K vocabulary the head is ~27% of a token's matmuls
on Qwen2.5-0.5B, so charging it at prompt positions over-counted generation 3-5x on the zoo.
- generation_flops (p-token prompt, c >= 1 completion tokens, KV cache): HF runs the prefill
  over the p prompt positions, then c - 1 one-token decode forwards (the last sampled token is
  never fed back). That is a causal forward over p + c - 1 positions with the head at c of them.
- scoring_flops / completion_train_flops (policy log-probs of a completion, reference model,
  GRPO/PPO loss): a causal forward over all p + c positions, the head at the c positions that
  predict completion tokens. (TRL computes c + 1 and drops one; PPO's TRL loop computes the
  full head everywhere: executed FLOPs, not the ledger, show such extra work.)
- forward_flops / train_flops: the head at every position (whole-sequence language modelling).

Executed FLOPs (what ran, padding included) use the same formulas on the padded batch shapes:
`padded_generation_flops` for batched `generate` calls (rows x padded prompt width x decode
steps actually run), `padded_pairs` to turn a batch's real lengths into its padded ones.

Configs are HF Qwen2/Llama-shaped `PretrainedConfig`s. Test: python -m pytest tests/test_flops.py -q
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: `import harness` stays free of transformers (fast config errors)
    from transformers import PretrainedConfig


def _head_dim(config: PretrainedConfig) -> int:
    # Qwen2Config has no head_dim attribute; the model derives it the same way.
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def head_params(config: PretrainedConfig) -> int:
    """Weights of the LM head (V x d), counted once whether tied to the input embedding or not."""
    return config.vocab_size * config.hidden_size


def body_params(config: PretrainedConfig) -> int:
    """Matmul weights of the transformer layers (attention q, k, v, o and the gated MLP), no head."""
    d, hd = config.hidden_size, _head_dim(config)
    q_dim = config.num_attention_heads * hd
    kv_dim = config.num_key_value_heads * hd
    attn = d * q_dim + 2 * d * kv_dim + q_dim * d  # q, k, v, o
    mlp = 3 * d * config.intermediate_size  # gate, up, down
    return config.num_hidden_layers * (attn + mlp)


def matmul_params(config: PretrainedConfig) -> int:
    """Number of weights that take part in matmuls (attention, MLP, LM head).

    Args:
        config: Qwen2/Llama-shaped config (gated MLP with gate, up and down matrices).

    Returns:
        N such that a forward with the head at every position costs 2*N FLOPs per token (+ attention).
    """
    return body_params(config) + head_params(config)


def _attn_flops_per_ctx(config: PretrainedConfig) -> int:
    """Attention-score FLOPs per token per attended position, summed over layers."""
    return 4 * config.num_hidden_layers * config.num_attention_heads * _head_dim(config)


def _ctx_sum(start: int, stop: int) -> int:
    """Sum of contexts of positions start..stop-1, i.e. sum_{j=start+1}^{stop} j (closed form)."""
    return (stop * (stop + 1) - start * (start + 1)) // 2


def forward_flops(config: PretrainedConfig, seq_len: int, batch: int = 1, head_positions: int | None = None) -> float:
    """FLOPs of a causal forward over `seq_len` tokens.

    Args:
        config: model config.
        seq_len: tokens per sequence; position p attends to p+1 positions.
        batch: number of sequences of that length.
        head_positions: positions per sequence at which the LM head runs (default: all of them).

    Returns:
        Total FLOPs for the batch.
    """
    head = seq_len if head_positions is None else head_positions
    per_seq = (2 * body_params(config) * seq_len + 2 * head_params(config) * head
               + _attn_flops_per_ctx(config) * _ctx_sum(0, seq_len))
    return float(batch * per_seq)


def _check_aligned(what: str, prompt_tokens: list[int], completion_tokens: list[int]) -> None:
    if len(prompt_tokens) != len(completion_tokens):
        raise ValueError(f"{what}: {len(prompt_tokens)} prompt lengths but {len(completion_tokens)} completion lengths")


def generation_flops(config: PretrainedConfig, prompt_tokens: list[int], completion_tokens: list[int]) -> float:
    """FLOPs of sampling with a KV cache: prefill each prompt, then decode token by token.

    Args:
        config: model config.
        prompt_tokens: prompt length per generated sequence (a prompt sampled n times appears n times).
        completion_tokens: completion length per generated sequence, aligned with `prompt_tokens`.

    Returns:
        Total FLOPs: per sequence a causal forward over the p + c - 1 positions fed to the model
        (prompt, then every sampled token but the last), LM head at the c positions whose logits
        are sampled (the last prompt position and the fed completion tokens). c = 0 costs nothing.

    Raises:
        ValueError: if the two lists differ in length.
    """
    _check_aligned("generation_flops", prompt_tokens, completion_tokens)
    return float(sum(forward_flops(config, p + c - 1, head_positions=c) for p, c in zip(prompt_tokens, completion_tokens)
                     if c > 0))


def scoring_flops(config: PretrainedConfig, prompt_tokens: list[int], completion_tokens: list[int]) -> float:
    """FLOPs of one forward computing the log-probs of each completion given its prompt.

    Per sequence: a causal forward over the p + c positions, LM head at the c positions that
    predict completion tokens (GRPO/PPO policy, old-policy and reference log-probs).
    """
    _check_aligned("scoring_flops", prompt_tokens, completion_tokens)
    return float(sum(forward_flops(config, p + c, head_positions=c) for p, c in zip(prompt_tokens, completion_tokens)))


def completion_train_flops(config: PretrainedConfig, prompt_tokens: list[int], completion_tokens: list[int]) -> float:
    """FLOPs of forward + backward of a loss on completion tokens only (3 x scoring_flops)."""
    return 3.0 * scoring_flops(config, prompt_tokens, completion_tokens)


def padded_pairs(prompt_tokens: list[int], completion_tokens: list[int]) -> tuple[list[int], list[int]]:
    """The lengths every row of one padded batch runs at: the longest prompt and the longest completion.

    A batch left-padded to its longest prompt and decoded until its longest completion ends runs
    every row at those widths; feeding the result to the cost formulas gives the executed FLOPs.
    """
    _check_aligned("padded_pairs", prompt_tokens, completion_tokens)
    n = len(prompt_tokens)
    if not n:
        return [], []
    return [max(prompt_tokens)] * n, [max(completion_tokens)] * n


def padded_generation_flops(config: PretrainedConfig, batches: list[tuple[int, int, int]]) -> float:
    """FLOPs executed by batched `generate` calls, padding and decoding past EOS included.

    Args:
        config: model config.
        batches: one (rows, padded prompt width, tokens decoded) per `generate` call, where
            tokens decoded is the completion width the call returned (every row runs every step).

    Returns:
        Total FLOPs, the generation_flops of every row at the padded widths.
    """
    return float(sum(rows * generation_flops(config, [width], [steps]) for rows, width, steps in batches))


def train_flops(config: PretrainedConfig, seq_lens: list[int]) -> float:
    """FLOPs of one forward + backward over the given sequences, LM head at every position (3 x forward).

    Args:
        config: model config.
        seq_lens: length of each training sequence.

    Returns:
        Total FLOPs.
    """
    return 3.0 * sum(forward_flops(config, s) for s in seq_lens)


def lora_train_flops(config: PretrainedConfig, seq_lens: list[int], lora_params: int,
                     head_positions: list[int] | None = None) -> float:
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
        head_positions: per sequence, the positions where the (frozen) LM head runs, 4 x V x d
            FLOPs each (forward + input gradient); default: every position.

    Returns:
        Total FLOPs.
    """
    hd = _head_dim(config)
    qkv0 = config.hidden_size * (config.num_attention_heads * hd + 2 * config.num_key_value_heads * hd)
    per_token = 4 * body_params(config) + 6 * lora_params - 2 * qkv0
    heads = seq_lens if head_positions is None else head_positions
    attn = _attn_flops_per_ctx(config)
    return float(sum(per_token * s + 4 * head_params(config) * h + 3 * attn * _ctx_sum(0, s)
                     for s, h in zip(seq_lens, heads, strict=True)))


def lora_completion_train_flops(config: PretrainedConfig, prompt_tokens: list[int], completion_tokens: list[int],
                                lora_params: int) -> float:
    """lora_train_flops of a loss on completion tokens only: the head runs at completion positions
    (TRL's logits_to_keep), as completion_train_flops charges full training."""
    _check_aligned("lora_completion_train_flops", prompt_tokens, completion_tokens)
    return lora_train_flops(config, [p + c for p, c in zip(prompt_tokens, completion_tokens)], lora_params,
                            head_positions=list(completion_tokens))
