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

from harness.flops import forward_flops, generation_flops, matmul_params, train_flops

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


CONFIGS = {"qwen2": qwen2_config, "llama": llama_config}


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


@pytest.mark.parametrize("p,c", [(1, 0), (17, 5), (64, 200), (0, 9)])
def test_generation_equals_causal_forward(p, c):
    cfg = llama_config()
    gen = generation_flops(cfg, [p, p], [c, c])
    assert abs(gen - 2 * forward_flops(cfg, p + c)) <= 1e-9 * gen


def test_generation_rejects_misaligned_lists():
    with pytest.raises(ValueError):
        generation_flops(qwen2_config(), [3, 4], [5])
