"""harness/core/gpu_memory.py: the parts a run keeps on a GPU (from the model shape alone, checked against the
tensors the code allocates, on CPU) and vLLM's share of the rest. The planner-equals-code checks on the
1.5B, 7B and 8B shapes are in tests/test_plan.py.

    python -m pytest tests/test_gpu_memory.py -q
"""
from __future__ import annotations

import inspect

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from harness.core import gpu_memory as gm
from harness.core.model_shapes import load_shape

SHIPPED = ["Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-3B-Instruct",
           "Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.2-1B-Instruct", "meta-llama/Llama-3.2-3B-Instruct",
           "meta-llama/Llama-3.1-8B-Instruct", "smollm2-135m", "zoo-1m"]


def test_module_is_torch_free():
    """The planner imports it without torch (a subprocess: this one has torch loaded already)."""
    import subprocess
    import sys
    code = ("import sys; import harness.core.gpu_memory; "
            "assert 'torch' not in sys.modules, 'gpu_memory imported torch'")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).returncode == 0


@pytest.mark.parametrize("name", SHIPPED)
def test_counts_equal_the_models_parameters(name):
    """Every parameter once (tied head once, Qwen2's q/k/v biases, norms) and the largest tensor, as a meta model has them."""
    from transformers import AutoModelForCausalLM
    shape = load_shape(name)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(shape)
    sizes = [p.numel() for _, p in model.named_parameters()]
    counts = gm.model_counts(shape)
    assert (counts.params, counts.largest) == (sum(sizes), max(sizes))


def test_the_issue_figures_from_the_shapes():
    """An earlier hand estimate's master + buffer figures, recomputed: its 'master + buffers' counted three
    largest-tensor buffers (es_vllm.py allocates two); its 'in the update' figure is the update's peak (four)."""
    gib = {}
    for key, name in (("0.5b", SHIPPED[0]), ("1.5b", SHIPPED[1]), ("3b", SHIPPED[2]), ("7b", SHIPPED[3]), ("8b", SHIPPED[6])):
        r = gm.es_vllm_resident(gm.model_counts(load_shape(name)))
        gib[key] = (round((r["es_master"] + r["es_buffers"]) / gm.GiB, 2), round(sum(r.values()) / gm.GiB, 2))
    assert gib == {"0.5b": (2.85, 4.35), "1.5b": (7.49, 9.23), "3b": (13.81, 16.13), "7b": (32.43, 36.49),
                   "8b": (33.83, 37.74)}
    # 0.5B: the checksum's three int64 chunks (1.5 GiB) outgrow the update's two fp32 temporaries (1.0 GiB)
    assert gm.es_transient(gm.model_counts(load_shape(SHIPPED[0]))) == 3 * 8 * gm.CHECKSUM_CHUNK


class NewStorage(TorchDispatchMode):
    """Bytes of every new storage an op returns (not one of its inputs': out= and in-place ops allocate nothing)."""

    def __init__(self):
        super().__init__()
        self.sizes: list[int] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        out = func(*args, **kwargs)
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs:
                self.sizes.append(t.untyped_storage().nbytes())
        return out


def test_es_parts_are_the_tensors_the_code_allocates(tmp_path):
    """On CPU, from the tensor sizes: es_vllm's master (read_tensors, fp32) and its two buffers; the update's
    and the checksum's largest temporaries (methods/es/core.py), which gm.es_transient takes two / three of."""
    from harness.core.policy import load_policy
    from harness.engines.vllm_worker import read_tensors
    from methods.es.core import NoiseSpec, es_update, master_checksum
    policy = load_policy("zoo-1m", "bfloat16", device="cpu")
    names = [n for n, _ in policy.model.named_parameters()]
    policy.model.save_pretrained(tmp_path)
    master = read_tensors(str(tmp_path), names, torch.device("cpu"))  # what ESWorkerExtension.es_init keeps
    counts = gm.model_counts(policy.model.config)
    parts = gm.es_vllm_resident(counts)
    assert sum(m.numel() * m.element_size() for m in master) == parts["es_master"]
    assert 2 * 4 * max(m.numel() for m in master) == parts["es_buffers"]  # es_buf, es_tmp
    buf = torch.empty(counts.largest, dtype=torch.float32)
    with NewStorage() as update:
        es_update(master, [1, 2, 3], [0.5, -0.25, 1.0], 1e-3, buf, NoiseSpec())
    assert max(update.sizes) == 4 * counts.largest  # zeros_like, pow(2): fp32 of the largest tensor; noise goes to buf
    assert sorted(update.sizes)[-2:] == [4 * counts.largest] * 2
    with NewStorage() as checksum:
        master_checksum(master)
    assert max(checksum.sizes) == 8 * min(gm.CHECKSUM_CHUNK, counts.largest)  # int64 chunks
    assert inspect.signature(master_checksum).parameters["chunk"].default == gm.CHECKSUM_CHUNK
    assert gm.es_transient(counts) == max(2 * 4 * counts.largest, 3 * 8 * min(gm.CHECKSUM_CHUNK, counts.largest))


def test_share_arithmetic_and_the_error_line():
    """u = min(cap / K, (total - outside) / (K total)) rounded down; vLLM's bytes = ceil(total u) as it computes them;
    a plan that cannot fit says so in one line with the bytes needed and available."""
    floor = {"weights": 10 * gm.GiB, "runtime": gm.GiB, "kv_one_sequence": gm.GiB // 4}
    plan = gm.plan_engine(80 * gm.GiB, engines=2, cap=0.85, floor=floor, per_engine={"es_master": 8 * gm.GiB},
                          per_gpu={"driver_model": 4 * gm.GiB})
    outside = 4 * gm.GiB + 2 * (8 * gm.GiB + gm.PROCESS_RESERVE) + gm.es_margin(80 * gm.GiB)  # ES keeps a margin
    assert plan.outside == outside and plan.utilization == 0.3524  # (80 - 22 - 1.6) / 160
    assert plan.engine_bytes == -(-80 * gm.GiB * 3524 // 10000) and plan.fits
    assert sum(plan.parts().values()) <= 80 * gm.GiB
    capped = gm.plan_engine(80 * gm.GiB, engines=2, cap=0.5, floor=floor)
    assert capped.utilization == 0.25  # the cap, shared by the engines
    tight = gm.plan_engine(24 * gm.GiB, engines=2, cap=0.85, floor=floor, per_engine={"es_master": 8 * gm.GiB})
    assert not tight.fits and tight.needed > tight.total
    line = tight.error()
    assert "\n" not in line and f"needs {tight.needed:,} bytes" in line and f"has {24 * gm.GiB:,}" in line
    assert "lower engine.engines_per_gpu" in line and "ES master on the CPU with pinned transfers" in line


def test_grpo_trainer_parts():
    """bf16 weights on one GPU: weights and AdamW at 2 B/param + a bf16 reference; FSDP: the fp32 master, sharded;
    LoRA: frozen weights + 16 B per adapter parameter, no reference copy and no base gradients. The micro-batch's
    parts (harness/core/train_memory.py) grow with it; checkpointing keeps less."""
    from harness.core import train_memory as tm
    shape = load_shape("Qwen/Qwen2.5-1.5B-Instruct")
    counts = gm.model_counts(shape)
    P = counts.params
    one = gm.trainer_resident(shape, counts, param_bytes=2, reference_bytes=2, sequences=8, tokens=166,
                              completion_tokens=16, activation_dtype_bytes=2)
    assert (one["weights"], one["adamw"], one["reference"]) == (2 * P, 4 * P, 2 * P) and one["autocast_cache"] == 0
    assert one["activations"] == tm.activation_bytes(shape, 8, 166, tm.OLD_BF16)
    fsdp = gm.trainer_resident(shape, counts, param_bytes=4, reference_bytes=2, sequences=8, tokens=166,
                               completion_tokens=16, activation_dtype_bytes=2, shards=4, micro_batches=2)
    assert fsdp["weights"] + fsdp["adamw"] + fsdp["grads"] == pytest.approx(16 * P / 4, abs=4)
    assert fsdp["activations"] == tm.activation_bytes(shape, 8, 166, tm.FP32_MASTER) > one["activations"]
    lora = gm.trainer_resident(shape, counts, param_bytes=2, reference_bytes=0, sequences=8, tokens=166,
                               completion_tokens=16, activation_dtype_bytes=2, lora_params=1000)
    assert lora["lora_states"] == 16000 and not {"reference", "adamw", "grads"} & set(lora)
    ckpt = gm.activation_bytes(shape, 8, 166, 16, 2, checkpointing=True)
    assert ckpt < gm.activation_bytes(shape, 8, 166, 16, 2) < gm.activation_bytes(shape, 16, 166, 16, 2)
