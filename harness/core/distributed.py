"""Which process am I, when GRPO/PPO run across processes (accelerate launch, torchrun), and what they share.

    accelerate launch --config_file conf/accelerate/ddp.yaml -m harness method=grpo stamp=S ...
    torchrun --nproc-per-node 2 -m harness method=grpo device=cpu ...      # 2 CPU processes, gloo

Every rank runs the same Hydra command; TRL's trainers pick the process group up from the
environment the launcher sets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT). Only rank 0 writes
records, manifests, tables and logs (the guards in harness/runner/run.py, harness/runner/experiment.py and
harness/runner/cli.py ask `is_main_process()`), and every rank must write into the same run directory, so
before Hydra composes anything `launch_argv` gives all ranks one stamp (see `shared_stamp`).
Read from the environment, not torch.distributed, because the stamp is needed before any process
group exists (accelerate creates it inside the trainer).

Test: python -m pytest tests/test_distributed.py -q
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import torch

from harness.core.engine_kinds import capabilities
from harness.core.errors import UserError


class DistributedError(UserError, ValueError):
    """A multi-process launch that cannot work (no shared stamp, more processes than GPUs, ...)."""


def world_size() -> int:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_world_size()
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank()
    return int(os.environ.get("RANK", "0"))


def is_main_process() -> bool:
    return rank() == 0


def gather_lists(values: list) -> list:
    """Every rank's `values`, concatenated in rank order, on every rank (the ledger's per-step token counts).

    All ranks get the same list, so FLOPs computed from it, and the budget stop decision taken on
    them, are identical everywhere. Without a process group (one process) the input comes back.
    """
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()) or world_size() == 1:
        return list(values)
    out: list = [None] * world_size()
    torch.distributed.all_gather_object(out, list(values))
    return [v for part in out for v in part]


def _launcher_start_time() -> float:
    """Start time (epoch seconds) of this process's parent: the launcher agent all local ranks share (Linux)."""
    ticks = int(Path(f"/proc/{os.getppid()}/stat").read_text().rsplit(")", 1)[1].split()[19])
    boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                if line.startswith("btime"))
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def shared_stamp() -> str:
    """One stamp for every rank of this launch, without a process group.

    ESBENCH_STAMP wins when set (a Slurm script can export it once for all nodes). Otherwise the
    ranks of a single-node launch derive it from the start time of the launcher process they share
    (torchrun's / accelerate's agent), so they agree to the second. Across nodes there is no shared
    parent: the stamp must be given.

    Raises:
        DistributedError: a multi-node launch without stamp=... or ESBENCH_STAMP.
    """
    if os.environ.get("ESBENCH_STAMP"):
        return os.environ["ESBENCH_STAMP"]
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world_size()))
    if local != world_size():
        raise DistributedError(f"a {world_size()}-process launch over several nodes needs one stamp for all of "
                               "them: pass stamp=NAME (or export ESBENCH_STAMP=NAME) in the launch command")
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(_launcher_start_time()))


def launch_argv(argv: list[str]) -> list[str]:
    """The Hydra arguments for this rank: a shared stamp, and on ranks > 0 no Hydra output files.

    Unchanged for a single process. Ranks > 0 get `hydra.output_subdir=null` (rank 0 writes
    .hydra/) and `hydra/job_logging=stdout` (rank 0 writes the log file), so only rank 0 writes.
    """
    if world_size() <= 1:
        return argv
    args = list(argv)
    if not any(a.startswith("stamp=") for a in args[1:]):
        args.append(f"stamp={shared_stamp()}")
    if not is_main_process():
        args += ["hydra.output_subdir=null", "hydra/job_logging=stdout"]
    return args


def refuse_single_process(method: str) -> None:
    """ES and base run in one process (ES spreads over GPUs with its own Ray workers): refuse a multi-process launch."""
    if world_size() > 1:
        raise DistributedError(f"method={method} runs in one process (ES uses engine workers for its population, "
                               f"base only evaluates) but this launch has {world_size()} processes; run it with "
                               "plain `python -m harness` (accelerate/torchrun are for method=grpo and method=ppo)")


def check_launch(device_type: str, engine: str, curves: bool = False) -> None:
    """Refuse process layouts that cannot work, before any model is built (one line each).

    Args:
        device_type: "cuda" or "cpu", the device the run trains on.
        engine: the generation engine's name ("hf" or "vllm"), asked for its capabilities.
        curves: learning curves are on (eval.every_flops_fraction): rank 0 evaluates mid-run alone.
    """
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world_size()))
    if device_type == "cuda" and local > torch.cuda.device_count():
        raise DistributedError(f"{local} processes per node but this node has {torch.cuda.device_count()} GPU(s); "
                               f"launch with --num_processes {torch.cuda.device_count()} (accelerate) or "
                               f"--nproc-per-node {torch.cuda.device_count()} (torchrun)")
    if using_fsdp() and capabilities(engine).own_memory_share and (world_size() == 1 or (device_type == "cuda" and torch.cuda.device_count() == 1)):
        raise DistributedError("FSDP with engine=vllm (colocate) on one GPU: FSDP shards nothing there and vLLM needs "
                               "its own memory share beside the full model; use conf/accelerate/fsdp.yaml on several "
                               "GPUs, or engine=hf, or plain `python -m harness` with ddp/no accelerate")
    if using_fsdp() and curves and world_size() > 1:  # a forward on rank 0's shard alone waits for the others forever
        raise DistributedError("learning curves (eval.every_flops_fraction) evaluate on rank 0 alone mid-run, which "
                               "FSDP's sharded weights cannot do; set eval.every_flops_fraction=null under FSDP")


def local_device() -> None:
    """Pin this rank to its own GPU (LOCAL_RANK) before the model loads, so ranks do not all load onto cuda:0."""
    if world_size() > 1 and torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))


def barrier() -> None:
    """Wait for every rank (a no-op without a process group)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized() and world_size() > 1:
        torch.distributed.barrier()


def using_fsdp() -> bool:
    """True under an FSDP launch (conf/accelerate/fsdp.yaml sets ACCELERATE_USE_FSDP for every rank)."""
    return os.environ.get("ACCELERATE_USE_FSDP", "false").lower() in ("1", "true")


def check_gpus_fit(what: str, parts: dict, gpus: int, note: str | None, gpu_bytes: int) -> None:
    """Refuse, in one line naming the launch that fits, a run the planner says needs more GPUs than this launch
    shards it over (`parts`, `gpus`, `note`: the method's facts.memory on this GPU, harness/runner/pricing.py).
    A single process (a plain `python -m harness`, a Slurm job of the submitit launcher) or DDP holds every
    parameter on each GPU and would run out of memory after its set-up; FSDP divides the states over its ranks."""
    shards = world_size() if using_fsdp() else 1
    if gpus and gpus <= shards:
        return
    need = f"needs {gpus} GPUs sharded with FSDP" if gpus else "fits no number of GPUs"
    launch = "runs in one process" if world_size() == 1 else (f"shards it over {shards}" if shards > 1 else
                                                                 f"runs DDP on {world_size()} (a full copy each)")
    fix = (f"launch it with accelerate launch --config_file conf/accelerate/fsdp.yaml --num_processes {gpus} "
           "-m harness <the same arguments> (docs/gpus.md: Slurm)" if gpus else (note or "use a larger GPU"))
    raise DistributedError(f"{what} {need} by the planner's memory model ({sum(parts.values()) / 1e9:.1f} GB on "
                           f"{gpu_bytes / 1e9:.0f} GB GPUs) but this launch {launch}; {fix}")


def check_fsdp(method: str, peft: str | None, checkpoint_every: int = 0) -> None:
    """Refuse the FSDP combinations this harness does not gather correctly (one line each)."""
    if not using_fsdp():
        return
    if peft:
        raise DistributedError(f"method={method} with method.peft={peft} under FSDP: LoRA on a 7-8B model fits one "
                               "GPU per rank, so launch it with conf/accelerate/ddp.yaml instead of fsdp.yaml")
    if checkpoint_every:
        raise DistributedError(f"method={method} checkpoints hold rank 0's shard only under FSDP; set "
                               "method.checkpoint_every=0 or launch with conf/accelerate/ddp.yaml")


def trained_model(accelerator, prepared, part: str | None = None):
    """The trained model, whole, for rank 0 to evaluate and store; every rank must call this.

    Under DDP (and in one process) every rank already holds all the weights: the unwrapped module
    comes back. Under FSDP each rank holds a shard, and a forward pass on rank 0 alone would wait
    for the others forever, so the full state dict is gathered to rank 0's CPU (a collective) and
    loaded into a fresh, unsharded copy of the architecture (`full_model_from_state`).

    Args:
        accelerator: the trainer's accelerator.
        prepared: the trainer's (wrapped) model.
        part: the submodule that is the policy (PPO's wrapper holds `policy` and `value_model`).
    """
    module = accelerator.unwrap_model(prepared)
    module = getattr(module, part) if part else module
    if not using_fsdp():
        return module
    state = accelerator.get_state_dict(prepared)  # full weights on rank 0's CPU, nothing elsewhere
    if not is_main_process():
        return module
    # rank 0 evaluates on its GPU, in the dtype the model was loaded in: under mixed precision accelerate upcasts
    # bf16/fp16 parameters to fp32 before sharding (accelerate/utils/fsdp_utils.py fsdp2_prepare_model; FSDP1:
    # accelerate/accelerator.py Accelerator.prepare_model), so the gathered state is fp32 and vLLM would evaluate
    # in fp32; config.dtype keeps the loaded dtype
    loaded = getattr(module.config, "dtype", None)  # a torch.dtype, or its name in a config read from JSON
    loaded = getattr(torch, str(loaded).removeprefix("torch."), None) if loaded is not None else None
    return full_model_from_state(module.config, state, part).to(accelerator.device, loaded)


def full_model_from_state(config, state: dict, part: str | None = None):
    """An unsharded causal LM of `config` holding `state` (keys under `part.` when given).

    Raises:
        RuntimeError: the state does not fill the architecture (a tied head may be absent, nothing else).
    """
    from transformers import AutoModelForCausalLM

    if part:
        state = {k[len(part) + 1:]: v for k, v in state.items() if k.startswith(part + ".")}
    dtype = next(iter(state.values())).dtype
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
    if set(missing) - tied or unexpected:
        raise RuntimeError(f"gathered FSDP state does not match {type(model).__name__}: missing "
                           f"{sorted(set(missing) - tied)[:5]}, unexpected {sorted(unexpected)[:5]}")
    model.tie_weights()
    return model
