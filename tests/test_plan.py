"""The planner's arithmetic (memory, GPUs needed), its bad input, and budgets priced from model shapes.

Run: python -m pytest tests/test_plan.py -q
"""
import pytest
from omegaconf import OmegaConf
from transformers import Qwen2Config

from harness.core.flops import generation_flops
from harness.core.model_shapes import ShapeError, generation_budget, load_shape
from harness.runner.pricing import (GPUS, PricingError, gpus_needed, kv_cache_bytes, lora_param_count, method_memory, options,
                          param_count)


def tiny():
    # d=128, 4 layers, 4 heads x 32, 2 kv heads, MLP 352, vocab 100, tied
    return Qwen2Config(vocab_size=100, hidden_size=128, intermediate_size=352, num_hidden_layers=4,
                       num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)


def test_memory_by_hand():
    cfg = tiny()
    # layers 4 x (attention 49152 + MLP 135168) = 737280; embedding = head 12800 (tied, once);
    # RMSNorm: 2 per layer + final = 9 x 128 = 1152
    P = 737280 + 12800 + 1152
    assert param_count(cfg) == P
    kv = 2 * 4 * 2 * 32 * 2 * 64 * 100  # K and V x layers x kv heads x head dim x bf16 x sequences x tokens
    assert kv_cache_bytes(cfg, 64, 100) == kv
    grpo = OmegaConf.create({"_target_": "methods.grpo.GRPO", "beta": 1e-3, "prompts_per_step": 8, "num_generations": 8})
    mem = method_memory(grpo, cfg, tokens=100, eval_batch=1)
    assert sum(mem.values()) == 16 * P + 2 * P + kv  # 16 B/param + bf16 reference + KV
    grpo.beta = 0.0
    assert "reference" not in method_memory(grpo, cfg, tokens=100, eval_batch=1)
    es = OmegaConf.create({"_target_": "methods.es.ES", "generation_batch_size": 64})
    assert sum(method_memory(es, cfg, tokens=100, eval_batch=1).values()) == 2 * P + kv
    ppo = OmegaConf.create({"_target_": "methods.ppo.PPO", "rollout_batch_size": 64})
    value = 16 * (P - 12800 + 128)  # the value model: no vocab head, a 1-output head
    assert sum(method_memory(ppo, cfg, tokens=100, eval_batch=1).values()) == 16 * P + 2 * P + value + kv


def test_lora_memory_and_bad_target():
    cfg = tiny()
    n = lora_param_count(cfg, 8, ["q_proj", "v_proj"])
    assert n == 4 * 8 * ((128 + 128) + (128 + 64))
    lora = OmegaConf.create({"_target_": "methods.grpo.GRPO", "beta": 0.0, "peft": "lora",
                             "lora": {"r": 8, "target_modules": ["q_proj", "v_proj"]}})
    mem = method_memory(lora, cfg, tokens=10, eval_batch=1)
    assert mem["lora_states"] == 16 * n and mem["weights"] == 2 * param_count(cfg) and "adamw" not in mem
    with pytest.raises(PricingError, match="not a Qwen2/Llama projection"):
        lora_param_count(cfg, 8, ["qkv"])


def test_fits_and_gpus_needed():
    assert gpus_needed(50e9, 80, 0.9) == 1  # 50 GB <= 72 GB usable
    assert gpus_needed(73e9, 80, 0.9) == 2
    assert gpus_needed(73e9, 141, 0.9) == 1
    # Llama-3.1-8B full GRPO: 16 B/param alone (~128 GB) does not fit one H100
    big = load_shape("meta-llama/Llama-3.1-8B-Instruct")
    grpo = OmegaConf.create({"_target_": "methods.grpo.GRPO", "beta": 0.0, "prompts_per_step": 1, "num_generations": 1})
    total = sum(method_memory(grpo, big, tokens=450, eval_batch=1).values())
    assert 120e9 < total < 135e9 and gpus_needed(total, GPUS["h100"][1], 0.9) == 2


def test_bad_gpu_and_unknown_plan_key():
    with pytest.raises(PricingError, match="plan.gpu='v100' is unknown; use one of h100, h200, a100"):
        options(OmegaConf.create({"plan": {"gpu": "v100"}}))
    with pytest.raises(PricingError, match="plan.gpuz is unknown"):
        options(OmegaConf.create({"plan": {"gpuz": "h100"}}))
    assert options(OmegaConf.create({"plan": True}))["gpu"] == "h100"


def test_unreadable_config_names_the_fix():
    with pytest.raises(ShapeError, match=r"add harness/shapes/nosuchmodel-7b\.json"):
        load_shape("someorg/NoSuchModel-7B-Instruct")


def test_budget_resolver_prices_the_protocol():
    shape = load_shape("Qwen/Qwen2.5-0.5B-Instruct")
    assert shape.vocab_size == 151936 and shape.hidden_size == 896
    assert generation_budget("Qwen/Qwen2.5-0.5B-Instruct", "3e6", 150, 300) == 3e6 * generation_flops(shape, [150], [300])
    cfg = OmegaConf.create({"model": {"name_or_path": "zoo-1m"},
                            "budget": {"flops": "${esbench.generation_budget:${model.name_or_path},24000,11,16}"}})
    import harness  # noqa: F401  (registers the resolver)
    assert cfg.budget.flops == 24000 * generation_flops(load_shape("zoo-1m"), [11], [16])
