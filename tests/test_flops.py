"""The FLOPs model against hand-worked numbers and torch's FlopCounterMode on tiny random models.

Run: python -m pytest tests/test_flops.py -q

FlopCounterMode counts only matmul-like ops (a multiply-add = 2 FLOPs). The models use eager
attention, so the QK^T and AV matmuls appear as explicit bmm calls; eager computes the full
seq x seq score matrix (the causal mask is applied afterwards), so the counter sees roughly
twice our causal attention term. At these shapes that gap is a few percent of the total.
"""
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

from harness.core.flops import (body_params, completion_train_flops, forward_flops, generation_flops, head_params,
                           matmul_params, padded_generation_flops, padded_pairs, scoring_flops, train_flops)

torch.set_num_threads(1)

BATCH, SEQ = 2, 64


def qwen2_config():
    return Qwen2Config(vocab_size=100, hidden_size=128, intermediate_size=352, num_hidden_layers=4,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                       tie_word_embeddings=True)


def llama_config():
    return LlamaConfig(vocab_size=1000, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                       num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=256,
                       tie_word_embeddings=False)


def big_vocab_config():
    """Qwen2.5's 151,936-token vocabulary on a tiny body: the LM head is ~99% of a token's matmuls."""
    return Qwen2Config(vocab_size=151936, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                       tie_word_embeddings=True)


CONFIGS = {"qwen2": qwen2_config, "llama": llama_config, "qwen2-152k-vocab": big_vocab_config}


def _model_and_input(name):
    torch.manual_seed(0)
    cfg = CONFIGS[name]()
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    ids = torch.randint(0, cfg.vocab_size, (BATCH, SEQ))
    return cfg, model, ids


@pytest.mark.parametrize("name", list(CONFIGS))
def test_forward_matches_flop_counter(name):
    cfg, model, ids = _model_and_input(name)
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(input_ids=ids)
    ratio = forward_flops(cfg, SEQ, batch=BATCH) / counter.get_total_flops()
    print(f"{name} forward ratio ours/FlopCounterMode = {ratio:.4f}")
    assert abs(ratio - 1) < 0.10


@pytest.mark.parametrize("name", list(CONFIGS))
def test_train_matches_flop_counter(name):
    cfg, model, ids = _model_and_input(name)
    counter = FlopCounterMode(display=False)
    with counter:
        model(input_ids=ids, labels=ids).loss.backward()
    ratio = train_flops(cfg, [SEQ] * BATCH) / counter.get_total_flops()
    print(f"{name} train ratio ours/FlopCounterMode = {ratio:.4f}")
    assert abs(ratio - 1) < 0.15


def test_matmul_params_by_hand():
    # Qwen2 tiny: d=128, 4 heads x head_dim 32 = 128, 2 kv heads x 32 = 64.
    # Attention q 128*128 + k 128*64 + v 128*64 + o 128*128 = 49152.
    # MLP 3 * 128 * 352 = 135168.  Per layer 184320, x4 = 737280.
    # Tied head 100*128 = 12800, counted once.  Total 750080.
    assert matmul_params(qwen2_config()) == 750080
    # Llama: q 256*256 + k,v 2*256*128 + o 256*256 = 196608; MLP 3*256*688 = 528384;
    # x4 layers = 2899968; untied head 1000*256 = 256000 (input embedding excluded).
    assert matmul_params(llama_config()) == 3155968


def test_forward_flops_by_hand():
    cfg = qwen2_config()
    # 3 tokens: 2*N per token, plus 4 * layers * heads * head_dim * (1+2+3) for attention.
    expected = 2 * 750080 * 3 + 4 * 4 * 4 * 32 * 6
    assert forward_flops(cfg, 3) == expected
    assert forward_flops(cfg, 3, batch=5) == 5 * expected


@pytest.mark.parametrize("p,c", [(1, 1), (17, 5), (64, 200), (3, 0)])
def test_generation_is_a_forward_over_fed_positions(p, c):
    # prefill p positions + (c - 1) decode steps; head at the last prompt position and each fed token
    cfg = llama_config()
    gen = generation_flops(cfg, [p, p], [c, c])
    expected = 2 * forward_flops(cfg, p + c - 1, head_positions=c) if c else 0.0
    assert gen == pytest.approx(expected, rel=1e-12)
    # and it never pays the head at the other prompt positions
    if c:
        assert 2 * forward_flops(cfg, p + c) - gen == pytest.approx(
            2 * (2 * matmul_params(cfg) + 4 * 4 * 8 * 32 * (p + c)) + 2 * 2 * head_params(cfg) * (p - 1))


def test_head_charged_only_where_logits_are_needed_by_hand():
    cfg = qwen2_config()  # body 737280 weights, head 100 x 128 = 12800, attention 4*4*4*32 = 2048 per ctx
    assert body_params(cfg) + head_params(cfg) == matmul_params(cfg)
    # prompt 3 + completion 2: generation feeds 4 positions (ctx 1..4), head at 2 of them
    assert generation_flops(cfg, [3], [2]) == 2 * 737280 * 4 + 2 * 12800 * 2 + 2048 * 10
    # scoring: 5 positions (ctx 1..5), head at the 2 predicting completion tokens; training = 3x
    assert scoring_flops(cfg, [3], [2]) == 2 * 737280 * 5 + 2 * 12800 * 2 + 2048 * 15
    assert completion_train_flops(cfg, [3], [2]) == 3 * scoring_flops(cfg, [3], [2])


def test_generation_rejects_misaligned_lists():
    with pytest.raises(ValueError):
        generation_flops(qwen2_config(), [3, 4], [5])


def _counted(fn):
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        fn()
    return counter.get_total_flops()


@pytest.mark.parametrize("name", ["llama", "qwen2-152k-vocab"])
def test_scoring_with_logits_to_keep_matches_flop_counter(name):
    # TRL's scoring forward: logits_to_keep = completion + 1 (it drops the last); we charge completion
    cfg, model, ids = _model_and_input(name)
    c = 16
    measured = _counted(lambda: model(input_ids=ids, logits_to_keep=c + 1))
    ours = scoring_flops(cfg, [SEQ - c] * BATCH, [c] * BATCH) + BATCH * 2 * head_params(cfg)
    print(f"{name} scoring ratio ours/FlopCounterMode = {ours / measured:.4f}")
    assert abs(ours / measured - 1) < 0.10


@pytest.mark.parametrize("name,tol", [("llama", 0.10), ("qwen2-152k-vocab", 0.02)])
def test_generate_with_kv_cache_matches_flop_counter(name, tol):
    """HF generate: prefill (head at the last prompt position only) + c - 1 cached decode steps."""
    cfg, model, ids = _model_and_input(name)
    p, c = 40, 12
    prompt = ids[:, :p]
    measured = _counted(lambda: model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt),
                                               max_new_tokens=c, min_new_tokens=c, do_sample=False, pad_token_id=0))
    ours = generation_flops(cfg, [p] * BATCH, [c] * BATCH)
    old = 2 * forward_flops(cfg, p + c)  # the pre-fix charge: head at every prompt position, c decode steps
    print(f"{name} generate ratio ours/FlopCounterMode = {ours / measured:.4f} (old formula {old / measured:.3f})")
    assert abs(ours / measured - 1) < tol


def test_padded_generation_equals_hand_computation_and_covers_the_charge():
    """Executed FLOPs of one left-padded generate call: every row at the widest prompt, every decode step."""
    cfg = big_vocab_config()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").eval()
    lens, c = [30, 22], 6  # two prompts, the second left-padded by 8
    width = max(lens)
    ids = torch.randint(1, 1000, (2, width))
    mask = torch.ones_like(ids)
    mask[1, :width - lens[1]] = 0
    measured = _counted(lambda: model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=c,
                                               min_new_tokens=c, do_sample=False, pad_token_id=0))
    executed = padded_generation_flops(cfg, [(2, width, c)])
    # by hand: 2 rows x (forward over 30 + 5 fed positions, head at 6)
    body, head, attn = body_params(cfg), head_params(cfg), 4 * 2 * 4 * 16
    assert executed == 2 * (2 * body * 35 + 2 * head * 6 + attn * 35 * 36 // 2)
    charged = generation_flops(cfg, lens, [4, c])  # the second row hit EOS after 4 tokens
    assert executed > charged
    assert padded_generation_flops(cfg, [(2, width, c)]) == generation_flops(cfg, *padded_pairs(lens, [4, c]))
    assert abs(executed / measured - 1) < 0.02
