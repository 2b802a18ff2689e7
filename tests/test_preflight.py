"""A training run that cannot fit its GPU is refused before the weights load (Method.preflight, run_one).

    python -m pytest tests/test_preflight.py -q

On a GPU, GRPO's family, RLOO and PPO price the launch by the planner's memory model; a 7B model in one
process must fail in seconds with the accelerate command that fits, not after a multi-GB load. The CPU has
no GPU to fill, so the GPU is simulated: torch reports one of 1 MB, which no zoo model's training fits, and
the weight loader fails the test if it is ever reached.
"""
from types import SimpleNamespace

import pytest
import torch

from harness.core.distributed import DistributedError
from harness.core.policy import load_prompter
from harness.core.records import RECORD_NAME, read_record
from harness.runner import run as run_module
from harness.runner.run import run_one
from harness.runner.schema import validate

TINY = ["model=zoo-100k", "device=auto", "group=t", "budget.kind=samples", "budget.samples=64",
        "eval.n_prompts=8", "eval.n_samples=4", "eval.pass_ks=[1,4]", "eval.maj_ks=[4]", "eval.n_boot=50"]


@pytest.fixture
def small_gpu(monkeypatch):
    """torch sees one GPU of `gpu.bytes` (1 MB unless a test sets it); loading the weights fails the test."""
    gpu = SimpleNamespace(bytes=1_000_000)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=gpu.bytes))

    def no_weights(*a, **k):
        raise AssertionError("the weights were loaded before the fit check")

    monkeypatch.setattr(run_module, "load_policy", no_weights)
    return gpu


@pytest.mark.parametrize("method", ["grpo", "rloo", "ppo"])
def test_a_run_too_large_for_its_gpu_is_refused_before_its_weights_load(compose, tmp_path, small_gpu, method):
    cfg = compose(*TINY, f"method={method}")
    validate(cfg)
    with pytest.raises(DistributedError):
        run_one(cfg, tmp_path / "run")
    rec = read_record(tmp_path / "run" / RECORD_NAME)  # failed, with the one line, before any weight loaded
    assert rec.status == "failed", rec.status
    assert f"method={method} on " in rec.error and "by the planner's memory model" in rec.error, rec.error
    assert "1 GB GPUs" in rec.error or "0 GB GPUs" in rec.error, rec.error
    assert "weights were loaded" not in rec.error and "\n" not in rec.error


@pytest.mark.parametrize("method", ["grpo", "ppo"])
def test_the_check_passes_a_gpu_the_run_fits_and_is_skipped_on_the_cpu(compose, small_gpu, method):
    from hydra.utils import instantiate

    cfg = compose(*TINY, f"method={method}")
    m, task = instantiate(cfg.method), run_module.instantiate_task(cfg.task)
    small_gpu.bytes = 80_000_000_000
    m.preflight(load_prompter("zoo-100k", device="cuda"), task, "float32")  # fits an 80 GB GPU: nothing raised
    small_gpu.bytes = 1_000_000
    m.preflight(load_prompter("zoo-100k", device="cpu"), task, "float32")  # no GPU to fill: nothing checked
    with pytest.raises(DistributedError, match="by the planner's memory model"):
        m.preflight(load_prompter("zoo-100k", device="cuda"), task, "float32")
