"""The adapter for TRL's online trainers (GRPOTrainer, RLOOTrainer, ...): one `train` on the ledger, priced by the
trainer's own forward-pass schedule.

    python -m pytest tests/test_trl_online.py -q        # the ledger against FlopCounterMode, per shipped method

A TRL online trainer samples completions of the training prompts, scores them with the task's reward and updates
the policy, one optimizer step at a time, inside its own loop. What the adapter adds (methods/grpo.py's GRPO and its
family and methods/rloo.py's RLOO are built on it; a plugin is built the same way, docs/rl_methods.md):

- `TokenRecorder` wraps the task's reward and records, for every completion TRL scored, the prompt's token count
  (the prompt string re-tokenised with the call TRL makes, `tokenizer(text=prompts)`) and the length of the
  `completion_ids` TRL passes to reward functions (tokens decoded up to and including EOS).
- `StepCost` prices the optimizer step that just ended from those counts (the shared ledger callback,
  methods/trl_ledger.py, asks for it after each step); it checks that their running total equals TRL's own
  `state.num_input_tokens_seen` (raises otherwise), and gathers every rank's counts first under data
  parallelism, so every rank charges the same step.
- The trainer's **forward-pass schedule** (`ForwardSchedule`, declared once per trainer class with
  `declare_schedule`): which passes one optimizer step runs, each priced by harness/core/flops.py on the real
  token counts (padding not charged; `step_flops`):

      generation    prefill + every decoded token of the step's new completions
      update        policy forward + backward (3 x a completion-scoring forward) over every sequence trained on
      reference     1 scoring forward over the new completions, by the reference model (TRL: when beta != 0)
      old_logprobs  1 scoring forward over the new completions, by the sampling policy (when TRL computes
                    them: GRPOTrainer only when a generated batch is reused (num_iterations > 1) or vLLM's
                    importance-sampling correction is on; RLOOTrainer every time it generates)

  An entry is True, False or a function of the trainer's config (the TRL *Config the method builds). A trainer
  class the adapter has no schedule for, or one whose schedule lacks an entry, is refused when the method is
  constructed (before any model loads), in one line naming the class, the entry and `declare_schedule`: a
  trainer priced by another's schedule would be charged silently wrong (TRL's RLOO priced as GRPO misses a
  forward per step, and the token cross-check still passes). tests/test_trl_online.py checks every shipped
  schedule against torch's FlopCounterMode over 3 steps.
- `TRLOnlineMethod.train`: the harness's side of every such trainer: prompts through `policy.format` (chat
  templates as at evaluation, TRL's prompt ids equal evaluation's: methods/trl_prompts.py), the ledger callback
  (stops at the step boundary where the ledger is spent, the last step charged pro rata at the learning rate
  x f: harness/core/budget.py, methods/trl_ledger.py; `max_steps` is only a safety cap), a budget below
  one step refused before training, checkpoint/resume through TRL's `resume_from_checkpoint` with the ledger's
  state beside each checkpoint (methods/trl_ledger.py), the reference model rebuilt by TRL from a copy of the
  initial weights (run_dir/init_model), the fp32 master (the policy trains fp32 weights, autocast in the model's
  dtype on a GPU; the model comes back in its dtype for evaluation), LoRA through TRL's peft_config, and the
  summary. A subclass supplies `_trl_args` (the trainer's config) and the class attributes below.

With num_iterations = mu a batch is generated every mu steps; the steps in between pay only the update, on the
batch generated last. samples = completions scored in the step. One generated batch per optimizer step is what
the adapter prices (TRL's steps_per_generation = gradient_accumulation_steps, its default): another ratio is
refused. As everywhere in the harness, padding, decoding past a row's EOS and the LM head at prompt positions are
not charged; the executed FLOPs (`executed_flops`, the same formulas on the batch padded to its longest prompt
and completion) record what ran, padding included.
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, ClassVar, Mapping

import torch
from transformers import PretrainedConfig, set_seed
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from harness.core.budget import Ledger
from harness.core.distributed import (DistributedError, barrier, check_fsdp, check_gpus_fit, gather_lists,
                                      is_main_process, trained_model, world_size)
from harness.core.flops import (completion_train_flops, generation_flops, lora_completion_train_flops, padded_pairs,
                                scoring_flops)
from harness.core.gpu_memory import dtype_bytes
from harness.core.model_shapes import load_shape
from harness.core.policy import Policy, resolve_model_path
from methods.base import ConfiguredMethod
from methods.grpo_config import ONLINE_FACTS, micro_batches
from methods.lora import adapter_forward_flops, adapter_parameters, lora_config, trained_parameters
from methods.trl_ledger import LedgerCallback, last_complete_checkpoint, report_to, restore_ledger, tensorboard_dir
from methods.trl_prompts import trl_text_prompts
from tasks.base import Task

log = logging.getLogger(__name__)

__all__ = ["PASSES", "ForwardSchedule", "ScheduleError", "declare_schedule", "schedule_for", "step_flops",
           "TokenRecorder", "StepCost", "online_metrics", "TRLOnlineMethod"]


# ---- the forward-pass schedule of each TRL trainer class ----
PASSES = ("generation", "update", "reference", "old_logprobs")  # the entries every schedule declares


class ScheduleError(TypeError):
    """A TRL trainer class without a (complete) forward-pass schedule: its steps cannot be priced."""


@dataclass(frozen=True)
class ForwardSchedule:
    """Which forward passes one optimizer step of a TRL trainer runs (module docstring). Each entry is True, False,
    or a function of the trainer's config returning whether the pass runs for the completions a step generates."""

    generation: bool | Callable
    update: bool | Callable
    reference: bool | Callable
    old_logprobs: bool | Callable

    def runs(self, args) -> dict[str, bool]:
        """{pass: whether it runs} under the trainer's config `args`."""
        return {name: bool(rule(args) if callable(rule) else rule)
                for name, rule in ((n, getattr(self, n)) for n in PASSES)}


_SCHEDULES: dict[type, ForwardSchedule] = {}


def _how_to_declare(name: str) -> str:
    return (f"declare it before building the method: methods.trl_online.declare_schedule({name}, "
            + ", ".join(f"{p}=..." for p in PASSES)
            + "), each True, False or a function of the trainer's config (docs/rl_methods.md)")


def declare_schedule(trainer_class: type, schedule: ForwardSchedule | Mapping | None = None,
                     **entries) -> ForwardSchedule:
    """Declare `trainer_class`'s forward-pass schedule (a ForwardSchedule, a mapping, or the entries as keywords).

    Raises:
        ScheduleError: an entry of PASSES is missing, or one is not a pass the adapter prices (one line).
    """
    given = dict(asdict(schedule) if isinstance(schedule, ForwardSchedule) else (schedule or {}), **entries)
    name = getattr(trainer_class, "__name__", str(trainer_class))
    unknown = [k for k in given if k not in PASSES]
    if unknown:
        raise ScheduleError(f"TRL trainer {name}: {unknown[0]!r} is not a forward pass the adapter prices (passes: "
                            f"{', '.join(PASSES)}); price other work in the method's own StepCost")
    missing = [p for p in PASSES if p not in given]
    if missing:
        raise ScheduleError(f"TRL trainer {name}'s forward-pass schedule has no {missing[0]!r} entry, so its steps "
                            f"cannot be priced; {_how_to_declare(name)}")
    declared = ForwardSchedule(**given)
    _SCHEDULES[trainer_class] = declared
    return declared


def schedule_for(trainer_class: type) -> ForwardSchedule:
    """The schedule declared for exactly this class (a subclass may run other passes: it declares its own).

    Raises:
        ScheduleError: none declared (one line naming the class, its missing entries and how to declare them).
    """
    if trainer_class in _SCHEDULES:
        return _SCHEDULES[trainer_class]
    name = f"{trainer_class.__module__}.{trainer_class.__qualname__}" if isinstance(trainer_class, type) \
        else str(trainer_class)
    short = getattr(trainer_class, "__name__", name)
    raise ScheduleError(f"TRL trainer {name} has no forward-pass schedule (missing entries: {', '.join(PASSES)}), "
                        f"so its steps cannot be priced; {_how_to_declare(short)}")


# ---- pricing one optimizer step ----
def step_flops(config: PretrainedConfig, prompt_tokens: list[int], completion_tokens: list[int],
               train_pairs: tuple[list[int], list[int]], *, reference: bool, old_logprobs: bool,
               lora_params: int = 0, generation: bool = True, update: bool = True) -> dict[str, float]:
    """FLOPs of one optimizer step of a TRL online trainer, by pass (see the module docstring).

    Args:
        config: the policy's model config.
        prompt_tokens: prompt length of each completion generated in this step (empty when the
            step reuses an earlier batch, num_iterations > 1).
        completion_tokens: decoded length of each of those completions, EOS included.
        train_pairs: (prompt lengths, completion lengths) of every sequence the update trained on.
        reference: the reference model scored the new completions (the schedule's `reference`).
        old_logprobs: the trainer recomputed the sampling policy's log-probs of the new completions.
        lora_params: adapter parameters when training LoRA (0: full training). The update is then
            priced by `lora_train_flops`, and the adapted policy's forwards (generation, old
            log-probs) pay the unmerged adapters too; the reference runs with adapters disabled.
        generation, update: the step generated its completions / trained the policy (every shipped trainer's
            schedule says both; a schedule saying False prices the pass at 0).

    Returns:
        {"generation", "reference", "old_logprobs", "update"} in FLOPs.
    """
    scoring = scoring_flops(config, prompt_tokens, completion_tokens)
    adapters = adapter_forward_flops(lora_params, sum(prompt_tokens) + sum(completion_tokens))
    train = (lora_completion_train_flops(config, *train_pairs, lora_params) if lora_params
             else completion_train_flops(config, *train_pairs))
    return {
        "generation": generation_flops(config, prompt_tokens, completion_tokens) + adapters if generation else 0.0,
        "reference": scoring if reference else 0.0,
        "old_logprobs": scoring + adapters if old_logprobs else 0.0,
        "update": train if update else 0.0,
    }


class TokenRecorder:
    """Wraps the task's reward for a TRL online trainer and records the token counts of every completion it scores.

    TRL calls reward functions with `prompts`, `completions` and `completion_ids` (and the dataset's other
    columns); the wrapper records each prompt's length as TRL tokenises a text prompt and each completion's
    length, then calls the task's reward with the same arguments.
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.prompt_tokens: list[int] = []
        self.completion_tokens: list[int] = []
        self._prompt_len: dict[str, int] = {}

    def wrap(self, reward: Callable, name: str) -> Callable:
        """The reward function to hand TRL, named `name` (TRL names the reward metric after it)."""
        def task_reward(prompts, completions, completion_ids, **columns):
            new = [p for p in dict.fromkeys(prompts) if p not in self._prompt_len]
            if new:  # the same call GRPOTrainer._tokenize_prompts (and RLOOTrainer's) makes for text prompts
                for p, ids in zip(new, self.tokenizer(text=new)["input_ids"]):
                    self._prompt_len[p] = len(ids)
            self.prompt_tokens += [self._prompt_len[p] for p in prompts]
            self.completion_tokens += [len(ids) for ids in completion_ids]
            return reward(completions=completions, prompts=prompts, completion_ids=completion_ids, **columns)

        task_reward.__name__ = name
        return task_reward

    def take(self) -> tuple[list[int], list[int]]:
        """The counts recorded since the last call (this step's new completions), and reset."""
        out = (self.prompt_tokens, self.completion_tokens)
        self.prompt_tokens, self.completion_tokens = [], []
        return out


class StepCost:
    """The cost of the optimizer step that just ended, from the recorded token counts and the passes the trainer's
    schedule runs (module docstring): called by LedgerCallback as cost(args, state) -> (flops, samples, extras).

    Args:
        recorder: the TokenRecorder wrapping the reward TRL calls.
        model_config: the policy's model config.
        reference, old_logprobs: whether those passes run over each generated batch (ForwardSchedule.runs).
        generation, update: likewise (True for every shipped trainer).
        tokens_counted: TRL's num_input_tokens_seen at the checkpoint a run resumes from (0: a fresh run).
        lora_params: adapter parameters when training LoRA (0: full training).
        title: the method's name in the mismatch error ("GRPO", "RLOO").
    """

    def __init__(self, recorder: TokenRecorder, model_config: PretrainedConfig, *, reference: bool,
                 old_logprobs: bool, tokens_counted: int = 0, lora_params: int = 0, title: str = "GRPO",
                 generation: bool = True, update: bool = True):
        self.recorder, self.model_config, self.lora_params = recorder, model_config, lora_params
        self.reference, self.old_logprobs, self.title = reference, old_logprobs, title
        self.generation, self.update = generation, update
        # the batch the update trains on (reused when num_iterations > 1)
        self.train_pairs: tuple[list[int], list[int]] = ([], [])
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
                f"{self.title} token count mismatch at step {state.global_step}: recorded {self.tokens_counted} prompt+"
                f"completion tokens, TRL reports {state.num_input_tokens_seen}; the FLOPs ledger would be wrong "
                "(was the reward wrapper bypassed, or does this TRL version tokenise prompts differently?)")
        flags = dict(reference=self.reference and bool(prompt), old_logprobs=self.old_logprobs and bool(prompt),
                     lora_params=self.lora_params, generation=self.generation, update=self.update)
        parts = step_flops(self.model_config, prompt, completion, self.train_pairs, **flags)
        executed = step_flops(self.model_config, *padded_pairs(prompt, completion), padded_pairs(*self.train_pairs),
                              **flags)
        extras = {"prompt_tokens": prompt, "completion_tokens": completion, "flops_step": parts,
                  "tokens_seen": state.num_input_tokens_seen, "executed_flops": sum(executed.values())}
        return sum(parts.values()), len(completion), extras


def online_metrics(logs: dict) -> dict:
    """A TRL online trainer's log of one step, under the names the step log uses."""
    return {"reward_mean": logs.get("reward"), "reward_std": logs.get("reward_std"), "loss": logs.get("loss"),
            "kl": logs.get("kl"), "lr": logs.get("learning_rate"), "grad_norm": logs.get("grad_norm"),
            "completion_mean_len": logs.get("completions/mean_length"), "trl_num_tokens": logs.get("num_tokens")}


def _request_save(control, state) -> None:
    control.should_save = True  # TRL saves after logging the step; LedgerCallback.on_save adds the ledger


# ---- the method ----
class TRLOnlineMethod(ConfiguredMethod):
    """A method that trains with a TRL online trainer on the ledger (module docstring).

    A subclass declares, beside ConfiguredMethod's name, label_keys and config_class (and facts, which default to
    ONLINE_FACTS: family rl, one optimizer step per update, prompts_per_step x num_generations samples per step,
    the memory model of a trainer generating with the policy):
        trainer_class   the TRL trainer (its schedule is looked up when the method is built)
        title           its name in log lines and errors ("GRPO")
    and implements `_trl_args(policy, ledger, run_dir, max_completion_length, longest_prompt, lora_params)`,
    returning the trainer's config (TRL's *Config, e.g. GRPOConfig), usually `_common_trl_args(...)` plus the
    trainer's own options. Its config dataclass has the fields this class reads: prompts_per_step,
    num_generations, max_completion_length, learning_rate, beta, temperature, num_iterations, epsilon,
    gradient_accumulation_steps, micro_batch_size, gradient_checkpointing, max_steps, seed, checkpoint_every,
    peft, lora (and, optionally, engine).
    """

    trainer_class: ClassVar[type | None] = None
    title: ClassVar[str] = ""
    facts = ONLINE_FACTS  # methods/grpo_config.py (torch-free): RL family, updates budget, memory; a subclass may
    # declare its own (GRPO's plans engine=vllm too)

    def __init__(self, **hparams):
        super().__init__(**hparams)
        schedule_for(self._trainer_for())  # refused here, before any model loads, when the trainer has none

    # ---- hooks ----
    def _trainer_for(self) -> type:
        """The TRL trainer class this configuration trains with (default: trainer_class)."""
        if self.trainer_class is None:
            raise ScheduleError(f"method class {type(self).__qualname__} names no trainer_class; set it to the TRL "
                                "trainer it trains with (e.g. trl.RLOOTrainer)")
        return self.trainer_class

    def _trl_args(self, policy: Policy, ledger: Ledger, run_dir: Path, max_completion_length: int,
                  longest_prompt: int = 0, lora_params: int = 0):
        raise NotImplementedError(f"{type(self).__qualname__} must build its trainer's config in _trl_args")

    def _common_trl_args(self, policy: Policy, ledger: Ledger, run_dir: Path, max_completion_length: int,
                         longest_prompt: int, trl_config_class: type) -> dict:
        """The keywords of the trainer's config every method on the adapter sets the same way (GRPOConfig and
        RLOOConfig share them): output, logging and checkpoints left to the ledger callback, the fp32 master with
        autocast in the model's dtype on a GPU only, a constant learning rate, the step's batch split over the
        ranks in micro-batches (`micro_batches`), and the config's num_generations, temperature, beta,
        num_iterations, epsilon, max_steps, seed and gradient_checkpointing.

        Raises:
            DistributedError: prompts_per_step x num_generations does not split over the ranks x
                gradient_accumulation_steps.
        """
        cfg, title = self.config, self.title or self.name
        on_cpu = policy.model.device.type == "cpu"
        batch = cfg.prompts_per_step * cfg.num_generations  # the global batch, split over the ranks
        if batch % (cfg.gradient_accumulation_steps * world_size()):
            raise DistributedError(f"prompts_per_step x num_generations = {batch} completions per step cannot be split "
                                   f"over {world_size()} processes x gradient_accumulation_steps="
                                   f"{cfg.gradient_accumulation_steps}; make it a multiple of their product")
        # transformers >= 5.x renamed gradient_checkpointing (the old name still works but warns).
        fields = trl_config_class.__dataclass_fields__
        checkpointing = "activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing"
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
            log.info("%s: %d sequences per device per step in %d micro-batches of %d (method.micro_batch_size=%s)",
                     title, batch // world_size(), gas, micro, cfg.micro_batch_size)
        return dict(
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
            temperature=cfg.temperature, beta=cfg.beta, num_iterations=cfg.num_iterations, epsilon=cfg.epsilon,
        )

    def metrics(self, logs: dict) -> dict:
        """The trainer's step log under the step log's names (online_metrics; a subclass adds its own)."""
        return online_metrics(logs)

    def _unwrap(self, trainer):
        """The trained module, whole on rank 0 (also under FSDP)."""
        return trained_model(trainer.accelerator, trainer.model)

    @property
    def _on_vllm(self) -> bool:
        return (getattr(self.config, "engine", None) or {}).get("name", "hf") == "vllm"

    # ---- the run ----
    def train(self, policy: Policy, task: Task, ledger: Ledger, run_dir: Path) -> dict:
        """Train `policy.model` in place with the TRL trainer until `ledger` is spent; return a summary."""
        cfg, run_dir, title = self.config, Path(run_dir), self.title or self.name
        if ledger.exhausted:
            return {"steps": 0, "resumed_from": 0, "flops": ledger.flops, "samples": ledger.samples, "wall_s": 0.0}
        check_fsdp(self.name, cfg.peft)  # TRL's own checkpoints save FSDP shards correctly
        model, tok = policy.model, policy.tokenizer
        dataset = task.load("train")
        # chat templates apply as at evaluation, less a leading BOS text that TRL's tokenisation adds back:
        # TRL's prompt ids are evaluation's (methods/trl_prompts.py; raises if a tokenizer defeats that)
        prompts = trl_text_prompts(tok, [policy.format(p) for p in dataset["prompt"]])
        dataset = dataset.remove_columns("prompt").add_column("prompt", prompts)
        recorder = TokenRecorder(tok)
        reward = recorder.wrap(task.reward, name=task.name)
        lora_params = adapter_parameters(model, cfg.lora) if cfg.peft else 0
        # vLLM's context: the longest prompt as TRL tokenises it (TRL 1.12 truncates no prompt) + the completion
        # (and the padded length of a training micro-batch: micro_batches)
        longest = max(len(ids) for ids in tok(text=prompts)["input_ids"])
        args = self._trl_args(policy, ledger, run_dir, cfg.max_completion_length or task.max_new_tokens, longest,
                              lora_params)
        if args.steps_per_generation != args.gradient_accumulation_steps:
            raise ScheduleError(f"{title}: steps_per_generation={args.steps_per_generation} differs from "
                                f"gradient_accumulation_steps={args.gradient_accumulation_steps}; the adapter prices "
                                "one generated batch per optimizer step (TRL's default: leave steps_per_generation "
                                "unset)")
        if model.device.type == "cuda" and not self._on_vllm:  # engine=vllm: memory_plan refused it already
            # run_one checked this before the load (preflight); kept for a caller that trains a policy directly
            self._check_gpus(model.config, str(model.dtype).removeprefix("torch."),
                             torch.cuda.get_device_properties(model.device).total_memory, longest,
                             cfg.max_completion_length or task.max_new_tokens)
        trainer_class = self._trainer_for()
        passes = schedule_for(trainer_class).runs(args)
        peft_config = lora_config(cfg.lora, model) if cfg.peft else None
        if cfg.peft:  # TRL draws the adapters' init before it seeds anything: seed it here, so LoRA runs repeat
            set_seed(cfg.seed)
        one_step = (cfg.prompts_per_step * cfg.num_generations if ledger.kind == "samples"
                    else self._min_step_flops(model.config, tok, prompts, passes, lora_params))
        ledger.check_step_fits(one_step, title)
        checkpoint = last_complete_checkpoint(run_dir / "trl")
        cost = StepCost(recorder, model.config, lora_params=lora_params, title=title, **passes)
        if checkpoint is not None:
            restore_ledger(ledger, checkpoint)
            cost.tokens_counted = json.loads((checkpoint / "trainer_state.json").read_text())["num_input_tokens_seen"]
            log.info("%s: resuming from %s at step %d", title, checkpoint, ledger.steps)
        resumed_from = ledger.steps
        callback = LedgerCallback(ledger, cost, self.metrics, checkpoint_every=cfg.checkpoint_every,
                                  checkpoint=_request_save)

        original_path = model.config.name_or_path
        if passes["reference"] and not cfg.peft:  # TRL rebuilds the reference model from the model's config path:
            init_dir = run_dir / "init_model"  # point it at a copy (with LoRA it disables the adapters instead)
            if is_main_process():
                model.save_pretrained(init_dir)
                tok.save_pretrained(init_dir)
            barrier()  # the other ranks load it once rank 0 has written it
            model.config.name_or_path = str(init_dir)
        model_dtype = model.dtype
        if not cfg.peft:  # after init_model was written in the model's dtype (the reference and vLLM load it)
            model.float()  # fp32 weights (the master), autocast in the model's dtype on a GPU; LoRA's frozen base stays
        try:
            with tensorboard_dir(run_dir):
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
        log.info("%s: %s", title, asdict(cfg))
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
        ledger.close()

        trained = self._unwrap(trainer)  # whole on rank 0, also under FSDP
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

    def preflight(self, prompter: Policy, task: Task, dtype: str) -> None:
        """train()'s launch-size check, before the weights load: the model's shape from its config alone
        (harness/core/model_shapes.py load_shape), the longest training prompt as TRL will tokenise it."""
        if prompter.device != "cuda" or self._on_vllm:
            return
        prompts = trl_text_prompts(prompter.tokenizer, [prompter.format(p) for p in task.load("train")["prompt"]])
        longest = max(len(ids) for ids in prompter.tokenizer(text=prompts)["input_ids"])
        gpu_bytes = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
        self._check_gpus(load_shape(resolve_model_path(prompter.name)), dtype, gpu_bytes,
                         longest, self.config.max_completion_length or task.max_new_tokens)

    def _check_gpus(self, shape, dtype: str, gpu_bytes: int, longest_prompt: int, completion: int) -> None:
        """Refuse in one line a launch smaller than the planner says this run needs (harness/core/distributed.py
        check_gpus_fit: e.g. a 7B model in one process, as a Slurm job of the submitit launcher starts it), by the
        method's own memory model (facts.memory)."""
        parts, gpus, note = self.facts.memory(self.config, shape, longest_prompt + completion, dtype=dtype,
                                              engine=getattr(self.config, "engine", None) or {"name": "hf"},
                                              gpu_gb=gpu_bytes / 1e9, headroom=0.9, prompt_tokens=longest_prompt)
        check_gpus_fit(f"method={self.name} on {getattr(shape, 'name_or_path', '') or 'this model'}", parts, gpus,
                       note, gpu_bytes)

    def _min_step_flops(self, config: PretrainedConfig, tok, prompts: list[str], passes: dict[str, bool],
                        lora_params: int) -> float:
        """A lower bound on one step's cost: shortest prompt, one-token completions, the schedule's passes."""
        shortest = min(len(ids) for ids in tok(text=prompts)["input_ids"])
        n = self.config.prompts_per_step * self.config.num_generations
        parts = step_flops(config, [shortest] * n, [1] * n, ([shortest] * n, [1] * n), lora_params=lora_params,
                           **passes)
        return sum(parts.values())
