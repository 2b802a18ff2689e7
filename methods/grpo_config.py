"""GRPO's hyperparameters (GRPOMethodConfig) with every check its constructor runs, importable without torch:
methods/grpo.py re-exports them beside TRL's trainer (methods/config_common.py says why)."""
from __future__ import annotations

from dataclasses import dataclass, field

from harness.core import memory_parts
from harness.core.gpu_memory import grpo_micro_batch
from harness.core.method_facts import RL, MethodFacts
from methods.config_common import plain_engine
from methods.lora_config import LoraSettings, check_peft

LOSS_TYPES = ("grpo", "dr_grpo", "dapo")
IS_LEVELS = ("token", "sequence")
SCALE_REWARDS = ("group", "batch", "none")


@dataclass
class GRPOMethodConfig:
    """GRPO hyperparameters: the keys of conf/method/grpo.yaml, whose values are these defaults (test_defaults.py)."""

    learning_rate: float = field(default=1e-6, metadata={
        "help": "AdamW learning rate (constant). Paper grid: 1e-6, 1e-5; the zoo models need ~1e-4."})
    beta: float = field(default=1e-3, metadata={
        "help": "KL coefficient to the initial model. Paper grid: 1e-3, 5e-3. 0 drops the reference model."})
    num_generations: int = field(default=8, metadata={
        "help": "Completions sampled per prompt (the GRPO group). The paper uses 8 and 30."})
    prompts_per_step: int = field(default=8, metadata={
        "help": "Distinct prompts per optimizer step; a step scores prompts_per_step x num_generations completions."})
    loss_type: str = field(default="grpo", metadata={
        "help": "Loss aggregation: grpo (per-sequence mean), dr_grpo (constant normaliser) or dapo (per-token)."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature of the training completions."})
    max_completion_length: int | None = field(default=None, metadata={
        "help": "Max new tokens per training completion; None = the task's max_new_tokens."})
    num_iterations: int = field(default=1, metadata={
        "help": "Updates per generated batch (mu). Above 1, each batch also pays an old-log-prob forward."})
    epsilon: float = field(default=0.2, metadata={"help": "Clipping range of the probability ratio."})
    # GRPOConfig's own options for the GRPO family (conf/method/dr_grpo.yaml, dapo.yaml, gspo.yaml); TRL's defaults
    epsilon_high: float | None = field(default=None, metadata={
        "help": "Upper clipping range of the ratio (DAPO's clip-higher); null: epsilon (symmetric)."})
    importance_sampling_level: str = field(default="token", metadata={
        "help": "token: per-token ratios (GRPO); sequence: one length-normalised ratio per sequence (GSPO)."})
    scale_rewards: str = field(default="group", metadata={
        "help": "Advantage scaling: group (divide by the group's std, GRPO), batch, or none (Dr. GRPO)."})
    mask_truncated_completions: bool = field(default=False, metadata={
        "help": "Leave completions cut at max_completion_length out of the loss (DAPO's overlong filtering)."})
    gradient_accumulation_steps: int = field(default=1, metadata={
        "help": "Split each step's batch into this many micro-batches (memory only: same update, same FLOPs)."})
    micro_batch_size: int | None = field(default=None, metadata={
        "help": "Most sequences per forward/backward on one device (memory only: more micro-batches, same update, "
                "same FLOPs); null: as many as fit 8 GiB of estimated activations (harness/core/gpu_memory.py)."})
    gradient_checkpointing: bool = field(default=False, metadata={
        "help": "Recompute activations to save memory (large models on GPU); the recomputation is not charged."})
    max_steps: int = field(default=1_000_000, metadata={
        "help": "Safety cap on optimizer steps; the ledger normally stops training first."})
    seed: int = field(default=0, metadata={"help": "Seed of TRL's prompt order and sampling."})
    checkpoint_every: int = field(default=50, metadata={
        "help": "Steps between TRL checkpoints in run_dir/trl (resumed from automatically); 0 = none. "
                "A multiple of num_iterations."})
    engine: dict | str | None = field(default=None, metadata={
        "help": "conf/engine: hf (TRL generates with the policy) or vllm (TRL use_vllm, colocate mode)."})
    vllm_importance_sampling_correction: bool = field(default=False, metadata={
        "help": "engine=vllm only: TRL's correction for vLLM's sampling log-probs differing from the policy's "
                "(sequence_mask: loss weighted by the ratio, dropped above 3; costs an old-log-prob forward). Not "
                "part of GRPO, so off (TRL's default is on); the masked fraction is logged when on."})
    peft: str | None = field(default=None, metadata={
        "help": "null: full-parameter training; lora: train LoRA adapters (method.lora) through TRL's peft_config."})
    lora: dict | LoraSettings | None = field(default_factory=LoraSettings, metadata={
        "help": "LoRA shape when peft=lora: r, alpha, dropout, target_modules (methods/lora.py LoraSettings)."})

    def __post_init__(self):
        self.engine = plain_engine(self.engine)  # a Hydra node in, a plain dict (JSON for checkpoints) out
        self.lora = check_peft(self.peft, self.lora)
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"method.loss_type={self.loss_type!r} is not supported; "
                             f"use one of {', '.join(LOSS_TYPES)}")
        if self.num_generations < 2:
            raise ValueError(f"method.num_generations={self.num_generations}: GRPO needs a group of at least 2 "
                             "completions per prompt to compute advantages; set it to 2 or more (paper: 8 or 30)")
        check_batch_shape(self)
        if not self.learning_rate > 0:
            raise ValueError(f"method.learning_rate={self.learning_rate} must be > 0 (paper grid: 1e-6, 1e-5)")
        if self.beta < 0:
            raise ValueError(f"method.beta={self.beta} must be >= 0 (0 disables the KL term; paper grid: 1e-3, 5e-3)")
        if not self.temperature > 0:
            raise ValueError(f"method.temperature={self.temperature} must be > 0 (GRPO needs sampled completions)")
        if self.checkpoint_every < 0 or self.checkpoint_every % self.num_iterations:
            raise ValueError(f"method.checkpoint_every={self.checkpoint_every} must be 0 (no checkpoints) or a "
                             f"positive multiple of method.num_iterations={self.num_iterations}")
        if self.importance_sampling_level not in IS_LEVELS:
            raise ValueError(f"method.importance_sampling_level={self.importance_sampling_level!r} is not supported; "
                             f"use one of {', '.join(IS_LEVELS)}")
        if self.scale_rewards not in SCALE_REWARDS:
            raise ValueError(f"method.scale_rewards={self.scale_rewards!r} is not supported; "
                             f"use one of {', '.join(SCALE_REWARDS)}")
        if not self.epsilon > 0 or (self.epsilon_high is not None and not self.epsilon_high > 0):
            raise ValueError(f"method.epsilon={self.epsilon} and method.epsilon_high={self.epsilon_high} must be > 0 "
                             "(epsilon_high null: the same as epsilon; DAPO: 0.2 and 0.28)")
        if self.vllm_importance_sampling_correction and (self.engine or {}).get("name", "hf") != "vllm":
            raise ValueError("method.vllm_importance_sampling_correction=true corrects vLLM's sampling log-probs, "
                             "but engine is not vllm (the policy samples itself: nothing to correct); set it false "
                             "or engine=vllm")
        if self.max_completion_length is not None and self.max_completion_length < 1:
            raise ValueError(f"method.max_completion_length={self.max_completion_length} must be >= 1, or null "
                             "to use the task's max_new_tokens")



def check_batch_shape(c) -> None:
    """The step's shape every TRL online method's config checks (GRPO's family, RLOO): counts >= 1, and
    gradient_accumulation_steps dividing the step's prompts_per_step x num_generations completions."""
    for name in ("prompts_per_step", "num_iterations", "gradient_accumulation_steps", "max_steps"):
        if getattr(c, name) < 1:
            raise ValueError(f"method.{name}={getattr(c, name)} must be >= 1")
    if c.micro_batch_size is not None and c.micro_batch_size < 1:
        raise ValueError(f"method.micro_batch_size={c.micro_batch_size} must be >= 1, or null to size it "
                         "from the estimated activations")
    if (c.prompts_per_step * c.num_generations) % c.gradient_accumulation_steps:
        raise ValueError(f"method.gradient_accumulation_steps={c.gradient_accumulation_steps} must divide "
                         f"prompts_per_step x num_generations = {c.prompts_per_step * c.num_generations}")


# ---- what GRPO says about itself (GRPO.facts), priced without torch ----
def micro_batches(c: GRPOMethodConfig, shape, world: int, prompt_tokens: int, completion_tokens: int,
                  activation_dtype_bytes: int) -> tuple[int, int]:
    """(sequences per forward/backward on one rank, gradient accumulation steps) for one optimizer step.

    Each rank trains on its prompts_per_step x num_generations / world sequences in gradient_accumulation_steps
    x k equal micro-batches, k the smallest that brings a micro-batch to at most method.micro_batch_size
    sequences, or (null) to at most harness/core/gpu_memory.py MICRO_BATCH_ACTIVATIONS of estimated activations
    at the longest prompt + the completion length (TRL pads every micro-batch to its longest). The update is the
    same (gradients accumulate over the micro-batches of one optimizer step), and so are the FLOPs charged;
    TRL's steps_per_generation follows gradient_accumulation_steps, so the generation batch is unchanged.
    """
    gas = int(c.gradient_accumulation_steps)
    per_rank = max(gas, int(c.prompts_per_step) * int(c.num_generations) // world)
    micro = grpo_micro_batch(shape, per_rank // gas, prompt_tokens + completion_tokens, completion_tokens,
                             activation_dtype_bytes, bool(c.gradient_checkpointing), c.micro_batch_size)
    return micro, per_rank // micro


def grpo_memory(c, shape, tokens: int, *, dtype: str, engine: dict, gpu_gb: float,
                headroom: float, prompt_tokens: int, **_) -> tuple[dict[str, float], int, str | None]:
    """GRPO's bytes per part on one GPU (GRPO.facts.memory; harness/runner/pricing.py's module docstring).

    engine=hf: the trainer at its micro-batch's peak (gpu_memory.trainer_resident: fp32 master, AdamW, an fp32
    reference when beta > 0, autocast's weight copies, activations, logits, gradients) + the KV cache of its share
    of prompts_per_step x num_generations, on the smallest FSDP count that fits. engine=vllm: the trainer beside
    its colocated engine (gpu_memory.grpo_vllm_plan, what GRPO.memory_plan requests), the smallest GPU count
    (FSDP beyond one) whose plan fits; LoRA is never sharded (check_fsdp), so one GPU or none.
    `c`: GRPOMethodConfig's settings as the planner reads them (harness/core/method_facts.py configure).
    """
    lora, beta = check_peft(c.peft, c.lora), float(c.beta)
    batch = int(c.prompts_per_step) * int(c.num_generations)
    b = memory_parts.gm.dtype_bytes(dtype)
    prompt_tokens = min(int(prompt_tokens), tokens - 1)  # a run's tokens include its prompt's
    if engine.get("name") != "vllm":
        gm = memory_parts.gm
        counts = gm.model_counts(shape)
        lora_params = memory_parts.lora_param_count(shape, lora.r, lora.target_modules) if lora else 0

        def parts_for(n: int) -> dict | None:
            if batch % (int(c.gradient_accumulation_steps) * n):
                return None  # the step's batch does not split over n ranks: _trl_args refuses that launch
            micro, steps = micro_batches(c, shape, n, prompt_tokens, tokens - prompt_tokens, b)
            parts = gm.trainer_resident(shape, counts, param_bytes=b if lora else 4,
                                        reference_bytes=4 if beta > 0 and not lora else 0, sequences=micro,
                                        tokens=tokens, completion_tokens=tokens - prompt_tokens,
                                        activation_dtype_bytes=b, checkpointing=bool(c.gradient_checkpointing),
                                        shards=n, lora_params=lora_params, micro_batches=steps)
            return {**parts, "kv_cache": gm.kv_cache_bytes(shape, batch // n, tokens, b)}
        return memory_parts.trainer_on_gpus(parts_for, gpu_gb, headroom, "method=grpo engine=hf",
                                            1 if lora else 64)
    from harness.core.gpu_memory import grpo_vllm_plan
    lora_params = memory_parts.lora_param_count(shape, lora.r, lora.target_modules) if lora else 0
    first = None
    for n in range(1, 65):
        if batch % (int(c.gradient_accumulation_steps) * n):
            continue  # the step's batch does not split over n ranks: _trl_args refuses that launch
        micro, steps = micro_batches(c, shape, n, prompt_tokens, tokens - prompt_tokens, b)  # _trl_args on n ranks
        plan = grpo_vllm_plan(shape, dtype, int(gpu_gb * memory_parts.GB), engine,
                              sequences=micro, steps_per_generation=steps,
                              prompt_tokens=prompt_tokens, completion_tokens=tokens - prompt_tokens, beta=beta,
                              lora_params=lora_params, checkpointing=bool(c.gradient_checkpointing),
                              fsdp_shards=n if n > 1 else 0)
        first = first or plan
        if plan.fits:
            return {k: float(v) for k, v in plan.parts().items()}, n, plan.warning()
        if lora_params:
            break
    return {k: float(v) for k, v in first.parts().items()}, 0, first.error()


# GRPO.facts (methods/grpo.py), read here by the planner and the budget check (harness/core/method_facts.py)
GRPO_FACTS = MethodFacts(
    family=RL,
    update_unit="one optimizer step",
    step_cap="max_steps",
    distributed=True,  # runs under accelerate launch / torchrun (data parallel through TRL)
    # a ledger already spent when it starts (a resumed run, a sequential stage) returns the common keys alone
    summary_keys=((), ("parameters", "peft", "world_size", "trained_dtype", "reward_first", "reward_last")),
    samples_per_step=lambda c: c.prompts_per_step * c.num_generations,
    scoring_forwards=lambda c: 3 * c.num_iterations + 2,  # update 3 x mu + reference + old log-probs
    memory=grpo_memory)


# ---- what every method on the TRL online-trainer adapter says about itself (methods/trl_online.py) ----
def online_memory(c, shape, tokens: int, **kw) -> tuple[dict[str, float], int, str | None]:
    """grpo_memory on engine=hf: a TRL online trainer generating with the policy itself (its config has GRPO's
    memory keys: prompts_per_step, num_generations, beta, peft, lora); the run's engine serves evaluation only."""
    return grpo_memory(c, shape, tokens, **{**kw, "engine": {"name": "hf"}})


# TRLOnlineMethod.facts: the facts a method on the adapter gets unless it declares its own (RLOO's are these);
# GRPO's differ only in their memory model (engine=vllm plans TRL's colocated engine)
ONLINE_FACTS = MethodFacts(
    family=RL,
    update_unit="one optimizer step",
    step_cap="max_steps",
    distributed=True,
    summary_keys=GRPO_FACTS.summary_keys,
    samples_per_step=lambda c: c.prompts_per_step * c.num_generations,
    scoring_forwards=lambda c: 3 * c.num_iterations + 2,  # update 3 x mu + reference + old log-probs
    memory=online_memory)


# ---- the GRPO family: GRPO with GRPOConfig's own options set as each paper defines them ----
# Each is GRPO's class under its own name (methods/grpo.py), so records and tables tell them apart; the
# conf/method/<name>.yaml writes these defaults out (tests/test_defaults.py), and says where each comes from.
def _default(name: str, value):
    """GRPOMethodConfig's field `name` with another default and the same help text (--help, error messages)."""
    return field(default=value, metadata=GRPOMethodConfig.__dataclass_fields__[name].metadata)


@dataclass
class DrGRPOMethodConfig(GRPOMethodConfig):
    """Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training"): conf/method/dr_grpo.yaml."""

    beta: float = _default("beta", 0.0)
    loss_type: str = _default("loss_type", "dr_grpo")
    scale_rewards: str = _default("scale_rewards", "none")


@dataclass
class DAPOMethodConfig(GRPOMethodConfig):
    """DAPO (Yu et al. 2025): conf/method/dapo.yaml."""

    beta: float = _default("beta", 0.0)
    loss_type: str = _default("loss_type", "dapo")
    epsilon_high: float | None = _default("epsilon_high", 0.28)
    mask_truncated_completions: bool = _default("mask_truncated_completions", True)


@dataclass
class GSPOMethodConfig(GRPOMethodConfig):
    """GSPO (Zheng et al. 2025, Group Sequence Policy Optimization): conf/method/gspo.yaml."""

    beta: float = _default("beta", 0.0)
    importance_sampling_level: str = _default("importance_sampling_level", "sequence")
    epsilon: float = _default("epsilon", 3e-4)
    epsilon_high: float | None = _default("epsilon_high", 4e-4)


# methods/grpo.py's method classes -> their config and facts (methods/config_common.py)
METHOD_CONFIGS = {"GRPO": GRPOMethodConfig, "DrGRPO": DrGRPOMethodConfig, "DAPO": DAPOMethodConfig,
                  "GSPO": GSPOMethodConfig}
METHOD_FACTS = {name: GRPO_FACTS for name in METHOD_CONFIGS}
