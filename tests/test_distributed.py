"""Multi-process RL (harness/core/distributed.py, the ledger gather in methods/grpo.py, ppo.py, trl_ledger.py).

Run: python -m pytest tests/test_distributed.py -q            (fast checks, no processes started)
     python -m pytest tests/test_distributed.py -q -m slow    (the CLI, and GRPO in 1 and in 2 gloo processes, ~2 min)
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.core import distributed
from harness.tools.bench_ddp import run
from harness.core.distributed import DistributedError, check_launch, launch_argv, refuse_single_process
from methods.es import ES
from methods.grpo import GRPO
from methods.ppo import PPO

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def rank1_of_2(monkeypatch):
    for k, v in {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("ESBENCH_STAMP", raising=False)


def test_one_process_is_rank_zero_and_argv_is_untouched(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    assert distributed.world_size() == 1 and distributed.is_main_process()
    assert launch_argv(["harness", "method=grpo"]) == ["harness", "method=grpo"]
    assert distributed.gather_lists([3, 1]) == [3, 1]  # no process group: the local counts


def test_ranks_share_a_stamp_and_only_rank0_writes_hydra_files(rank1_of_2):
    argv = launch_argv(["harness", "method=grpo"])
    stamp = next(a for a in argv if a.startswith("stamp="))
    assert stamp == f"stamp={distributed.shared_stamp()}"  # derived from the launcher both ranks share
    assert "hydra.output_subdir=null" in argv and "hydra/job_logging=stdout" in argv
    assert not distributed.is_main_process()
    # an explicit stamp (or ESBENCH_STAMP) wins
    assert [a for a in launch_argv(["harness", "stamp=S"]) if a.startswith("stamp=")] == ["stamp=S"]


def test_stamp_from_env_and_multi_node_without_stamp_fails(rank1_of_2, monkeypatch):
    monkeypatch.setenv("ESBENCH_STAMP", "exp7")
    assert "stamp=exp7" in launch_argv(["harness"])
    monkeypatch.delenv("ESBENCH_STAMP")
    monkeypatch.setenv("WORLD_SIZE", "4")  # 2 nodes x 2 processes
    with pytest.raises(DistributedError, match="pass stamp=NAME"):
        launch_argv(["harness"])


def test_single_process_methods_refuse_a_multi_process_launch(rank1_of_2):
    assert GRPO.distributed and PPO.distributed and not getattr(ES, "distributed", False)
    with pytest.raises(DistributedError, match="method=es runs in one process.*plain `python -m harness`"):
        refuse_single_process("es")


def test_more_processes_than_gpus_and_fsdp_vllm_on_one_gpu_fail(rank1_of_2, monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(DistributedError, match="2 processes per node but this node has 1 GPU.*--num_processes 1"):
        check_launch("cuda", "hf")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    with pytest.raises(DistributedError, match="FSDP with engine=vllm"):
        check_launch("cuda", "vllm")
    check_launch("cuda", "hf")  # FSDP with HF generation is fine
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(DistributedError, match="every_flops_fraction=null under FSDP"):
        check_launch("cuda", "hf", curves=True)
    check_launch("cuda", "hf", curves=False)


@pytest.mark.slow  # a CLI subprocess: ~10 s idle, 40 s on a busy machine
def test_cli_refuses_es_under_two_processes_in_one_line(tmp_path):
    env = {**os.environ, "WORLD_SIZE": "2", "RANK": "0", "LOCAL_WORLD_SIZE": "2", "ESBENCH_STAMP": "t"}
    out = subprocess.run([sys.executable, "-m", "harness", "method=es", "model=zoo-100k", f"runs_dir={tmp_path}"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("esbench: error:")]
    assert len(lines) == 1 and "method=es runs in one process" in lines[0]


@pytest.mark.slow
def test_two_gloo_processes_charge_what_one_process_charges(tmp_path):
    """Same global batch, completions cut at 4 tokens: equal FLOPs per step, equal stop step, one record."""
    one = run(1, "zoo-100k", 3e8, 4, tmp_path)
    try:
        two, root = run(2, "zoo-100k", 3e8, 4, tmp_path, port=29571), tmp_path
    except RuntimeError as e:
        # Once in many runs on a loaded 2-core machine a gloo rank dies inside torch with SIGABRT
        # ("terminate called without an active exception", after DDP's first backward), outside esbench's
        # code; that says nothing about what the ledger charges, so such a run gets one fresh retry.
        if "SIGABRT" not in str(e):
            raise
        root = tmp_path / "retry"
        two = run(2, "zoo-100k", 3e8, 4, root, port=29572)
    assert two["world_size"] == 2 and one["world_size"] == 1
    assert two["step_flops"] == one["step_flops"] and two["steps"] == one["steps"] >= 2
    assert two["samples"] == one["samples"] == 16 * one["steps"]
    written = sorted(p.relative_to(root / "runs" / "ddp2").as_posix()
                     for p in (root / "runs" / "ddp2").rglob("*") if p.is_file())
    assert [p for p in written if p.endswith("record.json")] == ["bench-grpo/record.json"]  # rank 0's only


def test_fsdp_refuses_lora_and_rank0_only_ppo_checkpoints(monkeypatch):
    distributed.check_fsdp("ppo", "lora", 5)  # not under FSDP: nothing to refuse
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    with pytest.raises(DistributedError, match="method.peft=lora under FSDP.*ddp.yaml"):
        distributed.check_fsdp("grpo", "lora")
    with pytest.raises(DistributedError, match="rank 0's shard only.*checkpoint_every=0"):
        distributed.check_fsdp("ppo", None, 5)
    distributed.check_fsdp("ppo", None, 0)


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_trained_model_under_fsdp_is_rebuilt_whole_from_the_gathered_state(monkeypatch):
    """The FSDP branch on a real Accelerator (one CPU process gathers nothing, but runs the same calls):
    a fresh unsharded model with the trained weights comes back, for a plain model and PPO's policy part."""
    from accelerate import Accelerator
    from harness.core.policy import load_policy

    model = load_policy("zoo-100k", device="cpu").model
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight.add_(0.5)  # "trained": differs from the shipped weights
    ids = torch.tensor([[5, 9, 12, 3, 7]])
    acc = Accelerator(cpu=True)
    assert distributed.trained_model(acc, model) is model  # DDP / one process: the module itself
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    whole = distributed.trained_model(acc, model)
    assert whole is not model and torch.equal(_logits(whole, ids), _logits(model, ids))
    assert whole.lm_head.weight.data_ptr() == whole.model.embed_tokens.weight.data_ptr()  # tied again

    wrapper = torch.nn.Module()  # PPO's PolicyAndValueWrapper holds the policy beside the value model
    wrapper.policy, wrapper.value_model = model, torch.nn.Linear(2, 1)
    whole = distributed.trained_model(acc, wrapper, part="policy")
    assert torch.equal(_logits(whole, ids), _logits(model, ids))
    state = {k: v for k, v in model.state_dict().items() if "up_proj" not in k}
    with pytest.raises(RuntimeError, match="missing.*up_proj"):
        distributed.full_model_from_state(model.config, state)
