"""GRPO: TRL's `GRPOTrainer` on the task's reward, stopped by the compute ledger.

    python -m harness method=grpo method.beta=1e-3 method.learning_rate=1e-5
    python -m pytest tests/test_grpo.py -q

One optimizer step = `prompts_per_step` training prompts x `num_generations` sampled completions,
scored by `task.reward`, group-normalised advantages, one clipped policy-gradient update per
`num_iterations`. Prompts go through `policy.format` first, so chat templates apply exactly as at
evaluation time, and TRL tokenises them to evaluation's ids (methods/trl_prompts.py).

Compute accounting: GRPO is built on the TRL online-trainer adapter (methods/trl_online.py: its
TokenRecorder wraps the task's reward and records every completion's prompt and completion token
counts, its StepCost prices each optimizer step from them and checks their running total against
TRL's own `state.num_input_tokens_seen`), with GRPOTrainer's forward-pass schedule (GRPO_SCHEDULE,
checked against FlopCounterMode in tests/test_trl_online.py); the ledger is charged
(harness/core/flops.py conventions, real lengths, padding not charged):

    generation    prefill + every decoded token of the step's new completions
    reference     1 forward over prompt+completion of the new completions     (beta > 0)
    old_logprobs  1 forward over prompt+completion of the new completions     (TRL recomputes the
                  sampling policy's log-probs iff gradient_accumulation_steps % (steps_per_generation
                  x num_iterations) != 0, here iff num_iterations > 1, or for vLLM's correction)
    update        3 x forward over prompt+completion of every sequence in the batch trained on

As everywhere in the harness, padding and decoding past a row's EOS (while other rows continue) are
not charged, nor is the LM head at prompt positions (TRL's forwards skip it with logits_to_keep;
the scoring forwards and the update charge the head at completion positions only). The executed
FLOPs (`executed_flops`, the same formulas on the batch padded to its longest prompt and
completion) record what ran, padding included.

Across processes (accelerate launch / torchrun, harness/core/distributed.py) the step's global batch is
split over the ranks; each rank records its own completions and `StepCost` gathers every rank's
counts before pricing them, so all ranks charge the same step and stop together, and the check
against TRL's (already gathered) num_input_tokens_seen holds unchanged. With method.peft=lora
(methods/lora.py) the update is priced by `lora_train_flops` and the adapted policy's forwards pay
the unmerged adapters; the reference (beta > 0) is the same model with adapters disabled.

With num_iterations = mu a batch is generated every mu steps; the steps in between pay only the
update. samples = completions scored in the step. Training stops at the step boundary where the budget is
spent (`ledger.exhausted`); `max_steps` is only a safety cap. The step that spends it is charged pro rata
(harness/core/budget.py): priced before its optimizer step, it runs at the learning rate x f, f = the share of
its cost the budget had left, and f x its FLOPs are charged (methods/trl_ledger.py).

Checkpoint/resume: every `checkpoint_every` steps TRL saves run_dir/trl/checkpoint-<step> (weights,
optimizer, scheduler, RNG states, trainer state) and the ledger's state is written beside it; a run
restarted with the same run_dir resumes from the newest complete checkpoint through TRL's
`resume_from_checkpoint` (which also skips the prompts already used), with the same ledger totals.
`checkpoint_every` must be a multiple of `num_iterations`, so a checkpoint never falls inside a
generated batch that is still being reused (TRL regenerates after a resume).

Departures from the paper's GRPO baseline (Qiu et al. 2025):
- Compute is matched in FLOPs from real token counts, not in number of sample evaluations
  (budget.kind=samples restores the paper's protocol).
- Implementation is TRL 1.12.0's GRPOTrainer, with its defaults for what is not set here (PPO-style
  ratio clipping epsilon=0.2, advantages scaled by the group std, AdamW, max_grad_norm=1.0,
  k3 KL estimator with TRL's importance-sampling bias correction); the learning rate is constant
  because the run length is set by the ledger, not by a step count.
- loss_type="grpo" (per-sequence length normalisation, the original GRPO objective), not TRL's
  default "dapo". The GRPO family ships as config over GRPOConfig's own options, each a method of its own name
  on this trainer and ledger: method=dr_grpo, dapo, gspo (conf/method/*.yaml name the option each sets;
  methods/grpo_config.py); an option the installed TRL lacks is refused in one line naming it and the version.
- Per-step batch shape (prompts_per_step x num_generations) is a harness choice; the paper's group
  sizes 8 and 30 are both reachable through num_generations.
- max_completion_length defaults to the task's max_new_tokens, the length used at evaluation.
- engine=vllm: TRL's vLLM importance-sampling correction (`vllm_importance_sampling_correction`, TRL's default
  True, mode sequence_mask: each sequence's loss weighted by its policy-vs-vLLM probability ratio, and dropped
  where the ratio exceeds 3) is not part of GRPO and is set off explicitly; method.vllm_importance_sampling_correction
  =true turns it on, then every step pays an old-log-prob forward and the step log carries `is_masked_fraction`
  (share of sequences dropped) and `is_ratio_mean`. Off, the small gap between vLLM's sampling log-probs and the
  trainer's (kernels, dtype) goes uncorrected, as in GRPO with any separate sampler.
- engine=vllm (TRL's colocate mode): vLLM's context is the longest training prompt + max_completion_length,
  and on a GPU its memory share is computed beside the trainer (`memory_plan`, harness/core/gpu_memory.py
  grpo_vllm_plan: weights, gradients, AdamW, reference, estimated activations), not a fixed fraction; a
  configuration that cannot fit fails before TRL starts vLLM, in one line with the bytes.
- Precision: the policy trains in fp32 (the weights are its master: AdamW's steps at lr 1e-6 are far below
  half a bf16 ulp of most weights, and with bf16 weights most would round away), computing under autocast in
  the model's dtype on a GPU, as TRL itself loads models (fp32 by default); the reference is loaded in fp32 too
  (TRL's default), so the KL is exactly 0 before the first update; vLLM stays in the model's dtype, and the
  trained model is cast back to it for evaluation (`trained_dtype` in the summary).
  LoRA trains fp32 adapters on the frozen base in the model's dtype.
- Micro-batches: each device trains on its share of the step in micro-batches of at most
  `micro_batch_size` sequences (null: what fits 8 GiB of estimated activations), gradients accumulated,
  so memory is bounded whatever the group size; same update, same FLOPs (`micro_batches`).
- Gradient checkpointing, when enabled, recomputes forwards that are not charged (the cost model
  counts a training step as 3 x forward).
- Prompts: TRL tokenises text prompts with special tokens, so a tokenizer that adds BOS (Llama, Gemma) is handed
  the formatted prompt less its leading BOS text, which TRL's call adds back: every training prompt's ids equal
  evaluation's, checked at load (methods/trl_prompts.py; one BOS, as ES, PPO and evaluation use).
"""
from __future__ import annotations

import logging
from pathlib import Path

import torch
from transformers import PretrainedConfig
from trl import GRPOConfig, GRPOTrainer

from harness.core.budget import Ledger
from harness.engines import trl_vllm_kwargs
from harness.core.distributed import trained_model, using_fsdp, world_size
from harness.core.gpu_memory import dtype_bytes
from harness.core.policy import Policy
from methods.grpo_config import (GRPO_FACTS, LOSS_TYPES, DAPOMethodConfig, DrGRPOMethodConfig,  # noqa: F401
                                 GRPOMethodConfig, GSPOMethodConfig, grpo_memory, micro_batches)
from methods.trl_online import (ForwardSchedule, TRLOnlineMethod, declare_schedule, online_metrics,  # noqa: F401
                                step_flops)

log = logging.getLogger(__name__)


# GRPOTrainer's forward-pass schedule (methods/trl_online.py; checked against FlopCounterMode in
# tests/test_trl_online.py): TRL recomputes the sampling policy's log-probs iff generation and optimizer steps are
# misaligned (num_iterations > 1 here), and with vLLM for its importance-sampling correction (vLLM's vs the policy's)
GRPO_SCHEDULE = ForwardSchedule(
    generation=True, update=True,
    reference=lambda args: args.beta != 0.0,
    old_logprobs=lambda args: (args.gradient_accumulation_steps % (args.steps_per_generation * args.num_iterations) != 0
                               or bool(args.use_vllm and args.vllm_importance_sampling_correction)))
declare_schedule(GRPOTrainer, GRPO_SCHEDULE)


IS_MASKED = "sampling/is_masked_fraction"  # logged by _ISLoggingGRPOTrainer when vLLM's IS correction is on


def trl_metrics(logs: dict) -> dict:
    """TRL's GRPO log of one step, under the names the step log uses."""
    out = online_metrics(logs)
    if IS_MASKED in logs:  # only runs with the correction on carry it (the others' logs are unchanged)
        out["is_masked_fraction"] = logs[IS_MASKED]
        out["is_ratio_mean"] = logs.get("sampling/importance_sampling_ratio/mean")
    return out


def masked_share(ratio: torch.Tensor, completion_mask: torch.Tensor) -> tuple[int, int]:
    """(masked, total) of TRL's vLLM importance-sampling ratios: *_mask modes write 0 where a ratio fell outside
    [clip_min, clip_max] (trl/trainer/grpo_trainer.py _generate_and_score_completions), and exp() of a finite
    log-prob difference is never 0. Sequence modes: (B, 1), one ratio per sequence; token modes: (B, T), counted
    over completion tokens."""
    if ratio.shape[-1] == 1:
        return int((ratio == 0).sum()), ratio.numel()
    valid = completion_mask.bool()
    return int(((ratio == 0) & valid).sum()), int(valid.sum())


class _ISLoggingGRPOTrainer(GRPOTrainer):
    """GRPOTrainer that also logs the share of sequences (or tokens) vLLM's importance-sampling correction masked
    out of the loss: TRL logs the ratios' min/mean/max, not how much of the batch trained on nothing. Used only
    when method.vllm_importance_sampling_correction is on, so every other run is TRL's own class."""

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        if "importance_sampling_ratio" in out:
            masked, total = masked_share(out["importance_sampling_ratio"], out["completion_mask"])
            counts = self.accelerator.gather(torch.tensor([[masked, total]], device=self.accelerator.device))
            masked, total = counts.sum(0).tolist()
            mode = "train" if self.model.training else "eval"
            self._metrics[mode][IS_MASKED].append(masked / total if total else 0.0)
        return out


declare_schedule(_ISLoggingGRPOTrainer, GRPO_SCHEDULE)  # GRPOTrainer's passes: it only adds a metric


FAMILY_OPTIONS = ("epsilon_high", "importance_sampling_level", "scale_rewards", "mask_truncated_completions")


class TRLOptionError(ValueError):
    """A GRPO-family option the installed TRL's GRPOConfig does not have."""


def family_options(cfg: GRPOMethodConfig, available=None, version: str | None = None) -> dict:
    """GRPOConfig keywords of the GRPO family's options (Dr. GRPO, DAPO, GSPO: methods/grpo_config.py), each
    passed as set (TRL's defaults for GRPO). An option the installed TRL lacks is refused in one line when set
    away from GRPO's default, and left out otherwise. `available`/`version`: GRPOConfig's fields and TRL's
    version (the installed ones unless a test says otherwise)."""
    import trl
    available = GRPOConfig.__dataclass_fields__ if available is None else available
    version = version or trl.__version__
    grpo = GRPOMethodConfig.__dataclass_fields__
    out = {}
    for name in FAMILY_OPTIONS:
        value = getattr(cfg, name)
        if name in available:
            out[name] = value
        elif value != grpo[name].default:
            raise TRLOptionError(f"method.{name}={value!r} needs GRPOConfig.{name}, which TRL {version} lacks; "
                                 f"install trl==1.12.0 (constraints.txt) or set method.{name}={grpo[name].default!r}")
    return out


class GRPO(TRLOnlineMethod):
    """GRPO through TRL (see the module docstring), on the adapter of methods/trl_online.py. Keyword arguments:
    GRPOMethodConfig's fields."""

    name = "grpo"
    label_keys = ("beta", "learning_rate")
    trains = True
    config_class = GRPOMethodConfig
    facts = GRPO_FACTS  # methods/grpo_config.py: read there without torch (harness/core/method_facts.py light_facts)
    trainer_class = GRPOTrainer
    title = "GRPO"

    def _trainer_for(self) -> type:
        """TRL's GRPOTrainer; with vLLM's importance-sampling correction on, the subclass that logs what it masks."""
        return (_ISLoggingGRPOTrainer if self._on_vllm and self.config.vllm_importance_sampling_correction
                else GRPOTrainer)

    def metrics(self, logs: dict) -> dict:
        return trl_metrics(logs)

    def _unwrap(self, trainer):
        return trained_model(trainer.accelerator, trainer.model)  # this module's name (tests spy on it here)

    def memory_plan(self, shape: PretrainedConfig, dtype: str, total: int, longest_prompt: int,
                    max_completion_length: int, lora_params: int = 0):
        """The colocated vLLM engine's share of one GPU beside this trainer (harness/core/gpu_memory.py
        grpo_vllm_plan, the function the planner prices GRPO on engine=vllm with): the per-device
        micro-batch and TRL's steps_per_generation (= the gradient accumulation steps, GRPOConfig's default)
        of micro_batches, FSDP shards when launched with conf/accelerate/fsdp.yaml."""
        from harness.core.gpu_memory import grpo_vllm_plan
        cfg = self.config
        micro, gas = micro_batches(cfg, shape, world_size(), longest_prompt, max_completion_length, dtype_bytes(dtype))
        return grpo_vllm_plan(shape, dtype, total, cfg.engine, sequences=micro,
                              steps_per_generation=gas, prompt_tokens=longest_prompt,
                              completion_tokens=max_completion_length, beta=cfg.beta, lora_params=lora_params,
                              checkpointing=cfg.gradient_checkpointing,
                              fsdp_shards=world_size() if using_fsdp() else 0)

    def _trl_args(self, policy: Policy, ledger: Ledger, run_dir: Path, max_completion_length: int,
                  longest_prompt: int = 0, lora_params: int = 0) -> GRPOConfig:
        cfg = self.config
        on_cpu = policy.model.device.type == "cpu"
        # the options every trainer on the adapter shares (batch split, micro-batches, fp32 master, constant rate)
        common = self._common_trl_args(policy, ledger, run_dir, max_completion_length, longest_prompt, GRPOConfig)
        dtype = str(policy.model.dtype).removeprefix("torch.")  # the model's own: train() has not upcast it yet
        vllm = {}
        if self._on_vllm:  # the engine's context and, on a GPU, its share beside this trainer
            from harness.engines import device_memory
            plan = (self.memory_plan(policy.model.config, dtype, device_memory()[0], longest_prompt,
                                     max_completion_length, lora_params) if not on_cpu else None)
            vllm = trl_vllm_kwargs(cfg.engine, max_model_len=longest_prompt + max_completion_length, plan=plan)
            if plan is not None:
                log.info("GRPO: colocated vLLM gets gpu_memory_utilization %.4f (%s)", plan.utilization,
                         ", ".join(f"{k} {v / 2**30:.1f} GiB" for k, v in plan.parts().items()))
                if plan.warning():
                    log.warning(plan.warning())
        return GRPOConfig(
            **common, loss_type=cfg.loss_type, **family_options(cfg),
            # explicit, against TRL's default (True): not part of GRPO; only read by TRL when use_vllm
            vllm_importance_sampling_correction=cfg.vllm_importance_sampling_correction,
            **vllm,
        )


# ---- the GRPO family (conf/method/dr_grpo.yaml, dapo.yaml, gspo.yaml): GRPO's trainer and ledger unchanged, with
# GRPOConfig's own options set as each paper defines them (methods/grpo_config.py); a name of their own in records
class DrGRPO(GRPO):
    """Dr. GRPO (Liu et al. 2025): no per-sequence length or group-std normalisation, no KL."""

    name = "dr_grpo"
    config_class = DrGRPOMethodConfig
    facts = GRPO_FACTS


class DAPO(GRPO):
    """DAPO (Yu et al. 2025): clip-higher, token-level loss, overlong filtering, no KL."""

    name = "dapo"
    config_class = DAPOMethodConfig
    facts = GRPO_FACTS


class GSPO(GRPO):
    """GSPO (Zheng et al. 2025): sequence-level importance ratio and clipping, no KL."""

    name = "gspo"
    config_class = GSPOMethodConfig
    facts = GRPO_FACTS
