"""The planner's arithmetic (memory, GPUs needed), its bad input, and budgets priced from model shapes.

Run: python -m pytest tests/test_plan.py -q
"""
import math

import pytest
from omegaconf import OmegaConf
from transformers import Qwen2Config

from harness.core import train_memory as tm
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
    # RMSNorm: 2 per layer + final = 9 x 128 = 1152; Qwen2's q/k/v biases: 4 x (128 + 64 + 64) = 1024
    P = 737280 + 12800 + 1152 + 1024
    assert param_count(cfg) == P
    kv = 2 * 4 * 2 * 32 * 2 * 64 * 100  # K and V x layers x kv heads x head dim x bf16 x sequences x tokens
    assert kv_cache_bytes(cfg, 64, 100) == kv
    grpo = OmegaConf.create({"_target_": "methods.grpo.GRPO", "beta": 1e-3, "prompts_per_step": 8, "num_generations": 8})
    mem = method_memory(grpo, cfg, tokens=100, eval_batch=1, prompt_tokens=40)
    # the fp32 master and AdamW (12 B/param), an fp32 reference (methods/grpo.py), one micro-batch at its peak
    # (harness/core/train_memory.py: all 64 sequences fit 8 GiB of activations here, one micro-batch per step) + KV
    micro = tm.micro_batch_parts(cfg, P, precision=tm.FP32_MASTER, sequences=64, tokens=100, completion_tokens=60)
    assert mem == {"weights": 4 * P, "adamw": 8 * P, "reference": 4 * P, **micro, "kv_cache": kv}
    grpo.beta = 0.0
    assert "reference" not in method_memory(grpo, cfg, tokens=100, eval_batch=1)
    es = OmegaConf.create({"_target_": "methods.es.ES", "generation_batch_size": 64})
    # bf16 weights + the fp32 master + one fp32 noise buffer of the largest tensor (the MLP's 128 x 352 = 45056)
    # + the larger of the update's two fp32 temporaries and the checksum's three int64 chunks (here the chunk)
    largest = 128 * 352
    es_mem = method_memory(es, cfg, tokens=100, eval_batch=1)
    assert es_mem == {"weights": 2 * P, "es_master": 4 * P, "es_buffers": 4 * largest, "es_transient": 24 * largest,
                      "kv_cache": kv}
    ppo = OmegaConf.create({"_target_": "methods.ppo.PPO", "rollout_batch_size": 64})
    value = 16 * (P - 12800 + 128)  # the value model: no vocab head, a 1-output head
    mem = method_memory(ppo, cfg, tokens=100, eval_batch=1, prompt_tokens=40)
    policy = tm.micro_batch_parts(cfg, P, precision=tm.FP32_MASTER, sequences=64, tokens=100, completion_tokens=60,
                                  all_positions=True)  # train_micro_batch null: all 64 fit 8 GiB here, all positions
    value_acts = tm.activation_bytes(cfg, 64, 100, tm.FP32_MASTER)
    value_cache = 2 * (tm.matmul_params(cfg) - 12800)
    assert mem == {"weights": 4 * P, "adamw": 8 * P, "reference": 2 * P, **policy,
                   "value_model": value + value_cache + value_acts, "kv_cache": kv}


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


# ---- engine=vllm: the planner's per-GPU memory is what the code requests (harness/core/gpu_memory.py) ----
SHAPES = {"1.5b": "Qwen/Qwen2.5-1.5B-Instruct", "7b": "Qwen/Qwen2.5-7B-Instruct", "8b": "meta-llama/Llama-3.1-8B-Instruct"}
H100 = 80_000_000_000  # the planner's H100 (plan.gpu=h100: 80 GB)


def vllm_engine_conf() -> dict:
    import yaml

    from harness.core.paths import CONF_DIR
    return yaml.safe_load((CONF_DIR / "engine" / "vllm.yaml").read_text())


def meta_policy(shape):
    """A Policy-like object with the shape's model on the meta device (what an ES actor's policy_shell holds)."""
    import types

    import torch
    from transformers import AutoModelForCausalLM
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(shape, dtype=torch.bfloat16)
    return types.SimpleNamespace(model=model)


# per model: (gpu_memory_utilization, vLLM's bytes, the ES master's bytes) of ES on one 80 GB GPU, engine=vllm
# (the driver's HF copy waits on the CPU: harness/core/policy.py driver_place)
# (the ES share keeps gpu_memory.es_margin free: 1.5 GiB of 80 GB)
ES_EXPECTED = {"1.5b": (0.8425, 67_400_000_000, 6_174_857_216), "7b": (0.4766, 38_128_000_000, 30_462_466_048),
               "8b": (0.4598, 36_784_000_000, 32_121_044_992)}


@pytest.mark.parametrize("size", ["1.5b", "7b", "8b"])
def test_es_on_vllm_planner_equals_what_the_worker_requests(size, monkeypatch):
    """The ES worker's engine (methods/es/workers.py engine_memory -> harness/engines/vllm.py VLLMEngine._plan)
    and the planner (pricing.memory_plan) give the same share and the same bytes per part."""
    import harness.engines.base as base
    from harness.engines import EngineConfig
    from harness.engines.vllm import VLLMEngine
    from harness.runner.pricing import memory_plan
    from methods.es.workers import engine_memory

    shape, engine = load_shape(SHAPES[size]), vllm_engine_conf()
    es = OmegaConf.create({"_target_": "methods.es.ES", "generation_batch_size": 200})
    planned, gpus, _ = memory_plan(es, shape, 150 + 1024, 64, dtype="bfloat16", engine=engine, gpu_gb=80.0)
    policy = meta_policy(shape)
    resident, shared = engine_memory("vllm", policy, {"dtype": "bfloat16", "device": "cuda",  # a Ray actor's
                                                      "weights_device": "cpu"})
    monkeypatch.setattr(base, "device_memory", lambda: (H100, None))  # an 80 GB device, CUDA not initialised
    cfg = EngineConfig(**{k: v for k, v in engine.items()})
    plan = VLLMEngine._plan(policy, cfg, resident, shared)
    assert {k: float(v) for k, v in plan.parts().items()} == planned and gpus == 1
    share, vllm_bytes, master = ES_EXPECTED[size]
    P = param_count(shape)
    assert plan.utilization == share and plan.engine_bytes == vllm_bytes == planned["vllm"]
    assert planned["es_master"] == 4 * P == master and "driver_model" not in planned
    # K engines share one GPU: 1.5B fits two, 7B and 8B fail in one line with the bytes
    two = {**engine, "engines_per_gpu": 2}
    planned2, gpus2, note = memory_plan(es, shape, 1174, 64, dtype="bfloat16", engine=two, gpu_gb=80.0)
    if size == "1.5b":
        assert gpus2 == 1 and planned2["vllm"] == 2 * math.ceil(H100 * 0.3526)
    else:
        assert gpus2 == 0 and "does not fit one GPU: it needs" in note and "\n" not in note
        with pytest.raises(base.EngineError, match=r"needs [\d,]+ bytes .* the device has 80,000,000,000 .*pinned"):
            VLLMEngine._plan(policy, EngineConfig(**two), resident, shared)


@pytest.mark.parametrize("model,gpus", [("Qwen/Qwen2.5-0.5B-Instruct", 1), ("Qwen/Qwen2.5-1.5B-Instruct", 1),
                                        ("meta-llama/Llama-3.2-1B-Instruct", 1), ("Qwen/Qwen2.5-3B-Instruct", 4),
                                        ("meta-llama/Llama-3.2-3B-Instruct", 4), ("Qwen/Qwen2.5-7B-Instruct", 8),
                                        ("meta-llama/Llama-3.1-8B-Instruct", 8)])
def test_ppo_gpus_at_its_automatic_micro_batch(model, gpus):
    """docs/gpus.md: PPO (conf/method/ppo.yaml, train_micro_batch null) at 64 x (150 + 1,024) tokens on 80 GB
    GPUs, its micro-batch sized as GRPO's (methods/ppo_config.py train_micro_batch: one sequence at a time here);
    the whole minibatch in one forward needed 8 GPUs at 0.5B, 16 at 1-1.5B and 32 at 3-8B. No other
    micro-batch needs fewer GPUs, so the plan names none."""
    from harness.runner.pricing import memory_plan
    ppo = OmegaConf.create({"_target_": "methods.ppo.PPO"})
    _, n, note = memory_plan(ppo, load_shape(model), 150 + 1024, 64, dtype="bfloat16", gpu_gb=80.0, prompt_tokens=150)
    assert (n, note) == (gpus, None)


@pytest.mark.parametrize("size,gpus", [("1.5b", 1), ("7b", 4), ("8b", 4)])
def test_grpo_on_vllm_planner_equals_what_the_trainer_requests(size, gpus, monkeypatch):
    """GRPO's colocated engine (methods/grpo.py GRPO.memory_plan, on the planner's GPU count: FSDP beyond one)
    and the planner give the same share and bytes; a 7B trainer does not fit one GPU with its engine."""
    from harness.runner.pricing import memory_plan
    from methods.grpo import GRPO

    shape, engine = load_shape(SHAPES[size]), vllm_engine_conf()
    grpo = OmegaConf.create({"_target_": "methods.grpo.GRPO", "beta": 1e-3, "prompts_per_step": 8,
                             "num_generations": 8, "gradient_accumulation_steps": 1, "gradient_checkpointing": False})
    planned, n, _ = memory_plan(grpo, shape, 150 + 16, 64, dtype="bfloat16", engine=engine, gpu_gb=80.0)
    assert n == gpus
    if gpus > 1:  # the code under conf/accelerate/fsdp.yaml on that many GPUs
        monkeypatch.setenv("WORLD_SIZE", str(gpus))
        monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    method = GRPO(beta=1e-3, prompts_per_step=8, num_generations=8, engine=engine)
    plan = method.memory_plan(shape, "bfloat16", H100, longest_prompt=150, max_completion_length=16)
    assert plan.fits and {k: float(v) for k, v in plan.parts().items()} == planned
    P = param_count(shape)
    if gpus == 1:  # fp32 weights (methods/grpo.py trains an fp32 copy), gradients and AdamW states, an fp32 reference
        assert planned["weights"] == planned["grads"] == 4 * P and planned["adamw"] == 8 * P
        assert planned["reference"] == 4 * P
    else:  # fp32 and sharded under FSDP: 16 B/param over the GPUs
        assert planned["weights"] + planned["grads"] + planned["adamw"] == pytest.approx(16 * P / gpus, abs=4)
    assert sum(planned.values()) <= H100 and 0 < plan.utilization < 0.85


def test_node_hours_pack_runs_in_plan_order():
    """Hand-computed on 2 GPUs: A (4 GPU-h, 1 GPU) starts; B (2 GPU-h on 2 GPUs) waits; C (1 GPU-h, 1 GPU)
    takes the free GPU and ends at 1 h; B starts when A ends at 4 h and takes 1 h: 5 h in lanes, 4 + 1 + 1 = 6 h
    one at a time. A run that fits no GPU count, or more GPUs than the node, is left out."""
    from harness.runner.pricing import RunCost, node_hours

    costs = [RunCost(0, "m", "A", "es", 1.0, 4.0, gpus_needed=1), RunCost(1, "m", "B", "grpo", 1.0, 2.0, gpus_needed=2),
             RunCost(2, "m", "C", "es", 1.0, 1.0, gpus_needed=1), RunCost(3, "m", "D", "grpo", 1.0, 9.0, gpus_needed=0),
             RunCost(4, "m", "E", "grpo", 1.0, 9.0, gpus_needed=3)]
    assert node_hours(costs, 2) == (6.0, 5.0)
    assert node_hours([], 8) == (0.0, 0.0)


@pytest.mark.parametrize("experiment", ["qiu2025_table1", "sigma_sweep"])
def test_the_gpu_docs_price_table_is_what_plan_prints(experiment):
    """docs/gpus.md's price row of each GPU experiment: its total GPU-h and its node-hours, one run at a time and in
    lanes, are the figures +plan=true prints now (a planner change that moves them must update the table)."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    out = subprocess.run([sys.executable, "-m", "harness", f"experiment={experiment}", "+plan=true"],
                         capture_output=True, text=True, check=True).stdout
    total = re.search(r"total +\d+ runs +([\d.]+) GPU-h = ([\d.]+) h", out)
    node = re.search(r"one node of 8 GPUs: ([\d.]+) h one run at a time \(lanes=1\), ([\d.]+) h in lanes", out)
    row = next(line for line in (Path(__file__).parents[1] / "docs" / "gpus.md").read_text().splitlines()
               if line.startswith(f"| `{experiment}` "))
    assert f"| {total[1]} GPU-h | {node[1]} h / {node[2]} h |" in row, (row, total[0], node[0])
