"""PPO's hyperparameters (PPOMethodConfig) with every check its constructor runs, importable without torch:
methods/ppo.py re-exports them beside TRL's trainer (methods/config_common.py says why)."""
from __future__ import annotations

from dataclasses import dataclass, field

from harness.core import memory_parts
from harness.core.flops import head_params
from harness.core.method_facts import RL, MethodFacts
from methods.lora_config import LoraSettings, check_peft


@dataclass
class PPOMethodConfig:
    """PPO hyperparameters: the keys of conf/method/ppo.yaml, whose values are these defaults (tests/test_defaults.py).

    The rest are TRL's PPOConfig defaults: cliprange 0.2, vf_coef 0.1, gamma 1, lam 0.95.
    """

    kl_coef: float = field(default=1e-3, metadata={"help": "KL penalty beta against the reference policy "
                                                   "(paper grid: 1e-3, 5e-3)"})
    learning_rate: float = field(default=1e-6, metadata={"help": "AdamW learning rate for policy and value model "
                                                         "(paper grid: 1e-6, 1e-5; the zoo's tiny models need ~1e-4)"})
    num_ppo_epochs: int = field(default=4, metadata={"help": "passes over each rollout batch per update (TRL default)"})
    num_mini_batches: int = field(default=1, metadata={"help": "minibatches per pass; must divide prompts_per_step"})
    prompts_per_step: int = field(default=64, metadata={"help": "prompts per update (one completion each)"})
    response_length: int | None = field(default=None, metadata={"help": "max new tokens per completion; "
                                                                 "None = the task's max_new_tokens"})
    temperature: float = field(default=1.0, metadata={"help": "rollout sampling temperature"})
    max_updates: int = field(default=1_000_000, metadata={"help": "upper bound; the ledger normally stops first"})
    rollout_batch_size: int = field(default=64, metadata={"help": "sequences per no-grad generate/forward call "
                                                          "in the rollout (memory only, not the math)"})
    train_micro_batch: int | None = field(default=None, metadata={
        "help": "sequences per training forward/backward, gradients accumulated over the minibatch (one "
                "optimizer step per minibatch as before); not memory only: the loss becomes the mean of the "
                "micro-batches' masked means, which equals the minibatch's masked mean only when every micro-batch "
                "has as many response tokens, so the update is close to, not exactly, the whole minibatch's; null: as many as fit GRPO's 8 GiB activation allowance (train_micro_batch below), "
                "the whole minibatch for the zoo's models. Needs num_mini_batches=1"})
    seed: int = field(default=0, metadata={"help": "seeds value-head init, prompt order and sampling"})
    checkpoint_every: int = field(default=50, metadata={"help": "updates between checkpoints in "
                                                       "run_dir/ppo_checkpoint (resumed from automatically); 0 = none"})
    peft: str | None = field(default=None, metadata={"help": "null: full-parameter policy; lora: LoRA adapters "
                                                     "on the policy (the value model stays full) via TRL's peft_config"})
    lora: dict | LoraSettings | None = field(default_factory=LoraSettings, metadata={
        "help": "LoRA shape when peft=lora: r, alpha, dropout, target_modules (methods/lora.py)"})

    def __post_init__(self):
        self.lora = check_peft(self.peft, self.lora)
        for name in ("num_ppo_epochs", "num_mini_batches", "prompts_per_step", "max_updates", "rollout_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"method.{name}={getattr(self, name)} must be >= 1")
        if self.checkpoint_every < 0:
            raise ValueError(f"method.checkpoint_every={self.checkpoint_every} must be >= 0 (0 = no checkpoints)")
        if self.prompts_per_step % self.num_mini_batches:
            raise ValueError(f"method.prompts_per_step={self.prompts_per_step} is not a multiple of "
                             f"method.num_mini_batches={self.num_mini_batches}; make it one")
        if self.train_micro_batch is not None:
            if self.train_micro_batch < 1 or self.prompts_per_step % self.train_micro_batch:
                raise ValueError(f"method.train_micro_batch={self.train_micro_batch} must divide "
                                 f"method.prompts_per_step={self.prompts_per_step}")
            if self.num_mini_batches != 1:
                # TRL accumulates over gradient_accumulation_steps micro-batches of the whole rollout batch, so
                # with several minibatches it would step once per batch instead of once per minibatch
                raise ValueError("method.train_micro_batch needs method.num_mini_batches=1 (TRL accumulates across "
                                 "minibatches); drop one of them")
        if self.response_length is not None and self.response_length < 1:
            raise ValueError(f"method.response_length={self.response_length} must be >= 1 (or null for the task's)")
        if self.kl_coef < 0 or not self.learning_rate > 0 or not self.temperature > 0:
            raise ValueError(f"need method.kl_coef >= 0, learning_rate > 0 and temperature > 0; got "
                             f"{self.kl_coef}, {self.learning_rate}, {self.temperature}")



# ---- what PPO says about itself (PPO.facts), priced without torch ----
def train_micro_batch(c, shape, world: int, tokens: int, completion_tokens: int, dtype_bytes: int) -> int:
    """Sequences per training forward/backward on each of `world` ranks: what methods/ppo.py passes TRL as
    per_device_train_batch_size and what the planner prices (ppo_memory), so both read one number.

    method.train_micro_batch when set; null: GRPO's rule (gpu_memory.grpo_micro_batch) on PPO's micro-batch, the
    largest divisor of the rank's minibatch whose activations and logits fit gpu_memory.MICRO_BATCH_ACTIVATIONS.
    PPO's are the policy's layers, every position's logits (TRL's PPO computes them all, then slices) and the
    value model's layers, which TRL's PolicyAndValueWrapper runs in the same forward and backward (the zoo's
    models keep a whole 64-prompt minibatch well inside it). `dtype_bytes`: the compute dtype (4 on the CPU, the
    model's under autocast on a GPU). With num_mini_batches > 1 the whole minibatch, as before: TRL accumulates
    across minibatches (PPOMethodConfig), so no accumulation can split it.
    """
    local = max(1, int(c.prompts_per_step) // int(c.num_mini_batches) // max(1, int(world)))
    if c.train_micro_batch:
        return int(c.train_micro_batch)
    if int(c.num_mini_batches) != 1:
        return local
    tm = memory_parts.gm.tm
    policy = tm.precision_of(dtype_bytes if check_peft(c.peft, c.lora) else 4, dtype_bytes)  # LoRA: frozen base
    value = tm.precision_of(4, dtype_bytes)  # the value model always trains whole, an fp32 master
    one = (tm.activation_bytes(shape, 1, tokens, policy) + tm.activation_bytes(shape, 1, tokens, value)
           + tm.logit_bytes(shape, 1, tokens, completion_tokens, policy, all_positions=True))
    cap = max(1, memory_parts.gm.MICRO_BATCH_ACTIVATIONS // max(1, one))
    return memory_parts.gm.grpo_micro_batch(shape, local, tokens, completion_tokens, dtype_bytes, cap=cap)


def ppo_memory(c, shape, tokens: int, *, gpu_gb: float, headroom: float, dtype: str = "bfloat16",
               prompt_tokens: int | None = None, **_) -> tuple[dict[str, float], int, str | None]:
    """PPO's bytes per part on one GPU (PPO.facts.memory), on the smallest FSDP count that fits: the policy at
    its micro-batch's peak (gpu_memory.trainer_resident: fp32 master, AdamW, a reference in the model's dtype,
    autocast's weight copies, activations, every position's logits, gradients), the value model (fp32, 16
    bytes/param: no vocab head, a 1-output head) with its own activations and weight copies, and the KV cache at
    rollout_batch_size sequences. A micro-batch is train_micro_batch's: method.train_micro_batch, or (null)
    sized to GRPO's activation allowance on each FSDP count, as methods/ppo.py runs it; `prompt_tokens` None
    counts every token as a response token (the load-time check knows only the total).
    `c`: PPOMethodConfig's settings as the planner reads them (harness/core/method_facts.py configure)."""
    gm, tm = memory_parts.gm, memory_parts.gm.tm
    lora = check_peft(c.peft, c.lora)
    b = gm.dtype_bytes(dtype)
    counts = gm.model_counts(shape)
    lora_params = memory_parts.lora_param_count(shape, lora.r, lora.target_modules) if lora else 0
    value_params = counts.params - head_params(shape) + shape.hidden_size
    response = tokens - min(int(prompt_tokens), tokens - 1) if prompt_tokens is not None else tokens
    precision = tm.precision_of(4, b)  # the value model trains an fp32 master under autocast too

    def parts_for(n: int, micro_batch: int | None = None) -> dict | None:
        local = int(c.prompts_per_step) // int(c.num_mini_batches)
        if local % n:
            return None  # methods/ppo.py refuses a minibatch that does not split over the ranks
        micro = min(int(micro_batch or train_micro_batch(c, shape, n, tokens, response, b)), local // n)
        parts = gm.trainer_resident(shape, counts, param_bytes=b if lora else 4, reference_bytes=b, sequences=micro,
                                    tokens=tokens, completion_tokens=response, activation_dtype_bytes=b,
                                    shards=n, lora_params=lora_params, all_positions=True,
                                    micro_batches=local // n // micro)
        cache = 2 * (tm.matmul_params(shape) - shape.vocab_size * shape.hidden_size) if precision.autocast else 0
        parts["value_model"] = (16 * value_params + cache) // n + tm.activation_bytes(shape, micro, tokens, precision)
        parts["kv_cache"] = gm.kv_cache_bytes(shape, int(c.rollout_batch_size), tokens, b)
        return parts
    parts, gpus, note = memory_parts.trainer_on_gpus(parts_for, gpu_gb, headroom, "method=ppo", 1 if lora else 64)
    if gpus != 1 and not c.train_micro_batch and int(c.num_mini_batches) == 1:
        # the auto size fills an activation allowance, not the GPU, so another micro-batch may need fewer GPUs:
        # name the largest that needs the fewest (gradients accumulated: about the same update, see the field's help)
        best = None
        for k in (k for k in range(int(c.prompts_per_step) - 1, 0, -1) if int(c.prompts_per_step) % k == 0):
            n = memory_parts.trainer_on_gpus(lambda n: parts_for(n, k), gpu_gb, headroom, "", 1 if lora else 64)[1]
            if n and (best is None or n < best[1]):
                best = (k, n)
        if best and (not gpus or best[1] < gpus):
            note = ((note + "; ") if note else "") + (f"method.train_micro_batch={best[0]} (gradients accumulated, about "
                                                      f"the same update) fits {best[1]} GPU" + ("s" if best[1] > 1 else ""))
    return parts, gpus, note


# PPO.facts (methods/ppo.py), read here by the planner and the budget check (harness/core/method_facts.py)
PPO_FACTS = MethodFacts(
    family=RL,
    update_unit="one PPO update: a rollout batch and its num_ppo_epochs x num_mini_batches optimizer steps",
    step_cap="max_updates",
    distributed=True,  # runs under accelerate launch / torchrun (data parallel through TRL)
    summary_keys=(("parameters", "peft", "world_size", "trained_dtype", "last_reward_mean", "config"), ()),
    samples_per_step=lambda c: c.prompts_per_step,
    scoring_forwards=lambda c: 3 + 6 * c.num_ppo_epochs,  # reference, value, 3 each for policy and value per epoch
    memory=ppo_memory)


# methods/ppo.py's method classes -> their config and facts (methods/config_common.py)
METHOD_CONFIGS = {"PPO": PPOMethodConfig}
METHOD_FACTS = {"PPO": PPO_FACTS}
