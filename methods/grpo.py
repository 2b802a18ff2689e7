"""GRPO: TRL's `GRPOTrainer` on the task's reward, stopped by the compute ledger.

    python -m harness method=grpo method.beta=1e-3 method.learning_rate=1e-5
    python -m pytest tests/test_grpo.py -q

One optimizer step = `prompts_per_step` training prompts x `num_generations` sampled completions,
scored by `task.reward`, group-normalised advantages, one clipped policy-gradient update per
`num_iterations`. Prompts go through `policy.format` first, so chat templates apply exactly as at
evaluation time, and TRL tokenises them to evaluation's ids (methods/trl_prompts.py).

Compute accounting. A wrapper around the task's reward records, for every completion TRL scored,
the prompt's token count (the prompt string re-tokenised with the same call TRL makes,
`tokenizer(text=prompts)`) and the length of the `completion_ids` TRL passes to reward functions
(tokens decoded up to and including EOS). The shared ledger callback (methods/trl_ledger.py) asks
`_StepCost` for them after each optimizer step; it checks that their running total equals TRL's
own `state.num_input_tokens_seen` (raises otherwise), and the ledger is charged
(harness/core/flops.py conventions, real lengths, padding not charged):

    generation    prefill + every decoded token of the step's new completions
    reference     1 forward over prompt+completion of the new completions     (beta > 0)
    old_logprobs  1 forward over prompt+completion of the new completions     (TRL recomputes the
                  sampling policy's log-probs iff gradient_accumulation_steps % (steps_per_generation
                  x num_iterations) != 0, here iff num_iterations > 1)
    update        3 x forward over prompt+completion of every sequence in the batch trained on

As everywhere in the harness, padding and decoding past a row's EOS (while other rows continue) are
not charged, nor is the LM head at prompt positions (TRL's forwards skip it with logits_to_keep;
the scoring forwards and the update charge the head at completion positions only). The executed
FLOPs (`executed_flops`, the same formulas on the batch padded to its longest prompt and
completion) record what ran, padding included.

Across processes (accelerate launch / torchrun, harness/core/distributed.py) the step's global batch is
split over the ranks; each rank records its own completions and `_StepCost` gathers every rank's
counts before pricing them, so all ranks charge the same step and stop together, and the check
against TRL's (already gathered) num_input_tokens_seen holds unchanged. With method.peft=lora
(methods/lora.py) the update is priced by `lora_train_flops` and the adapted policy's forwards pay
the unmerged adapters; the reference (beta > 0) is the same model with adapters disabled.

With num_iterations = mu a batch is generated every mu steps; the steps in between pay only the
update. samples = completions scored in the step. Training stops at the first step boundary where
`ledger.exhausted`; `max_steps` is only a safety cap.

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

import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import torch
from transformers import PretrainedConfig, set_seed
from transformers.trainer_callback import PrinterCallback, ProgressCallback
from trl import GRPOConfig, GRPOTrainer

from harness.core.budget import Ledger
from harness.engines import trl_vllm_kwargs
from harness.core.distributed import (DistributedError, barrier, check_fsdp, check_gpus_fit, gather_lists,
                                      is_main_process, trained_model, using_fsdp, world_size)
from harness.core.flops import (completion_train_flops, generation_flops, lora_completion_train_flops, padded_pairs,
                           scoring_flops)
from harness.core.gpu_memory import dtype_bytes
from harness.core.policy import Policy
from methods.base import ConfiguredMethod
from methods.grpo_config import (GRPO_FACTS, LOSS_TYPES, DAPOMethodConfig, DrGRPOMethodConfig,  # noqa: F401
                                 GRPOMethodConfig, GSPOMethodConfig, grpo_memory, micro_batches)
from methods.lora import adapter_forward_flops, adapter_parameters, lora_config, trained_parameters
from methods.trl_ledger import LedgerCallback, last_complete_checkpoint, report_to, restore_ledger, tensorboard_dir
from methods.trl_prompts import trl_text_prompts
from tasks.base import Task

log = logging.getLogger(__name__)


def step_flops(config: PretrainedConfig, prompt_tokens: list[int], completion_tokens: list[int],
               train_pairs: tuple[list[int], list[int]], *, reference: bool, old_logprobs: bool,
               lora_params: int = 0) -> dict[str, float]:
    """FLOPs of one GRPO optimizer step, by part (see the module docstring).

    Args:
        config: the policy's model config.
        prompt_tokens: prompt length of each completion generated in this step (empty when the
            step reuses an earlier batch, num_iterations > 1).
        completion_tokens: decoded length of each of those completions, EOS included.
        train_pairs: (prompt lengths, completion lengths) of every sequence the update trained on.
        reference: the reference model scored the new completions (beta > 0).
        old_logprobs: TRL recomputed the sampling policy's log-probs of the new completions.
        lora_params: adapter parameters when training LoRA (0: full training). The update is then
            priced by `lora_train_flops`, and the adapted policy's forwards (generation, old
            log-probs) pay the unmerged adapters too; the reference runs with adapters disabled.

    Returns:
        {"generation", "reference", "old_logprobs", "update"} in FLOPs.
    """
    scoring = scoring_flops(config, prompt_tokens, completion_tokens)
    adapters = adapter_forward_flops(lora_params, sum(prompt_tokens) + sum(completion_tokens))
    return {
        "generation": generation_flops(config, prompt_tokens, completion_tokens) + adapters,
        "reference": scoring if reference else 0.0,
        "old_logprobs": scoring + adapters if old_logprobs else 0.0,
        "update": (lora_completion_train_flops(config, *train_pairs, lora_params) if lora_params
                   else completion_train_flops(config, *train_pairs)),
    }


class _TokenRecorder:
    """Wraps the task's reward for TRL and records the token counts of every completion it scores."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.prompt_tokens: list[int] = []
        self.completion_tokens: list[int] = []
        self._prompt_len: dict[str, int] = {}

    def wrap(self, reward: Callable, name: str) -> Callable:
        def task_reward(prompts, completions, completion_ids, **columns):
            new = [p for p in dict.fromkeys(prompts) if p not in self._prompt_len]
            if new:  # the same call GRPOTrainer._tokenize_prompts makes for text prompts
                for p, ids in zip(new, self.tokenizer(text=new)["input_ids"]):
                    self._prompt_len[p] = len(ids)
            self.prompt_tokens += [self._prompt_len[p] for p in prompts]
            self.completion_tokens += [len(ids) for ids in completion_ids]
            return reward(completions=completions, prompts=prompts, completion_ids=completion_ids, **columns)

        task_reward.__name__ = name  # TRL names the reward metric after it
        return task_reward

    def take(self) -> tuple[list[int], list[int]]:
        """The counts recorded since the last call (this step's new completions), and reset."""
        out = (self.prompt_tokens, self.completion_tokens)
        self.prompt_tokens, self.completion_tokens = [], []
        return out


class _StepCost:
    """The cost of the optimizer step that just ended, from the recorded token counts (see the module docstring)."""

    def __init__(self, recorder: _TokenRecorder, model_config: PretrainedConfig, *, reference: bool,
                 old_logprobs: bool, tokens_counted: int = 0, lora_params: int = 0):
        self.recorder, self.model_config, self.lora_params = recorder, model_config, lora_params
        self.reference, self.old_logprobs = reference, old_logprobs
        self.train_pairs: tuple[list[int], list[int]] = ([], [])  # the batch the update trains on (reused when num_iterations > 1)
        self.tokens_counted = tokens_counted  # TRL's num_input_tokens_seen at the checkpoint on resume

    def __call__(self, args, state) -> tuple[float, int, dict]:
        prompt, completion = self.recorder.take()
        # every rank's completions (rank order), so all ranks charge the same global step and stop together
        prompt, completion = gather_lists(prompt), gather_lists(completion)
        if prompt:
            self.train_pairs = (prompt, completion)
        self.tokens_counted += sum(prompt) + sum(completion)
        if self.tokens_counted != state.num_input_tokens_seen:
            raise RuntimeError(
                f"GRPO token count mismatch at step {state.global_step}: recorded {self.tokens_counted} prompt+"
                f"completion tokens, TRL reports {state.num_input_tokens_seen}; the FLOPs ledger would be wrong "
                "(was the reward wrapper bypassed, or does this TRL version tokenise prompts differently?)")
        flags = dict(reference=self.reference and bool(prompt), old_logprobs=self.old_logprobs and bool(prompt),
                     lora_params=self.lora_params)
        parts = step_flops(self.model_config, prompt, completion, self.train_pairs, **flags)
        executed = step_flops(self.model_config, *padded_pairs(prompt, completion), padded_pairs(*self.train_pairs), **flags)
        extras = {"prompt_tokens": prompt, "completion_tokens": completion, "flops_step": parts,
                  "tokens_seen": state.num_input_tokens_seen, "executed_flops": sum(executed.values())}
        return sum(parts.values()), len(completion), extras


IS_MASKED = "sampling/is_masked_fraction"  # logged by _ISLoggingGRPOTrainer when vLLM's IS correction is on


def trl_metrics(logs: dict) -> dict:
    """TRL's GRPO log of one step, under the names the step log uses."""
    out = {"reward_mean": logs.get("reward"), "reward_std": logs.get("reward_std"), "loss": logs.get("loss"),
           "kl": logs.get("kl"), "lr": logs.get("learning_rate"), "grad_norm": logs.get("grad_norm"),
           "completion_mean_len": logs.get("completions/mean_length"), "trl_num_tokens": logs.get("num_tokens")}
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


def _request_save(control, state) -> None:
    control.should_save = True  # TRL saves after logging the step; LedgerCallback.on_save adds the ledger


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


class GRPO(ConfiguredMethod):
    """GRPO through TRL (see the module docstring). Keyword arguments: GRPOMethodConfig's fields."""

    name = "grpo"
    label_keys = ("beta", "learning_rate")
    trains = True
    config_class = GRPOMethodConfig
    facts = GRPO_FACTS  # methods/grpo_config.py: read there without torch (harness/core/method_facts.py light_facts)

    def train(self, policy: Policy, task: Task, ledger: Ledger, run_dir: Path) -> dict:
        """Train `policy.model` in place with GRPO until `ledger` is spent; return a summary."""
        cfg, run_dir = self.config, Path(run_dir)
        if ledger.exhausted:
            return {"steps": 0, "resumed_from": 0, "flops": ledger.flops, "samples": ledger.samples, "wall_s": 0.0}
        check_fsdp("grpo", cfg.peft)  # TRL's own checkpoints save FSDP shards correctly
        model, tok = policy.model, policy.tokenizer
        dataset = task.load("train")
        # chat templates apply as at evaluation, less a leading BOS text that TRL's tokenisation adds back:
        # TRL's prompt ids are evaluation's (methods/trl_prompts.py; raises if a tokenizer defeats that)
        prompts = trl_text_prompts(tok, [policy.format(p) for p in dataset["prompt"]])
        dataset = dataset.remove_columns("prompt").add_column("prompt", prompts)
        recorder = _TokenRecorder(tok)
        reward = recorder.wrap(task.reward, name=task.name)
        lora_params = adapter_parameters(model, cfg.lora) if cfg.peft else 0
        # vLLM's context: the longest prompt as TRL tokenises it (TRL 1.12 truncates no prompt) + the completion
        # (and the padded length of a training micro-batch: micro_batches)
        longest = max(len(ids) for ids in tok(text=prompts)["input_ids"])
        args = self._trl_args(policy, ledger, run_dir, cfg.max_completion_length or task.max_new_tokens, longest,
                              lora_params)
        if model.device.type == "cuda" and not self._on_vllm:  # engine=vllm: memory_plan refused it already
            self._check_gpus(model.config, str(model.dtype).removeprefix("torch."),
                             torch.cuda.get_device_properties(model.device).total_memory, longest,
                             cfg.max_completion_length or task.max_new_tokens)
        # TRL recomputes the sampling policy's log-probs iff generation and optimizer steps are misaligned.
        old_logprobs = args.gradient_accumulation_steps % (args.steps_per_generation * args.num_iterations) != 0
        # with vLLM, TRL also recomputes them for its importance-sampling correction (vLLM's vs the policy's log-probs)
        old_logprobs = old_logprobs or bool(args.use_vllm and args.vllm_importance_sampling_correction)
        peft_config = lora_config(cfg.lora, model) if cfg.peft else None
        if cfg.peft:  # TRL draws the adapters' init before it seeds anything: seed it here, so LoRA runs repeat
            set_seed(cfg.seed)
        one_step = (cfg.prompts_per_step * cfg.num_generations if ledger.kind == "samples"
                    else self._min_step_flops(model.config, tok, prompts, old_logprobs, lora_params))
        ledger.check_step_fits(one_step, "GRPO")
        checkpoint = last_complete_checkpoint(run_dir / "trl")
        cost = _StepCost(recorder, model.config, reference=cfg.beta > 0, old_logprobs=old_logprobs,
                         lora_params=lora_params)
        if checkpoint is not None:
            restore_ledger(ledger, checkpoint)
            cost.tokens_counted = json.loads((checkpoint / "trainer_state.json").read_text())["num_input_tokens_seen"]
            log.info("GRPO: resuming from %s at step %d", checkpoint, ledger.steps)
        resumed_from = ledger.steps
        callback = LedgerCallback(ledger, cost, trl_metrics, checkpoint_every=cfg.checkpoint_every,
                                  checkpoint=_request_save)

        original_path = model.config.name_or_path
        if cfg.beta > 0 and not cfg.peft:  # TRL rebuilds the reference model from the model's config path:
            init_dir = run_dir / "init_model"  # point it at a copy (with LoRA it disables the adapters instead)
            if is_main_process():
                model.save_pretrained(init_dir)
                tok.save_pretrained(init_dir)
            barrier()  # the other ranks load it once rank 0 has written it
            model.config.name_or_path = str(init_dir)
        model_dtype = model.dtype
        if not cfg.peft:  # after init_model was written in the model's dtype (the reference and vLLM load it)
            model.float()  # see _trl_args: fp32 weights (the master), bf16 autocast; LoRA's frozen base stays
        try:
            with tensorboard_dir(run_dir):
                trainer_class = (_ISLoggingGRPOTrainer if args.use_vllm and args.vllm_importance_sampling_correction
                                 else GRPOTrainer)
                trainer = trainer_class(model=model, reward_funcs=reward, args=args, train_dataset=dataset,
                                        processing_class=tok, callbacks=[callback], peft_config=peft_config)
        finally:
            model.config.name_or_path = original_path
        parameters = trained_parameters(trainer.model)
        if cfg.peft and parameters["trainable"] != lora_params:
            raise RuntimeError(f"LoRA: TRL's model trains {parameters['trainable']} parameters but the cost model "
                               f"priced {lora_params} adapter parameters; the FLOPs would be wrong")
        trainer.remove_callback(PrinterCallback)
        trainer.remove_callback(ProgressCallback)
        log.info("GRPO: %s", asdict(cfg))
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
        ledger.close()

        trained = trained_model(trainer.accelerator, trainer.model)  # whole on rank 0, also under FSDP
        trained_dtype = str(next(trained.parameters()).dtype).removeprefix("torch.")
        # LoRA: fold the adapters into the weights, so evaluation runs (and costs) the plain architecture;
        # evaluation runs in the model's dtype, as ES's fp32 master is cast into its working weights
        policy.model = (trained.merge_and_unload() if cfg.peft else trained).to(model_dtype)
        policy.model.config.dtype = model_dtype  # TRL's checkpoint saves wrote the fp32 master's dtype there
        policy.model.eval()
        tok.padding_side = "left"  # Policy.generate relies on it
        rewards = [s.reward_mean for s in ledger.history if s.samples and s.reward_mean is not None]
        return {"steps": trainer.state.global_step, "resumed_from": resumed_from, "flops": ledger.flops,
                "samples": ledger.samples, "wall_s": ledger.wall_s, "parameters": parameters, "peft": cfg.peft,
                "world_size": world_size(), "trained_dtype": trained_dtype,
                "reward_first": rewards[0] if rewards else None, "reward_last": rewards[-1] if rewards else None}

    def _check_gpus(self, shape, dtype: str, gpu_bytes: int, longest_prompt: int, completion: int) -> None:
        """Refuse in one line a launch smaller than the planner says this run needs (harness/core/distributed.py
        check_gpus_fit: e.g. a 7B model in one process, as a Slurm job of the submitit launcher starts it)."""
        parts, gpus, note = grpo_memory(self.config, shape, longest_prompt + completion, dtype=dtype,
                                        engine=self.config.engine or {"name": "hf"}, gpu_gb=gpu_bytes / 1e9,
                                        headroom=0.9, prompt_tokens=longest_prompt)
        check_gpus_fit(f"method=grpo on {getattr(shape, 'name_or_path', '') or 'this model'}", parts, gpus, note,
                       gpu_bytes)

    @property
    def _on_vllm(self) -> bool:
        return (self.config.engine or {}).get("name", "hf") == "vllm"

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
        batch = cfg.prompts_per_step * cfg.num_generations  # the global batch, split over the ranks
        if batch % (cfg.gradient_accumulation_steps * world_size()):
            raise DistributedError(f"prompts_per_step x num_generations = {batch} completions per step cannot be split "
                                   f"over {world_size()} processes x gradient_accumulation_steps="
                                   f"{cfg.gradient_accumulation_steps}; make it a multiple of their product")
        # transformers >= 5.x renamed gradient_checkpointing (the old name still works but warns).
        checkpointing = ("activation_checkpointing" if "activation_checkpointing" in GRPOConfig.__dataclass_fields__
                         else "gradient_checkpointing")
        # The reference model (beta > 0, full training) is loaded from init_model by TRL in float32, its default
        # (trl/trainer/utils.py create_model_from_path), the precision the policy's master trains in: the same
        # values as the upcast policy, computed the same way (fp32 on CPU, under the same autocast on a GPU), so
        # the KL is exactly 0 before the first update (a bf16 reference gave 4.8e-5 at step 1 on CPU).
        # Called before train() upcasts the policy, so `dtype` is the model's own (model.dtype in the config).
        dtype = str(policy.model.dtype).removeprefix("torch.")
        # fp32 compute on the CPU (the policy is upcast, no autocast), the model's dtype under autocast on a GPU
        micro, gas = micro_batches(cfg, policy.model.config, world_size(), longest_prompt, max_completion_length,
                                   4 if on_cpu else dtype_bytes(dtype))
        if gas != cfg.gradient_accumulation_steps:
            log.info("GRPO: %d sequences per device per step in %d micro-batches of %d (method.micro_batch_size=%s)",
                     batch // world_size(), gas, micro, cfg.micro_batch_size)
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
            # save_strategy "no": LedgerCallback asks for each checkpoint (every checkpoint_every ledger steps)
            output_dir=str(run_dir / "trl"), report_to=report_to(ledger), save_strategy="no", logging_steps=1,
            disable_tqdm=True, use_cpu=on_cpu, seed=cfg.seed,
            # The policy trains in fp32 (train() upcasts it: AdamW's steps at lr 1e-6 are far below half a bf16
            # ulp of most weights and would round away) under autocast in the model's dtype on a GPU, as TRL does
            # when it loads a model itself (trl/trainer/grpo_trainer.py GRPOTrainer.__init__: float32 unless
            # model_init_kwargs say otherwise; bf16 autocast by GRPOConfig's default). TRL defaults autocast on
            # even on CPU, where bf16 autocast is slow (and checkpointing useless): off there.
            bf16=not on_cpu and dtype == "bfloat16", fp16=not on_cpu and dtype == "float16",
            **{checkpointing: cfg.gradient_checkpointing},
            learning_rate=cfg.learning_rate, lr_scheduler_type="constant", max_steps=cfg.max_steps,
            per_device_train_batch_size=micro, gradient_accumulation_steps=gas,  # steps_per_generation follows it
            num_generations=cfg.num_generations, max_completion_length=max_completion_length,
            temperature=cfg.temperature, beta=cfg.beta, loss_type=cfg.loss_type,
            num_iterations=cfg.num_iterations, epsilon=cfg.epsilon, **family_options(cfg),
            # explicit, against TRL's default (True): not part of GRPO; only read by TRL when use_vllm
            vllm_importance_sampling_correction=cfg.vllm_importance_sampling_correction,
            **vllm,
        )

    def _min_step_flops(self, config: PretrainedConfig, tok, prompts: list[str], old_logprobs: bool,
                        lora_params: int) -> float:
        """A lower bound on one step's cost: shortest prompt, one-token completions."""
        shortest = min(len(ids) for ids in tok(text=prompts)["input_ids"])
        n = self.config.prompts_per_step * self.config.num_generations
        parts = step_flops(config, [shortest] * n, [1] * n, ([shortest] * n, [1] * n),
                           reference=self.config.beta > 0, old_logprobs=old_logprobs, lora_params=lora_params)
        return sum(parts.values())


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
