"""harness/core/train_memory.py: a trainer's micro-batch, term by term, against what was measured: on CPU
(results/bench/train_memory.json, written by harness/tools/bench_train_memory.py: the real vocabulary and
Qwen2.5-0.5B's widths at 1-2 layers) and on an H200 (results/bench/gpu_check_quick_h200.json: GRPO's peak with
the trainer before the fp32 master). Also the ES margin and the one-line refusals of what does not fit.

    python -m pytest tests/test_train_memory.py -q
"""
from __future__ import annotations

import functools
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from harness.core import gpu_memory as gm
from harness.core import train_memory as tm
from harness.core.model_shapes import load_shape
from harness.core.paths import ROOT

H200 = json.loads((ROOT / "results" / "bench" / "gpu_check_quick_h200.json").read_text())


@functools.cache
def bench() -> dict:
    return json.loads((ROOT / "results" / "bench" / "train_memory.json").read_text())


def bench_shape(layers: int) -> SimpleNamespace:
    """The benchmark's model (harness/tools/bench_train_memory.py) as a config the memory model reads."""
    s = bench()["shape"]
    return SimpleNamespace(hidden_size=s["hidden"], intermediate_size=s["intermediate"], num_attention_heads=s["heads"],
                           num_key_value_heads=s["kv_heads"], num_hidden_layers=layers, vocab_size=s["vocab"],
                           tie_word_embeddings=True, model_type="qwen2")


def test_module_is_torch_free():
    code = "import sys; import harness.core.train_memory; assert 'torch' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


@pytest.mark.parametrize("mode,precision", [("current", tm.FP32_MASTER), ("old", tm.OLD_BF16)])
def test_constants_are_the_measured_slopes(mode, precision):
    """Per term, the model's bytes against the least-squares slopes on CPU: the layers' activations per token
    (the CPU points have no padding, so SDPA's own GQA: no repeat_kv), the logits per completion token and
    vocabulary entry, autocast's weight copies per matmul parameter, the states and the fused AdamW step. The
    bf16-weight trainer's peak on CPU also grows by about 2 x vocab x hidden bytes per sequence (a CPU backward's,
    absent from the H200's peak below), so only its per-token slopes and states are held to the model."""
    fit = bench()["modes"][mode]["fit"]
    theory = tm.layer_bytes(bench_shape(1), precision, repeat_kv=False)
    assert fit["peak"]["per_token_layer"] == pytest.approx(theory, rel=0.05)
    assert fit["kept"]["per_token_layer"] == pytest.approx(theory, rel=0.05)
    assert fit["kept"]["per_logit"] == pytest.approx(4, rel=0.05)  # the fp32 logits the backward reads, either way
    per_matmul_param = fit["peak"]["per_layer"] / fit["layer_linear_params"]
    assert per_matmul_param == pytest.approx(2 if precision.autocast else 0, abs=0.1)
    assert fit["grads_per_param"] == pytest.approx(precision.param_bytes, rel=0.05)
    assert fit["adamw_states_per_param"] == pytest.approx(2 * precision.param_bytes, rel=0.05)
    assert fit["step_peak_per_param"] <= tm.ADAMW_FUSED_TEMPORARIES + 0.1
    if mode == "current":
        assert tm.LOGIT_BYTES == pytest.approx(fit["peak"]["per_logit"], rel=0.05)


def test_ppo_constants_are_the_measured_slopes():
    """PPO's policy micro-batch (every position's fp32 logits through the backward, the step and the entropy):
    bytes per token and vocabulary entry of every position, and per completion token on top."""
    fit = bench()["modes"]["ppo"]["fit"]["peak"]
    vocab = bench()["shape"]["vocab"]
    assert tm.PPO_ALL_POSITION_LOGIT_BYTES == pytest.approx(fit["per_token"] / vocab, rel=0.05)
    assert tm.PPO_LOGIT_BYTES == pytest.approx(fit["per_logit"], rel=0.05)
    assert fit["per_token_layer"] == pytest.approx(tm.layer_bytes(bench_shape(1), tm.FP32_MASTER, False), rel=0.05)


@pytest.mark.parametrize("mode", ["current", "ppo"])
def test_each_cpu_point_is_predicted(mode):
    """Every measured micro-batch with the embedding frozen (the activations' and logits' peak) within 10% of the
    model (autocast's copies of the layers and the head, activations, logits) or 0.1 GiB (the smallest points
    carry about 80 MB the model leaves out); with every parameter trained (the gradients' peak) the model is
    at most 20% above the measurement and never below it by more than 2%."""
    precision = tm.FP32_MASTER
    for run in bench()["modes"][mode]["runs"]:
        shape = bench_shape(run["layers"])
        for p in run["points"]:
            trained = p["variant"] == "full"
            parts = tm.micro_batch_parts(shape, run["params"], precision=precision, sequences=p["sequences"],
                                         tokens=p["tokens"], completion_tokens=p["completion_tokens"], trained=trained,
                                         all_positions=mode == "ppo")
            parts["activations"] = tm.activation_bytes(shape, p["sequences"], p["tokens"], precision, repeat_kv=False)
            predicted, measured = sum(parts.values()), p["peak"]
            if trained:
                assert 0.98 * measured <= predicted <= 1.2 * measured, (mode, run["layers"], p, parts)
            else:
                assert abs(predicted - measured) <= max(0.1 * measured, 0.1 * gm.GiB), (mode, run["layers"], p, parts)


def test_the_h200_grpo_peak_of_the_old_trainer_is_reproduced():
    """results/bench/gpu_check_quick_h200.json: GRPO at the 1.5B shape with bf16 weights, gradients and AdamW
    (the trainer before the fp32 master, under TRL's default bf16 autocast: fp32 logits), a bf16 reference, one
    micro-batch of 64 sequences of 268 tokens (the longest prompt 12, 256 completion tokens: the estimate then
    priced 57.42 GiB of activations at exactly that shape), no checkpointing: 88.4 GiB peak allocated. The model
    within 5%."""
    grpo = H200["sections"]["grpo"]
    shape = load_shape("Qwen/Qwen2.5-1.5B-Instruct")
    counts = gm.model_counts(shape)
    parts = gm.trainer_resident(shape, counts, param_bytes=2, reference_bytes=2, sequences=64, tokens=268,
                                completion_tokens=256, activation_dtype_bytes=2)
    assert parts["weights"] / gm.GiB == pytest.approx(grpo["predicted_gib"]["weights"])
    predicted = sum(parts.values()) / gm.GiB
    assert predicted == pytest.approx(grpo["peak_torch_allocated_gib"], rel=0.05)
    assert grpo["predicted_total_gib"] < 0.85 * grpo["peak_torch_allocated_gib"]  # the estimate this replaced


def test_es_share_keeps_a_margin():
    """ES's engines leave the larger of 1.5 GiB and 2% of the device free; other engines keep no margin."""
    assert gm.es_margin(80 * 10**9) == 3 * gm.GiB // 2 and gm.es_margin(141 * 10**9) == 2_820_000_000
    shape = load_shape("Qwen/Qwen2.5-7B-Instruct")
    engine = {"gpu_memory_utilization": 0.85, "max_model_len": 1174}
    plan = gm.es_vllm_plan(shape, "bfloat16", 80 * 10**9, engine)
    assert plan.fits and plan.parts()["margin"] == 3 * gm.GiB // 2
    assert 80 * 10**9 - sum(plan.parts().values()) >= 0
    assert gm.plan_for_engine(shape, "bfloat16", 80 * 10**9, engine).margin == 0


def test_a_micro_batch_that_cannot_fit_fails_in_one_line():
    """GRPO on HF whose single-sequence micro-batch exceeds the GPU: no GPU count, one line with the bytes."""
    from omegaconf import OmegaConf

    from harness.runner.pricing import memory_plan
    grpo = OmegaConf.create({"_target_": "methods.grpo.GRPO", "prompts_per_step": 1, "num_generations": 2,
                             "micro_batch_size": 1})
    parts, gpus, note = memory_plan(grpo, load_shape("Qwen/Qwen2.5-7B-Instruct"), 150 + 16384, 64,
                                    dtype="bfloat16", engine={"name": "hf"}, gpu_gb=80.0)
    assert gpus == 0 and "\n" not in note and "needs" in note and "bytes" in note and "72,000,000,000" in note


def test_accumulated_gradients_are_alive_through_every_micro_batch():
    """Several micro-batches per step: every gradient beside the activations; one: the larger of the two moments."""
    shape = load_shape("Qwen/Qwen2.5-1.5B-Instruct")
    P = gm.model_counts(shape).params
    one = tm.micro_batch_parts(shape, P, precision=tm.FP32_MASTER, sequences=2, tokens=1174, completion_tokens=1024)
    many = tm.micro_batch_parts(shape, P, precision=tm.FP32_MASTER, sequences=2, tokens=1174, completion_tokens=1024,
                                accumulating=True)
    assert many["grads"] == 4 * P and one["grads"] < many["grads"]
    assert {k: v for k, v in one.items() if k != "grads"} == {k: v for k, v in many.items() if k != "grads"}
