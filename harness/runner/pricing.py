"""Price an experiment before it runs: FLOPs, GPU-hours and per-GPU memory of every planned run.

    python -m harness experiment=qiu2025_table1 +plan=true                      # H100, MFU 0.10
    python -m harness experiment=qiu2025_table1 +plan.gpu=a100 +plan.mfu=0.4
    python -m harness experiment=sigma_sweep +plan.measured=gpu_check.json      # throughput measured by harness.tools.gpu_check

Per run: the FLOPs budget the ledger will spend (budget.flops; a samples budget is priced as that
many completions of plan.prompt_tokens + task.max_new_tokens, an updates budget as the completions
that many of the method's updates score: its facts.samples_per_step), GPU-hours = FLOPs / (peak dense
bf16 FLOP/s x MFU), and the memory its method holds on one GPU (bytes per parameter in the model's
dtype, model.dtype; harness/core/gpu_memory.py holds the parts the code allocates). Each method prices
itself (its facts.memory, harness/core/method_facts.py, given its config as the method would build it);
the shipped ones:
  base (evaluation)  weights + KV cache at the evaluation batch (plan.eval_batch sequences); also any
                     method that declares no memory model
  es, engine=hf      weights + the fp32 master (4 bytes/param), its noise buffer and the update's
                     temporaries (largest tensor), + KV cache at method.generation_batch_size sequences
  es, engine=vllm    per GPU, what the code requests: per engine its process's master, two buffers
                     and update temporaries, a reserve per process (the driver's HF copy stays on the
                     CPU), and what vLLM is given (gpu_memory_utilization x the GPU, computed from the rest: gpu_memory.py
                     es_vllm_plan); GPUs = engine.workers / engine.engines_per_gpu
  grpo, engine=vllm  per GPU: the trainer (fp32 master and AdamW, an fp32 reference when beta > 0, and one
                     micro-batch at its peak: autocast's bf16 weight copies, activations, logits and their
                     gradient buffers, gradients: harness/core/train_memory.py, calibrated on CPU) + the
                     colocated engine's share (gpu_memory.py grpo_vllm_plan, what methods/grpo.py requests);
                     GPUs = the smallest FSDP count at which it fits
  grpo (hf), ppo     the same trainer at its micro-batch + KV at prompts_per_step x num_generations (its share
                     per rank); PPO: a reference in the model's dtype, every position's logits, a value model
                     (fp32 master, 16 bytes/param, its own activations) and KV at rollout_batch_size
  method.peft=lora   bf16 frozen weights + 16 bytes per LoRA parameter (rank x (in + out) per target
                     matrix); the reference is the base with the adapter off (no second copy)
KV cache = 2 (K, V) x layers x kv heads x head dim x dtype bytes x sequences x (prompt + completion).
On engine=hf a run "fits" when its parts take at most plan.headroom (0.9) of the GPU's memory, and GPUs
needed = the smallest FSDP count at which they fit (states divided, a micro-batch of the rank's share); a
run that fits no count says why in one line with the bytes. On engine=vllm a run fits when gpu_memory.py's
plan fits (GPUs "no" otherwise, with the reason).

Stated assumptions: peak dense bf16 FLOP/s H100 SXM 989e12, H200 989e12, A100 312e12; MFU 0.10. Every
method's FLOPs here are mostly generation, and decoding is memory-bound: HF generate ran at 1.0% MFU on an
H200 (Qwen2.5-1.5B shape, 200 sequences: 3,200 tokens/s x 3.1e9 FLOPs/token, results/bench/
gpu_check_quick_h200.json); vLLM's batched decoding is estimated at 7-15% (not measured here). Pass
+plan.measured=<gpu_check JSON> to price from measured tokens/s instead.
Model shapes come from harness/shapes/ and the zoo (harness/core/model_shapes.py), so no network.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from harness.runner.experiment import Composer, ExperimentError, _cli, list_runs
from harness.core.flops import generation_flops
from harness.core.memory_parts import (GB, LORA_TARGETS, PricingError, evaluation_memory,  # noqa: F401 - re-exported
                                       gpus_needed, kv_cache_bytes, lora_param_count)
from harness.core.method_facts import configure, declared_name, declared_trains, facts_of
from harness.core.model_shapes import ShapeError, flops_shape, shape_name
# what one run needs in memory lives apart (run_memory.py), so the lanes can ask without importing the experiment
from harness.runner.run_memory import (DEFAULTS, GPUS, memory_plan, method_memory, model_dtype,  # noqa: F401
                                       param_count)

@dataclass
class RunCost:
    index: int
    model: str
    label: str
    method: str
    flops: float
    gpu_hours: float
    memory: dict[str, float] = field(default_factory=dict)  # part -> bytes
    gpus_needed: int = 1  # 0: does not fit at any count (`note` says why)
    note: str | None = None
    sharded: bool = True  # gpus_needed counts FSDP shards (not, e.g., ES's engines)

    @property
    def total_bytes(self) -> float:
        return sum(self.memory.values())


def options(cfg: DictConfig) -> dict:
    """plan.* settings: +plan=true takes the defaults, +plan.KEY=VALUE sets one."""
    raw = cfg.get("plan")
    given = OmegaConf.to_container(raw) if isinstance(raw, DictConfig) else {}
    bad = sorted(set(given) - set(DEFAULTS))
    if bad:
        raise PricingError(f"plan.{bad[0]} is unknown; plan keys: {', '.join(sorted(DEFAULTS))}")
    opts = {**DEFAULTS, **given}
    if opts["gpu"] not in GPUS:
        raise PricingError(f"plan.gpu={opts['gpu']!r} is unknown; use one of {', '.join(GPUS)} (peak dense bf16 FLOP/s "
                        "989e12, 989e12, 312e12)")
    if not 0 < float(opts["mfu"]) <= 1:
        raise PricingError(f"plan.mfu={opts['mfu']} must be in (0, 1], e.g. plan.mfu=0.1")
    return opts


def flops_per_second(opts: dict, model: str, shape, prompt: int, completion: int) -> float:
    """Sustained FLOP/s of one GPU: measured generation throughput when given, else peak x MFU."""
    if opts["measured"]:
        path = Path(str(opts["measured"]))
        try:
            shapes = json.loads(path.read_text())["shapes"]
        except (OSError, ValueError, KeyError):
            raise PricingError(f"plan.measured={path} is not a harness.tools.gpu_check --out JSON; rerun "
                            "python -m harness.tools.gpu_check --out FILE or drop plan.measured") from None
        gen = (shapes.get(shape_name(model)) or {}).get("gen") or {}
        if gen.get("tokens_per_s"):
            return gen["tokens_per_s"] * generation_flops(shape, [prompt], [completion]) / completion
    return GPUS[opts["gpu"]][0] * float(opts["mfu"])


def update_samples(method: DictConfig) -> float:
    """Completions one update scores: the method's facts.samples_per_step on its config."""
    target = str(method.get("_target_", ""))
    facts = facts_of(target)
    if facts is None or facts.samples_per_step is None:
        raise PricingError(f"budget.kind=updates: {target or 'this method'} declares no samples_per_step in its "
                           "facts, so its updates cannot be priced; use budget.kind=flops or samples to plan it")
    return float(facts.samples_per_step(configure(target, method)))


def price(cfg: DictConfig) -> tuple[dict, list[RunCost]]:
    """The options and one RunCost per planned run (each run's config composed as the experiment would)."""
    opts = options(cfg)
    runs = list_runs(cfg)
    if not runs:
        raise ExperimentError(f"experiment group {cfg.group} has no cells or grids; add cells: or grids:")
    cli = [o for o in _cli(cfg) if not o.lstrip("+~").startswith("plan")]
    out, composer = [], Composer()
    for r in runs:
        child = composer([*cli, *r.overrides])  # Hydra's composition once per distinct group choice
        name = str(child.model.name_or_path)
        try:  # config.json read as plain JSON where it has the fields (no transformers import: +plan stays fast)
            shape = flops_shape(name)
        except ShapeError as e:
            raise PricingError(str(e)) from None
        prompt, completion = int(opts["prompt_tokens"]), int(child.task.max_new_tokens)
        target = str(child.method.get("_target_", ""))
        facts = facts_of(target)
        if not declared_trains(target):
            flops = 0.0
        elif child.budget.kind == "flops":
            flops = float(child.budget.flops)
        elif child.budget.kind == "updates":  # priced as the completions that many updates score
            flops = child.budget.updates * update_samples(child.method) * generation_flops(shape, [prompt], [completion])
        else:
            flops = float(child.budget.samples) * generation_flops(shape, [prompt], [completion])
        engine = OmegaConf.to_container(child.engine, resolve=True) if child.get("engine") is not None else None
        mem, need, note = memory_plan(child.method, shape, prompt + completion, int(opts["eval_batch"]),
                                      dtype=model_dtype(child.get("model"), shape), engine=engine,
                                      gpu_gb=GPUS[opts["gpu"]][1], headroom=float(opts["headroom"]), prompt_tokens=prompt)
        hours = flops / flops_per_second(opts, name, shape, prompt, completion) / 3600
        sharded = facts is None or facts.memory is None or facts.distributed  # evaluation, or FSDP shards
        out.append(RunCost(r.index, r.model or name, r.label, r.method or str(declared_name(target) or "?"),
                           flops, hours, mem, need, note, sharded))
    return opts, out


def report(opts: dict, costs: list[RunCost]) -> str:
    """The plan as text: one line per run, then the sums per method and the runs that need FSDP."""
    peak, gb = GPUS[opts["gpu"]]
    rate = "measured tokens/s from " + str(opts["measured"]) if opts["measured"] else f"MFU {float(opts['mfu']):.2f}"
    lines = [f"plan on {opts['gpus']} x {opts['gpu'].upper()} ({gb:.0f} GB, peak bf16 {peak:.3g} FLOP/s, {rate}); "
             f"prompt {opts['prompt_tokens']} tokens; memory = states + a micro-batch + KV cache, fits at <= "
             f"{float(opts['headroom']):.0%} of a GPU",
             f"{'idx':>4}  {'model':24s} {'run':42s} {'FLOPs':>9} {'GPU-h':>8}  {'GB/run':>7} {'GPUs':>4}  memory"]
    for c in costs:
        parts = " ".join(f"{k}={v / GB:.1f}" for k, v in c.memory.items())
        lines.append(f"{c.index:4d}  {c.model:24s} {c.label[:42]:42s} {c.flops:9.3g} {c.gpu_hours:8.1f}  "
                     f"{c.total_bytes / GB:7.1f} {c.gpus_needed or 'no':>4}  {parts}")
    lines.append("\nper method:")
    total_h = 0.0
    for m in dict.fromkeys(c.method for c in costs):
        mine = [c for c in costs if c.method == m]
        hours = sum(c.gpu_hours for c in mine)
        total_h += hours
        big = [c for c in mine if c.gpus_needed > 1]
        none = [c for c in mine if c.gpus_needed == 0]
        lines.append(f"  {m:6s} {len(mine):3d} runs  {sum(c.flops for c in mine):9.3g} FLOPs  {hours:9.1f} GPU-h  "
                     f"{len(big)} need > 1 GPU" + (f" (up to {max(c.gpus_needed for c in big)})" if big else "")
                     + (f", {len(none)} fit no GPU count" if none else ""))
    lines.append(f"  total  {len(costs):3d} runs  {total_h:9.1f} GPU-h = {total_h / int(opts['gpus']):.1f} h on "
                 f"{opts['gpus']} GPUs (training only; evaluation is not priced)")
    one_by_one, in_lanes = node_hours(costs, int(opts["gpus"]))
    lines.append(f"  one node of {opts['gpus']} GPUs: {one_by_one:.1f} h one run at a time (lanes=1), {in_lanes:.1f} h "
                 "in lanes (plan order, each run on its planned GPUs: harness/runner/lanes.py)")
    too_big = [c for c in costs if c.gpus_needed > 1 and c.sharded]
    if too_big:
        lines.append("runs that do not fit one GPU (FSDP across the GPUs named): "
                     + ", ".join(f"{c.index} ({c.gpus_needed})" for c in too_big))
    for c in costs:
        if c.note:
            lines.append(f"run {c.index}: {c.note}")
    return "\n".join(lines)


def node_hours(costs: list[RunCost], gpus: int) -> tuple[float, float]:
    """Wall hours of the plan on one node of `gpus` GPUs: one run at a time, and in lanes as lanes.py packs them
    (plan order; a freed lane takes the first waiting run whose GPUs are free). A run on its g planned GPUs takes
    its GPU-h / g (its work split evenly over them); runs that fit no GPU count, or more GPUs than the node has,
    are left out (the lines above name them)."""
    runs = [(c.gpu_hours / c.gpus_needed, c.gpus_needed) for c in costs if 0 < c.gpus_needed <= gpus]
    one_by_one = sum(hours for hours, _ in runs)
    now, free, waiting, running = 0.0, gpus, list(runs), []  # running: (end time, GPUs held)
    while waiting or running:
        for run in list(waiting):  # start every waiting run that fits now, in plan order
            if run[1] <= free:
                waiting.remove(run)
                free -= run[1]
                running.append((now + run[0], run[1]))
        running.sort()
        now, held = running.pop(0)  # the next run to end frees its GPUs
        free += held
    return one_by_one, now


def print_prices(cfg: DictConfig) -> None:
    print(report(*price(cfg)))
