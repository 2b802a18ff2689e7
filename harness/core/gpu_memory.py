"""What a run keeps on one GPU, part by part, and the share of it a vLLM engine may take: one torch-free
model, used by the engines when they load (harness/engines) and by the planner (`+plan=true`,
harness/runner/pricing.py), so the planner's per-GPU memory is what the code requests.

vLLM sizes itself from `gpu_memory_utilization` u: at start-up it requires u x total bytes free and then
lets its KV cache fill that budget after its weights and activation peak (vllm/v1/worker/utils.py
`request_memory`; vllm/v1/worker/gpu_worker.py `Worker.determine_available_memory`:
available_kv_cache_memory_bytes = requested_memory - non_kv_cache_memory). Whatever else lives on the
device must therefore fit in the remaining (1 - u) x total:

  ES on vLLM, per engine (methods/es/vllm_ext.py, allocated in the engine's worker after vLLM sized itself)
      es_master      4 B x every parameter (fp32)                                   es_init
      es_buffers     2 x 4 B x the largest tensor (noise buffer, perturbed copy)     es_init
      es_transient   the larger of es_core.es_update's accumulator + its pow(2) (2 x 4 B x the largest
                     tensor) and es_core.master_checksum's int64 temporaries (3 x 8 B x a chunk)
  ES on HF (engine=hf, in place): model weights + the same master, one buffer, the same transient
  GRPO colocated with vLLM (TRL 1.12 vllm_mode=colocate: vLLM runs inside the trainer's process),
  per process: the trainer's fp32 master (weights and AdamW's two states at 4 B/param, divided over the
      shards under FSDP), a reference model in fp32 (beta > 0; methods/grpo.py loads it in the policy's
      precision so the KL is 0 before the first update), and one micro-batch's peak: autocast's bf16 weight
      copies, activations, logits and their gradient buffers, gradients (harness/core/train_memory.py, term
      by term, calibrated on CPU: results/bench/train_memory.json)
  the driver's HF copy of the policy when it sits on the same device: GRPO and PPO train it there; ES on
      engines and evaluation-only runs on vLLM keep it on the CPU (harness/core/policy.py driver_place), and
      evaluation with eval.kl_to_base brings it and the reference beside the engine
      (harness/engines/__init__.py evaluation_engine)
  PROCESS_RESERVE per process that holds an engine or a model: the CUDA context, library workspaces and
      allocator slack, none of which vLLM counts in its budget (its start-up snapshot is taken after the
      context exists)

Inside its budget one engine needs at least its weights, a runtime allowance (activation peak of its
profile run, the sampler's logits, CUDA graphs) and the KV cache of one max_model_len sequence
(vllm/v1/core/kv_cache_utils.py `check_enough_kv_cache_memory` refuses to start otherwise); the rest of
the budget is KV cache. `plan_engine` gives each engine
    u = min(cap / engines, (total - everything outside the engines) / (engines x total))
and the plan `fits` when u x total covers that minimum. A plan that does not fit fails at load in one
line (`EnginePlan.error`) with the bytes needed and available.

The ES share keeps a margin (`es_margin`: the larger of 1.5 GiB and 2% of the device) outside the engines:
the 7B master measured 0.13 GiB above this model on an H200 (results/bench/gpu_check_quick_h200.json mem7b),
and at 7B on an 80 GB H100 the share otherwise left 0.01 GiB. A trainer's micro-batch is harness/core/
train_memory.py's model (it reproduces the H200's measured GRPO peak of the trainer before the fp32 master:
tests/test_train_memory.py). The runtime allowance of an engine is an estimate.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from harness.core import train_memory as tm

GiB = 1 << 30
DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}
# methods/es/core.py master_checksum(chunk=1 << 26): every tensor is checksummed in int64 chunks of this
# many elements; `x`, `x >> 9` and `(x >> 9) | 1` (or the product) are alive together: 3 x 8 B x chunk
CHECKSUM_CHUNK = 1 << 26
PROCESS_RESERVE = GiB        # per process on the device, outside vLLM's budget (an allowance)
CUDA_GRAPHS = GiB // 2       # vLLM's captured CUDA graphs (an allowance; 0 with enforce_eager)
# vLLM's default max_num_batched_tokens for vllm.LLM on a >= 70 GiB GPU other than an A100 (8192 there;
# vllm/engine/arg_utils.py EngineArgs.get_batch_defaults, UsageContext.LLM_CLASS); TRL's colocate engine passes 4096
ENGINE_BATCHED_TOKENS = 16384
TRL_BATCHED_TOKENS = 4096


def dtype_bytes(dtype) -> int:
    """Bytes per element of a dtype name ("bfloat16", "torch.float32", ...)."""
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPE_BYTES:
        raise ValueError(f"dtype {dtype!r} has no byte size here; use one of {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[name]


# ---- the model's tensors, from its config alone ----
@dataclass(frozen=True)
class ModelCounts:
    """Parameter counts of a Qwen2/Llama-shaped causal LM, as `named_parameters()` lists them.

    Attributes:
        params: every parameter once (a tied head is the embedding, counted once), biases and norms included.
        largest: elements of the largest tensor (the embedding, or the head when untied and larger).
        embedding: vocab x hidden (the input embedding; the head has as many).
    """

    params: int
    largest: int
    embedding: int


def _dims(shape) -> tuple[int, int, int, int, int]:
    d, i = int(shape.hidden_size), int(shape.intermediate_size)
    hd = getattr(shape, "head_dim", None) or d // shape.num_attention_heads
    return d, i, int(hd), int(shape.num_attention_heads) * int(hd), int(shape.num_key_value_heads) * int(hd)


def model_counts(shape) -> ModelCounts:
    """ModelCounts of a config (harness/core/model_shapes.load_shape): Qwen2 has q/k/v biases,
    Llama `attention_bias` (q/k/v/o) and `mlp_bias` when set; every layer has two RMSNorm vectors."""
    d, i, _, q, kv = _dims(shape)
    L, V = int(shape.num_hidden_layers), int(shape.vocab_size)
    qkv_bias = getattr(shape, "model_type", "") == "qwen2" or bool(getattr(shape, "attention_bias", False))
    o_bias = bool(getattr(shape, "attention_bias", False)) and getattr(shape, "model_type", "") != "qwen2"
    mlp_bias = bool(getattr(shape, "mlp_bias", False))
    layer = (d * q + 2 * d * kv + q * d + 3 * d * i + 2 * d
             + (q + 2 * kv if qkv_bias else 0) + (d if o_bias else 0) + (2 * i + d if mlp_bias else 0))
    tied = bool(getattr(shape, "tie_word_embeddings", False))
    embedding = V * d
    params = L * layer + embedding + (0 if tied else embedding) + d
    largest = max(embedding, d * i, d * q)
    return ModelCounts(params, largest, embedding)


def kv_cache_bytes(shape, sequences: int, tokens: int, dtype_bytes: int = 2) -> int:
    """K and V of every layer for `sequences` x `tokens` positions."""
    _, _, hd, _, _ = _dims(shape)
    return 2 * int(shape.num_hidden_layers) * int(shape.num_key_value_heads) * hd * dtype_bytes * sequences * tokens


# ---- what lives beside an engine ----
def es_transient(counts: ModelCounts) -> int:
    """Peak temporaries of ES's update (accumulator + pow(2), fp32) or of its checksum (int64 chunks)."""
    return max(2 * 4 * counts.largest, 3 * 8 * min(CHECKSUM_CHUNK, counts.largest))


def es_vllm_resident(counts: ModelCounts) -> dict[str, int]:
    """What one ES worker on vLLM keeps in its engine's process beside vLLM (methods/es/vllm_ext.py)."""
    return {"es_master": 4 * counts.params, "es_buffers": 2 * 4 * counts.largest, "es_transient": es_transient(counts)}


def es_hf_resident(counts: ModelCounts, dtype_bytes_: int, numerics: str = "exact") -> dict[str, int]:
    """ES on engine=hf (methods/es/weights.py HFWeights; numerics=inplace: methods/es/numerics.py
    InplaceWeights, no master, noise and its sums drawn in the weights' dtype, the step's norm in fp64)."""
    if numerics == "inplace":
        return {"es_transient": max(3 * dtype_bytes_ * counts.largest + 16 * counts.largest,
                                    3 * 8 * min(CHECKSUM_CHUNK, counts.largest))}
    return {"es_master": 4 * counts.params, "es_buffers": 4 * counts.largest, "es_transient": es_transient(counts)}


def activation_bytes(shape, sequences: int, tokens: int, completion_tokens: int, dtype_bytes_: int,
                     checkpointing: bool = False, param_bytes: int = 4) -> int:
    """What one micro-batch's backward reads in proportion to its sequences: the layers' activations and the
    logits with their gradient buffers (harness/core/train_memory.py), for a trainer keeping `param_bytes` per
    parameter (4: the fp32 master) and computing at `dtype_bytes_` (2: bf16 autocast)."""
    precision = tm.precision_of(param_bytes, dtype_bytes_)
    return (tm.activation_bytes(shape, sequences, tokens, precision, checkpointing)
            + tm.logit_bytes(shape, sequences, tokens, completion_tokens, precision))


# micro_batch_size=null: the most activations and logits (activation_bytes) a micro-batch keeps; plans price it whole
MICRO_BATCH_ACTIVATIONS = 8 * GiB


def grpo_micro_batch(shape, sequences: int, tokens: int, completion_tokens: int, dtype_bytes_: int,
                     checkpointing: bool = False, cap: int | None = None, param_bytes: int = 4) -> int:
    """The largest divisor of `sequences` (one rank's share of a step, per gradient accumulation step) that is
    at most `cap`, or (cap None) whose activations and logits (activation_bytes) fit MICRO_BATCH_ACTIVATIONS;
    at least 1."""
    sequences = max(1, int(sequences))
    if cap is None:
        one = activation_bytes(shape, 1, tokens, completion_tokens, dtype_bytes_, checkpointing, param_bytes)
        cap = max(1, MICRO_BATCH_ACTIVATIONS // max(1, one))
    return max(d for d in range(1, sequences + 1) if sequences % d == 0 and d <= cap)


def trainer_resident(shape, counts: ModelCounts, *, param_bytes: int, reference_bytes: int, sequences: int,
                     tokens: int, completion_tokens: int, activation_dtype_bytes: int,
                     checkpointing: bool = False, shards: int = 1, lora_params: int = 0,
                     all_positions: bool = False, micro_batches: int = 1) -> dict[str, int]:
    """A policy-gradient trainer's peak in one process, by part: full training keeps weights and AdamW's two
    states at `param_bytes` each (divided over `shards` FSDP ranks); LoRA keeps the frozen weights and 16 B per
    adapter parameter (fp32 adapter, gradient, AdamW). `reference_bytes` per parameter (0: no reference model;
    with LoRA the reference is the base with its adapters off). Then one micro-batch of `sequences` x `tokens`
    at its peak (harness/core/train_memory.py micro_batch_parts: autocast_cache, activations, logits, grads;
    `all_positions`: PPO's logits of every position; `micro_batches` per optimizer step: above 1 the gradients
    accumulate through every micro-batch's forward)."""
    P = counts.params
    precision = tm.precision_of(param_bytes, activation_dtype_bytes)  # LoRA's frozen base: no autocast copies
    if lora_params:
        out = {"weights": param_bytes * P, "lora_states": 16 * lora_params}
    else:
        out = {"weights": param_bytes * P // shards, "adamw": 2 * param_bytes * P // shards}
        if reference_bytes:
            out["reference"] = reference_bytes * P // shards
    out.update(tm.micro_batch_parts(shape, P, precision=precision, sequences=sequences, tokens=tokens,
                                    completion_tokens=completion_tokens, checkpointing=checkpointing,
                                    shards=shards, trained=not lora_params, all_positions=all_positions,
                                    accumulating=micro_batches > 1))
    return out


def engine_floor(shape, counts: ModelCounts, dtype_bytes_: int, max_model_len: int, max_num_seqs: int = 256,
                 batched_tokens: int = ENGINE_BATCHED_TOKENS, graphs: bool = True) -> dict[str, int]:
    """What one vLLM engine needs inside its budget at least: weights, a runtime allowance (the profile
    run's one-layer activations at `batched_tokens`, fp32 logits and probabilities for `max_num_seqs`,
    CUDA graphs) and the KV cache of one max_model_len sequence."""
    d, i, _, q, kv = _dims(shape)
    runtime = (batched_tokens * (3 * d + q + 2 * kv + 3 * i) * dtype_bytes_
               + 2 * 4 * max_num_seqs * int(shape.vocab_size) + (CUDA_GRAPHS if graphs else 0))
    return {"weights": counts.params * dtype_bytes_, "runtime": runtime,
            "kv_one_sequence": kv_cache_bytes(shape, 1, max_model_len, dtype_bytes_)}


# ---- the share ----
@dataclass(frozen=True)
class EnginePlan:
    """vLLM's share of one device and everything beside it (see the module docstring).

    Attributes:
        total: the device's bytes (vLLM's MemorySnapshot total: torch.cuda.mem_get_info()[1]).
        engines: vLLM engines on the device (engine.engines_per_gpu; 1 for GRPO colocate).
        cap: the most all engines together may take (engine.gpu_memory_utilization).
        floor: one engine's minimum inside its budget, by part (engine_floor).
        per_engine: bytes each engine's process keeps outside its budget (the ES master ...), by part.
        per_gpu: bytes kept once on the device outside the budgets (a colocated trainer, the driver's copy).
        wanted_kv: the KV cache the configured batch would fill (less only queues sequences: slower).
        what: the run, in words, for the error line.
        margin: bytes left free on the device for the error of the parts' estimates (es_margin).
    """

    total: int
    engines: int = 1
    cap: float = 0.85
    floor: dict = field(default_factory=dict)
    per_engine: dict = field(default_factory=dict)
    per_gpu: dict = field(default_factory=dict)
    wanted_kv: int = 0
    what: str = "engine=vllm"
    margin: int = 0

    @property
    def outside(self) -> int:
        """Bytes outside every engine's budget: per-GPU parts and the margin, and per engine its parts and a
        process reserve."""
        return (sum(self.per_gpu.values()) + self.margin
                + self.engines * (sum(self.per_engine.values()) + PROCESS_RESERVE))

    @property
    def utilization(self) -> float:
        """gpu_memory_utilization each engine gets (vllm.LLM's argument), rounded down to 1e-4."""
        free = (self.total - self.outside) / (self.engines * self.total)
        return max(0.0, math.floor(min(self.cap / self.engines, free) * 1e4) / 1e4)

    @property
    def engine_bytes(self) -> int:
        """One engine's budget as vLLM computes it: ceil(total x utilization) (vllm/v1/worker/utils.py request_memory)."""
        return math.ceil(self.total * self.utilization)

    @property
    def kv_bytes(self) -> int:
        """KV cache one engine will have: its budget less its weights and runtime."""
        return self.engine_bytes - self.floor.get("weights", 0) - self.floor.get("runtime", 0)

    @property
    def needed(self) -> int:
        """Bytes the device must hold at least: everything outside the engines plus each engine's minimum."""
        return self.outside + self.engines * sum(self.floor.values())

    @property
    def fits(self) -> bool:
        return self.needed <= self.total and self.engine_bytes >= sum(self.floor.values())

    def parts(self) -> dict[str, int]:
        """Per-GPU bytes by part, as the planner reports them: what the engines request, and the rest."""
        out = dict(self.per_gpu)
        for k, v in self.per_engine.items():
            out[k] = out.get(k, 0) + self.engines * v
        out["process_reserve"] = out.get("process_reserve", 0) + self.engines * PROCESS_RESERVE
        if self.margin:
            out["margin"] = self.margin
        out["vllm"] = self.engines * self.engine_bytes
        return out

    def error(self) -> str:
        """One line: what does not fit, the bytes needed and available, and the options."""
        def gib(parts: dict) -> str:
            return ", ".join(f"{k} {v / GiB:.1f}" for k, v in parts.items())
        each = f"each of {self.engines} engines" if self.engines > 1 else "the engine"
        line = (f"{self.what} does not fit one GPU: it needs {self.needed:,} bytes ({self.needed / GiB:.1f} GiB) but "
                f"the device has {self.total:,} ({self.total / GiB:.1f} GiB); {each}: vLLM's minimum "
                f"{gib(self.floor)} GiB, beside it {gib({**self.per_engine, 'process_reserve': PROCESS_RESERVE})} GiB"
                + (f"; once on the device: {gib(self.per_gpu)} GiB" if self.per_gpu else "")
                + (f"; a margin of {self.margin / GiB:.1f} GiB" if self.margin else ""))
        hints = []
        if self.engines > 1:
            hints.append("lower engine.engines_per_gpu")
        if "es_master" in self.per_engine:
            hints.append(f"keep the ES master on the CPU with pinned transfers (not implemented: "
                         f"{self.per_engine['es_master'] / GiB:.1f} GiB of pinned host memory per worker and "
                         f"{2 * self.per_engine['es_master'] / GiB:.0f} GiB over PCIe per member; docs/gpus.md)")
        if "activations" in self.per_gpu:
            hints.append("raise method.gradient_accumulation_steps, set method.gradient_checkpointing=true, "
                         "or shard the trainer over GPUs (conf/accelerate/fsdp.yaml)")
        if "driver_model" in self.per_gpu:
            hints.append("the driver's own HF copy of the model shares the GPU (eval.kl_to_base needs it and the "
                         "reference there; set it false to give the engine the GPU alone)")
        return line + ("; options: " + "; ".join(hints) if hints else "")

    def warning(self) -> str | None:
        """One line when the KV cache holds less than the configured batch (vLLM then queues sequences)."""
        if self.fits and self.wanted_kv and self.kv_bytes < self.wanted_kv:
            return (f"{self.what}: vLLM's KV cache ({self.kv_bytes / GiB:.1f} GiB) holds less than the "
                    f"configured batch needs ({self.wanted_kv / GiB:.1f} GiB); sequences will queue (slower)")
        return None


def es_margin(total: int) -> int:
    """What ES's share leaves free on a device of `total` bytes: the larger of 1.5 GiB and 2% of it."""
    return max(3 * GiB // 2, math.ceil(0.02 * total))


def plan_engine(total: int, *, engines: int = 1, cap: float = 0.85, floor: dict | None = None,
                per_engine: dict | None = None, per_gpu: dict | None = None, wanted_kv: int = 0,
                what: str = "engine=vllm") -> EnginePlan:
    """The EnginePlan of one device of `total` bytes (see EnginePlan); engines holding ES's master (per_engine
    es_master: the ES workers' engines, as the planner and methods/es/workers.py pass it) keep es_margin free."""
    per_engine = dict(per_engine or {})
    margin = es_margin(int(total)) if "es_master" in per_engine else 0
    return EnginePlan(int(total), int(engines), float(cap), dict(floor or {}), per_engine,
                      dict(per_gpu or {}), int(wanted_kv), what, margin)


def plan_vllm(shape, dtype, total: int, *, engines: int = 1, cap: float = 0.85, max_model_len: int,
              max_num_seqs: int = 256, batched_tokens: int = ENGINE_BATCHED_TOKENS, graphs: bool = True,
              per_engine: dict | None = None, per_gpu: dict | None = None, wanted_sequences: int = 0,
              wanted_tokens: int = 0, what: str = "engine=vllm") -> EnginePlan:
    """plan_engine for a model `shape` served in `dtype` (the engine's floor and wanted KV from the shape)."""
    b = dtype_bytes(dtype)
    counts = model_counts(shape)
    return plan_engine(total, engines=engines, cap=cap,
                       floor=engine_floor(shape, counts, b, max_model_len, max_num_seqs, batched_tokens, graphs),
                       per_engine=per_engine, per_gpu=per_gpu,
                       wanted_kv=kv_cache_bytes(shape, wanted_sequences, wanted_tokens, b), what=what)


# ---- the plans the code runs (the engines and methods call these; so does the planner) ----
def default_max_model_len(shape) -> int:
    """harness/engines/vllm.py's context length when engine.max_model_len is null: min(the model's, 4096)."""
    return min(int(getattr(shape, "max_position_embeddings", 4096) or 4096), 4096)


def driver_copy(shape, dtype) -> dict[str, int]:
    """The driver's HF model on the device (when it sits there: harness/core/policy.py driver_place) and its process."""
    return {"driver_model": model_counts(shape).params * dtype_bytes(dtype), "process_reserve": PROCESS_RESERVE}


def plan_for_engine(shape, dtype, total: int, engine: dict, *, per_engine: dict | None = None,
                    per_gpu: dict | None = None, wanted_sequences: int = 0, wanted_tokens: int = 0,
                    what: str = "engine=vllm") -> EnginePlan:
    """The plan of a harness vLLM engine (harness/engines/vllm.py VLLMEngine) from its conf/engine settings
    (a plain dict: engines_per_gpu, gpu_memory_utilization as the cap, max_model_len, max_num_seqs,
    enforce_eager, extra)."""
    extra = dict(engine.get("extra") or {})
    eager = engine.get("enforce_eager")
    return plan_vllm(shape, dtype, total, engines=int(engine.get("engines_per_gpu", 1) or 1),
                     cap=float(engine.get("gpu_memory_utilization", 0.85)),
                     max_model_len=int(engine.get("max_model_len") or default_max_model_len(shape)),
                     max_num_seqs=int(extra.get("max_num_seqs", engine.get("max_num_seqs", 256))),
                     batched_tokens=int(extra.get("max_num_batched_tokens", ENGINE_BATCHED_TOKENS)),
                     graphs=not bool(extra.get("enforce_eager", eager)), per_engine=per_engine, per_gpu=per_gpu,
                     wanted_sequences=wanted_sequences, wanted_tokens=wanted_tokens, what=what)


def es_vllm_plan(shape, dtype, total: int, engine: dict, *, driver_on_device: bool = False,
                 wanted_sequences: int = 0, wanted_tokens: int = 0) -> EnginePlan:
    """ES's workers on vLLM: each engine's process keeps the fp32 master, its buffers and the update's
    temporaries (es_vllm_resident). The driver's HF copy waits on the CPU (harness/core/policy.py driver_place);
    `driver_on_device` prices it on the first GPU instead (all engines then get that GPU's share)."""
    return plan_for_engine(shape, dtype, total, engine, per_engine=es_vllm_resident(model_counts(shape)),
                           per_gpu=driver_copy(shape, dtype) if driver_on_device else {},
                           wanted_sequences=wanted_sequences, wanted_tokens=wanted_tokens,
                           what="method=es engine=vllm")


def grpo_vllm_plan(shape, dtype, total: int, engine: dict, *, sequences: int, steps_per_generation: int,
                   prompt_tokens: int, completion_tokens: int, beta: float, lora_params: int = 0,
                   checkpointing: bool = False, fsdp_shards: int = 0) -> EnginePlan:
    """GRPO with TRL 1.12's colocated vLLM (trl/generation/vllm_generation.py VLLMGeneration._init_vllm builds
    vllm.LLM in the trainer's process with max_num_seqs = per-device batch x steps_per_generation and
    max_num_batched_tokens=4096): the engine's share beside the trainer (trainer_resident) on one GPU.

    Args:
        sequences: the per-device micro-batch (GRPOConfig.per_device_train_batch_size).
        prompt_tokens: the longest prompt (tokens as TRL tokenises it); + completion_tokens = max_model_len
            unless engine.max_model_len is set.
        fsdp_shards: FSDP ranks (accelerate upcasts the trained weights to fp32 and shards them); 0: no FSDP.
    """
    counts, b = model_counts(shape), dtype_bytes(dtype)
    tokens = prompt_tokens + completion_tokens
    # full training keeps fp32 weights (methods/grpo.py upcasts them; FSDP would too) and an fp32 reference, LoRA a
    # frozen base in dtype
    trainer = trainer_resident(shape, counts, param_bytes=b if lora_params else 4,
                               reference_bytes=4 if beta > 0 and not lora_params else 0, sequences=sequences,
                               tokens=tokens, completion_tokens=completion_tokens, activation_dtype_bytes=2,
                               checkpointing=checkpointing, shards=max(1, fsdp_shards), lora_params=lora_params,
                               micro_batches=steps_per_generation)
    n = sequences * steps_per_generation
    return plan_vllm(shape, dtype, total, engines=1, cap=float(engine.get("gpu_memory_utilization", 0.85)),
                     max_model_len=int(engine.get("max_model_len") or tokens), max_num_seqs=n,
                     batched_tokens=TRL_BATCHED_TOKENS, graphs=True, per_gpu=trainer, wanted_sequences=n,
                     wanted_tokens=tokens, what="method=grpo engine=vllm (TRL colocate)")
