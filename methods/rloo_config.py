"""RLOO's hyperparameters (RLOOMethodConfig) with every check its constructor runs, importable without torch:
methods/rloo.py re-exports them beside TRL's trainer (methods/config_common.py says why)."""
from __future__ import annotations

from dataclasses import dataclass, field

from methods.grpo_config import ONLINE_FACTS, check_batch_shape
from methods.lora_config import LoraSettings, check_peft


@dataclass
class RLOOMethodConfig:
    """RLOO hyperparameters: the keys of conf/method/rloo.yaml, whose values are these defaults (test_defaults.py).

    Each sets the RLOOConfig option of its name (TRL 1.12); the rest are RLOOConfig's defaults (methods/rloo.py).
    """

    learning_rate: float = field(default=1e-6, metadata={
        "help": "AdamW learning rate (constant). Grid as GRPO's: 1e-6, 1e-5 (paper-size models); the zoo needs more."})
    beta: float = field(default=1e-3, metadata={
        "help": "KL coefficient: each sequence's reward less beta x its summed log(pi_old / pi_ref) (k1, in the "
                "reward). Grid as GRPO's: 1e-3, 5e-3 (TRL's default 0.05). 0 drops the reference model."})
    num_generations: int = field(default=8, metadata={
        "help": "Completions sampled per prompt (RLOO's k; each one's baseline is the mean of the other k - 1)."})
    prompts_per_step: int = field(default=8, metadata={
        "help": "Distinct prompts per optimizer step; a step scores prompts_per_step x num_generations completions."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature of the training completions."})
    max_completion_length: int | None = field(default=None, metadata={
        "help": "Max new tokens per training completion; None = the task's max_new_tokens."})
    num_iterations: int = field(default=1, metadata={
        "help": "Updates per generated batch (mu); the steps in between reuse the batch and pay only the update."})
    epsilon: float = field(default=0.2, metadata={"help": "Clipping range of the sequence's probability ratio."})
    epsilon_high: float | None = field(default=None, metadata={
        "help": "Upper clipping range of the ratio; null: epsilon (symmetric)."})
    normalize_advantages: bool = field(default=False, metadata={
        "help": "Normalise the leave-one-out advantages over the batch to mean 0, std 1 (not in the paper's RLOO)."})
    mask_truncated_completions: bool = field(default=False, metadata={
        "help": "Leave completions cut at max_completion_length out of the loss."})
    gradient_accumulation_steps: int = field(default=1, metadata={
        "help": "Split each step's batch into this many micro-batches (memory only: same update, same FLOPs)."})
    micro_batch_size: int | None = field(default=None, metadata={
        "help": "Most sequences per forward/backward on one device (memory only: same update, same FLOPs); null: as "
                "many as fit 8 GiB of estimated activations (harness/core/gpu_memory.py)."})
    gradient_checkpointing: bool = field(default=False, metadata={
        "help": "Recompute activations to save memory (large models on GPU); the recomputation is not charged."})
    max_steps: int = field(default=1_000_000, metadata={
        "help": "Safety cap on optimizer steps; the ledger normally stops training first."})
    seed: int = field(default=0, metadata={"help": "Seed of TRL's prompt order and sampling."})
    checkpoint_every: int = field(default=50, metadata={
        "help": "Steps between TRL checkpoints in run_dir/trl (resumed from automatically); 0 = none. "
                "A multiple of num_iterations."})
    peft: str | None = field(default=None, metadata={
        "help": "null: full-parameter training; lora: train LoRA adapters (method.lora) through TRL's peft_config."})
    lora: dict | LoraSettings | None = field(default_factory=LoraSettings, metadata={
        "help": "LoRA shape when peft=lora: r, alpha, dropout, target_modules (methods/lora.py LoraSettings)."})

    def __post_init__(self):
        self.lora = check_peft(self.peft, self.lora)
        if self.num_generations < 2:
            raise ValueError(f"method.num_generations={self.num_generations}: RLOO's leave-one-out baseline needs at "
                             "least 2 completions per prompt; set it to 2 or more (Ahmadian et al. 2024: 2 and 4)")
        check_batch_shape(self)
        if not self.learning_rate > 0:
            raise ValueError(f"method.learning_rate={self.learning_rate} must be > 0 (grid: 1e-6, 1e-5)")
        if self.beta < 0:
            raise ValueError(f"method.beta={self.beta} must be >= 0 (0 disables the KL penalty; grid: 1e-3, 5e-3)")
        if not self.temperature > 0:
            raise ValueError(f"method.temperature={self.temperature} must be > 0 (RLOO needs sampled completions)")
        if self.checkpoint_every < 0 or self.checkpoint_every % self.num_iterations:
            raise ValueError(f"method.checkpoint_every={self.checkpoint_every} must be 0 (no checkpoints) or a "
                             f"positive multiple of method.num_iterations={self.num_iterations}")
        if not self.epsilon > 0 or (self.epsilon_high is not None and not self.epsilon_high > 0):
            raise ValueError(f"method.epsilon={self.epsilon} and method.epsilon_high={self.epsilon_high} must be > 0 "
                             "(epsilon_high null: the same as epsilon)")
        if self.max_completion_length is not None and self.max_completion_length < 1:
            raise ValueError(f"method.max_completion_length={self.max_completion_length} must be >= 1, or null "
                             "to use the task's max_new_tokens")


# RLOO.facts (methods/rloo.py): the adapter's (methods/trl_online.py TRLOnlineMethod): family rl, one optimizer
# step per update, prompts_per_step x num_generations completions a step, update 3 x mu + reference + old
# log-probs scoring forwards, the memory of a trainer generating with the policy (engine=hf)
RLOO_FACTS = ONLINE_FACTS

# methods/rloo.py's method classes -> their config and facts (methods/config_common.py)
METHOD_CONFIGS = {"RLOO": RLOOMethodConfig}
METHOD_FACTS = {"RLOO": RLOO_FACTS}
