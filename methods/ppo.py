"""PPO baseline: TRL's `trl.experimental.ppo.PPOTrainer` with the task's programmatic reward.

TRL 1.12.0 PPO (the last release that ships it) takes only a reward *model*, so `TaskRewardModel`
adapts the task's reward function to the interface TRL's `get_reward` calls: it decodes the
completion tokens only (never the prompt), looks the prompt's dataset row up by its token ids and
returns `task.reward(...)` for every sequence. The value model is the policy's architecture with
the initial policy's weights and a fresh scalar head (the standard choice); the reference policy is
a frozen copy of the initial policy.

One PPO *update* = sample one completion for each of `prompts_per_step` prompts, score them, one
reference forward and one value forward, then `num_ppo_epochs` passes over the batch in
`num_mini_batches` minibatches, each training the policy and the value model together.

Departures from the paper's PPO baseline and from TRL's defaults (all deliberate):
- Compute is matched in FLOPs (or samples) through the ledger, which stops training at the update boundary
  where the budget is spent; `max_updates` is only an upper bound. The update that spends it is charged pro
  rata (harness/core/budget.py): its cost is known once its rollouts are scored, so before its first optimizer
  step a pre-step hook on the optimizer (TRL's PPO loop calls no callback there) has the ledger callback price
  it and run every optimizer step of that update (all epochs and minibatches, policy and value model) at the
  learning rate x f, f = the share of its cost the budget had left (methods/trl_ledger.py).
- Constant learning rate (TRL defaults to linear decay over `total_episodes`): the ledger, not a
  preset horizon, decides when training ends, so a decay schedule would have nothing to decay to.
- temperature 1.0 for rollouts (TRL's PPO default is 0.7): on-policy sampling, as in GRPO.
- Generation stops at EOS (`stop_token="eos"`); tokens after EOS are padding and score nothing.
- kl_coef (beta) 1e-3 and learning rate 1e-6 are the low corners of the paper's per-model grid
  (beta in {1e-3, 5e-3}, lr in {1e-6, 1e-5}); sweep them as the paper did.
- Prompt order: batch b of the stream is a pure function of (seed, b) (a seeded permutation per
  pass over the prompts) instead of TRL's DataLoader shuffle, so a resumed run continues the same
  stream; and nothing draws from the global RNG between updates, so sampling resumes exactly.

TRL defaults kept on purpose (conf/method/ppo.yaml says why, item by item): cliprange 0.2 (the policy's
probability ratio is clipped at 1 +/- 0.2, as in GRPO), kl_estimator k1 (the KL enters the per-token reward as
-kl_coef * log(pi / pi_ref), the RLHF PPO of Ziegler et al. 2019 and Ouyang et al. 2022), whiten_rewards False
(the task's 0-1 reward keeps its scale against the KL penalty; advantages are whitened regardless),
cliprange_value 0.2 (PPO2's value clipping), vf_coef 0.1, gamma 1, lam 0.95.

Across processes (harness/core/distributed.py) each rank takes its slice of every global prompt batch
and `_UpdateCost` gathers every rank's scored sequences before pricing the update. With
method.peft=lora the policy trains LoRA adapters (priced by `lora_train_flops`; reference = adapters
disabled) while the value model still trains fully.

Checkpoint/resume: TRL 1.12's PPOTrainer has no `resume_from_checkpoint` (its `train()` restarts
at update 1), so every `checkpoint_every` updates run_dir/ppo_checkpoint is written at the update
boundary (policy, value model, optimizer, scheduler, python/numpy/torch RNG states, ledger state;
swapped in atomically), and a run restarted with the same run_dir loads it after building the
trainer, skips the prompt batches already used and continues with the same ledger totals.

    python -m harness method=ppo                 # train with PPO
    python -m pytest tests/test_ppo.py -q        # tests
"""
from __future__ import annotations

import copy
import json
import logging
import statistics
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import datasets
import torch
from torch import nn
from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding, PretrainedConfig, PreTrainedModel
from transformers import set_seed
from transformers.trainer_callback import PrinterCallback
from trl.experimental.ppo import PPOConfig, PPOTrainer
from trl.experimental.utils import create_reference_model

from harness.core.budget import Ledger
from harness.core.distributed import (DistributedError, check_fsdp, check_gpus_fit, gather_lists, is_main_process,
                                      rank, trained_model, world_size)
from harness.core.flops import (completion_train_flops, forward_flops, generation_flops, head_params,
                           lora_completion_train_flops, padded_pairs, scoring_flops, train_flops)
from harness.core.gpu_memory import dtype_bytes
from harness.core.model_shapes import load_shape
from harness.core.policy import Policy, resolve_model_path
from harness.core.atomic import write_text_atomic
from harness.core.errors import UserError
from harness.core.rng import from_portable, portable, rng_state, set_rng_state
from methods.base import ConfiguredMethod, check_resumable, fsync_file, latest_dir, save_dir_atomic
from methods.lora import adapter_forward_flops, adapter_parameters, lora_config, trained_parameters
from methods.ppo_config import PPO_FACTS, PPOMethodConfig, ppo_memory, train_micro_batch  # light: ppo_config.py
from methods.trl_ledger import BudgetSpent, LedgerCallback, report_to, tensorboard_dir
from tasks.base import Task

CKPT = "ppo_checkpoint"
log = logging.getLogger(__name__)


# ---- the reward model adapter ----
class TaskRewardModel(nn.Module):
    """The task's programmatic reward in the shape TRL's `get_reward` expects of a reward model.

    `get_reward(model, query_responses, pad_token_id, context_length)` calls
    `getattr(model, model.base_model_prefix)(input_ids=..., attention_mask=..., ...)`, then
    `model.score(output.hidden_states[-1])` and picks, for each row, the score at the last token
    before the first padding token of the response. It does not pass `context_length` on, so the
    adapter recovers the prompt/response boundary itself: every row of a call shares one context
    length C (queries are left-padded to the batch's longest), and row i's prompt is the dataset
    prompt whose token ids start right after its left padding; C is the one value consistent
    with every row. The reward is written at every position, so whichever index TRL picks
    reads it. The completion is the response up to its first padding token, decoded without
    special tokens (as harness.core.policy.generate does), so the score is exactly `task.reward`'s.

    Each call also records, per sequence, the prompt tokens and the completion tokens (up to and
    including EOS), which the ledger callback turns into FLOPs; `drain()` hands them over.

    Args:
        task: the task whose `reward` scores completions.
        tokenizer: the policy's tokenizer (decodes completions; knows pad and EOS).
        rows: the dataset rows, aligned with `prompt_ids`; every column but `prompt` is passed to
            `task.reward` as a keyword, as TRL's reward functions receive them.
        prompt_ids: token ids of each row's formatted prompt, exactly as fed to the trainer.
    """

    base_model_prefix = "backbone"

    def __init__(self, task: Task, tokenizer, rows: list[dict], prompt_ids: list[list[int]]):
        super().__init__()
        self.task, self.tokenizer, self.rows = task, tokenizer, rows
        self.lookup = {}
        for i, ids in enumerate(prompt_ids):
            self.lookup.setdefault(tuple(ids), i)  # duplicate prompts: the first row's columns
        self.prompt_lengths = sorted({len(ids) for ids in prompt_ids})
        self.scored: list[dict] = []

    def backbone(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **_) -> SimpleNamespace:
        """Score each row; return the rewards broadcast to shape (batch, seq, 1) as the 'last hidden state'."""
        context = self._context_length(input_ids, attention_mask)
        pad_id, eos_id = self.tokenizer.pad_token_id, self.tokenizer.eos_token_id
        completions, idx, width = [], [], input_ids.shape[1] - context
        for ids, mask in zip(input_ids.tolist(), attention_mask.tolist()):
            lead = mask.index(True) if True in mask else len(mask)
            response_mask = mask[context:]
            n = response_mask.index(False) if False in response_mask else width  # up to the first padding
            response = ids[context:context + n]
            completions.append(self.tokenizer.decode(response, skip_special_tokens=True))
            idx.append(self.lookup[tuple(ids[lead:context])])
            # When EOS is the pad token it is masked like padding but was still decoded: count it.
            ran = n + (1 if eos_id == pad_id and n < width else 0)
            self.scored.append({"prompt_tokens": context - lead, "completion_tokens": ran})
        batch = [self.rows[i] for i in idx]
        columns = {k: [r[k] for r in batch] for k in batch[0] if k != "prompt"}
        rewards = self.task.reward(completions, prompts=[r["prompt"] for r in batch], **columns)
        for rec, r in zip(self.scored[-len(rewards):], rewards):
            rec["reward"] = float(r)
        out = torch.tensor(rewards, dtype=torch.float32, device=input_ids.device)
        return SimpleNamespace(hidden_states=(out[:, None, None].expand(-1, input_ids.shape[1], 1),))

    def score(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden

    def drain(self) -> list[dict]:
        """The sequences scored since the last call: prompt_tokens, completion_tokens, reward."""
        out, self.scored = self.scored, []
        return out

    def _context_length(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> int:
        """The prompt/response boundary C shared by all rows (see the class docstring)."""
        common = None
        for ids, mask in zip(input_ids.tolist(), attention_mask.tolist()):
            lead = mask.index(True) if True in mask else len(mask)
            fits = {lead + n for n in self.prompt_lengths if tuple(ids[lead:lead + n]) in self.lookup}
            common = fits if common is None else common & fits
        if not common:
            raise ValueError("TaskRewardModel: a sequence does not start with any training prompt; the reward "
                             "model must be built from the same tokenized prompts as the PPO train dataset")
        # Ambiguous only if, in every row at once, the prompt plus the start of its completion spells
        # another training prompt (impossible for Countdown's `...>target:` prompts); take the longest.
        return max(common)


def trainer_tokenizer(tok, prompt_ids: list[list[int]]):
    """The tokenizer PPO hands TRL: `tok`, or a copy whose pad token occurs in no training prompt.

    TRL's PPOTrainer finds padding by id (`ids != pad_token_id` in generation, reward, value and
    training forwards, and pad fills the response after EOS). A pad token that also occurs inside
    the prompts would be masked out of them and replaced by id 0: with a chat template whose turn
    end is also the pad (SmolLM2: `<|im_end|>` is EOS and pad; a Llama-3 tokenizer has no pad and
    load_policy gives it EOS), PPO would train on prompts other than those evaluated, and
    TaskRewardModel would not recognise them. The copy pads with the first special token (unk
    first) that no prompt contains and is not EOS; the policy's own tokenizer is left as it is.
    """
    used = {i for ids in prompt_ids for i in ids}
    if tok.pad_token_id not in used:
        return tok
    for candidate in [tok.unk_token_id, *tok.all_special_ids]:
        if candidate is not None and candidate not in used and candidate != tok.eos_token_id:
            out = copy.deepcopy(tok)
            out.pad_token = out.convert_ids_to_tokens(candidate)
            return out
    raise ValueError(f"PPO: the pad token {tok.pad_token!r} occurs in the training prompts and every other special "
                     "token does too; TRL's PPO would mask it out of them. Give the tokenizer a pad token the "
                     "prompts never contain")


# ---- cost model of one update ----
def value_config(config: PretrainedConfig) -> PretrainedConfig:
    """The value model's cost shape: the policy's, with a 1-output head instead of the vocab-sized LM head."""
    cfg = copy.deepcopy(config)
    cfg.vocab_size = 1
    return cfg


def update_flops(config: PretrainedConfig, prompt_tokens: list[int], completion_tokens: list[int],
                 num_ppo_epochs: int, lora_params: int = 0) -> dict[str, float]:
    """FLOPs of one PPO update from the real token counts of its sequences.

    Counts exactly what TRL's loop runs: generation (prefill + each decoded token; the rollout
    log-probs come from the generation scores, no extra policy forward), one reference-policy
    forward and one value forward over prompt + completion, the reward (programmatic: 0), then
    `num_ppo_epochs` passes in which every sequence goes once (in its minibatch) through policy
    and value model, forward + backward (3 x forward). Padding positions are not counted, nor is the
    policy's LM head at prompt positions (no log-prob there is used; TRL computes it anyway, which
    the executed FLOPs count).

    Args:
        config: the policy's model config.
        prompt_tokens: prompt length per sequence.
        completion_tokens: completion length per sequence, up to and including EOS.
        num_ppo_epochs: passes over the batch.
        lora_params: the policy's adapter parameters with peft=lora (0: full training). The policy's
            training passes are then priced by `lora_train_flops` and its generation pays the unmerged
            adapters; the reference (adapters disabled) and the value model (full) are unchanged.

    Returns:
        FLOPs per component and their "total".
    """
    seqs = [p + c for p, c in zip(prompt_tokens, completion_tokens, strict=True)]
    vcfg = value_config(config)
    out = {
        "generation": generation_flops(config, prompt_tokens, completion_tokens) + adapter_forward_flops(lora_params, sum(seqs)),
        "reference": scoring_flops(config, prompt_tokens, completion_tokens),
        "value": sum(forward_flops(vcfg, s) for s in seqs),
        "reward": 0.0,
        "train": num_ppo_epochs * ((lora_completion_train_flops(config, prompt_tokens, completion_tokens, lora_params)
                                    if lora_params else completion_train_flops(config, prompt_tokens, completion_tokens))
                                   + train_flops(vcfg, seqs)),
    }
    out["total"] = sum(out.values())
    return out


def make_value_model(policy_model: PreTrainedModel) -> PreTrainedModel:
    """The policy's architecture and weights with a fresh scalar head (AutoModelForSequenceClassification, 1 label).

    Same result as the standard `AutoModelForSequenceClassification.from_pretrained(<initial
    policy>, num_labels=1)`, built in memory (no save/load round trip of the weights).
    """
    cfg = copy.deepcopy(policy_model.config)
    cfg.num_labels = 1
    with torch.device(policy_model.device):
        value = AutoModelForSequenceClassification.from_config(cfg, dtype=policy_model.dtype)
    backbone = getattr(policy_model, policy_model.base_model_prefix).state_dict()
    getattr(value, value.base_model_prefix).load_state_dict(backbone)
    return value


def autocast_forward(model: nn.Module, device_type: str, dtype: torch.dtype) -> None:
    """Run `model`'s forward under torch.autocast(device_type, dtype) with fp32 outputs, as accelerate wraps a
    prepared model's forward under mixed precision (accelerate/accelerator.py Accelerator.prepare_model:
    convert_outputs_to_fp32(autocast(forward))). TRL's PPO samples rollouts with the unwrapped policy
    (trl/experimental/ppo/ppo_trainer.py PPOTrainer.train: batch_generation(unwrapped_model.policy, ...)), so
    without this the fp32 policy would decode in fp32 (half the speed of a memory-bound decode) and its rollout
    log-probs would not be computed the way the training passes recompute them."""
    from accelerate.utils import convert_outputs_to_fp32
    model.forward = convert_outputs_to_fp32(torch.autocast(device_type=device_type, dtype=dtype)(model.forward))


class _UpdateCost:
    """The cost of the update that just ended, from the sequences the reward model scored in it."""

    def __init__(self, reward_model: TaskRewardModel, config: PretrainedConfig, lora_params: int = 0):
        self.reward_model, self.config, self.lora_params = reward_model, config, lora_params

    def __call__(self, args, state) -> tuple[float, int, dict]:
        # every rank's sequences (rank order), so all ranks charge the same global update and stop together
        scored = gather_lists(self.reward_model.drain())
        prompt_tokens = [s["prompt_tokens"] for s in scored]
        completion_tokens = [s["completion_tokens"] for s in scored]
        flops = update_flops(self.config, prompt_tokens, completion_tokens, args.num_ppo_epochs, self.lora_params)
        padded = padded_pairs(prompt_tokens, completion_tokens)  # executed: padding + TRL's head at prompt positions
        executed = update_flops(self.config, *padded, args.num_ppo_epochs, self.lora_params)["total"] + (
            (1 + 3 * args.num_ppo_epochs) * 2 * head_params(self.config) * sum(padded[0]))
        rewards = [s["reward"] for s in scored]
        return flops["total"], len(scored), {
            "reward_mean": statistics.fmean(rewards), "reward_std": statistics.pstdev(rewards),
            "completion_tokens_mean": statistics.fmean(completion_tokens), "step_flops": flops["total"],
            "executed_flops": executed,
            **{f"flops_{k}": v for k, v in flops.items() if k != "total"}}


def price_before_stepping(trainer: PPOTrainer, callback: LedgerCallback) -> None:
    """Call the callback's on_pre_optimizer_step before each real optimizer step, as the HF Trainer loop does:
    TRL's PPO loop never calls it, and the stop rule needs the update priced before its weights move. The hook
    sits on the torch optimizer under accelerate's wrapper, which steps it only at a gradient-accumulation sync;
    the callback prices an update once, at its first step, and scales the rest of its steps by the same f."""
    inner = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
    inner.register_step_pre_hook(lambda optimizer, args, kwargs: callback.on_pre_optimizer_step(
        trainer.args, trainer.state, trainer.control, optimizer=optimizer))


def trl_metrics(logs: dict) -> dict:
    """TRL's PPO log of one update, under the names the step log uses."""
    names = {"kl": "objective/kl", "entropy": "objective/entropy", "policy_loss": "loss/policy_avg",
             "value_loss": "loss/value_avg", "approxkl": "policy/approxkl_avg", "clipfrac": "policy/clipfrac_avg",
             "lr": "lr"}
    return {k: logs.get(v) for k, v in names.items()}


class _PromptStream:
    """Batches of prompt ids, batch b a pure function of (seed, b): a seeded permutation per pass.

    Replaces PPOTrainer's shuffled DataLoader (whose order depends on the global RNG and on how
    many batches were drawn) so a resumed run can start at batch `start` of the same stream, and
    so iterating draws nothing from the global RNG that sampling uses.
    """

    def __init__(self, dataset, batch_size: int, collate, seed: int, start: int = 0, rank: int = 0, world: int = 1):
        self.dataset, self.batch_size, self.collate, self.seed, self.start = dataset, batch_size, collate, seed, start
        self.rank, self.world = rank, world  # data parallel: rank r takes the r-th slice of each global batch

    def __iter__(self):
        n, per_pass = len(self.dataset), len(self.dataset) // self.batch_size  # drop_last, as TRL's loader
        b = self.start
        while True:
            epoch, i = divmod(b, per_pass)
            perm = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed * 1_000_003 + epoch))
            idx = perm[i * self.batch_size:(i + 1) * self.batch_size].tolist()
            local = self.batch_size // self.world
            idx = idx[self.rank * local:(self.rank + 1) * local]
            yield self.collate([self.dataset[j] for j in idx])
            b += 1


# ---- the method ----
class PPO(ConfiguredMethod):
    """PPO via TRL's PPOTrainer; hyperparameters in PPOMethodConfig (built by Hydra)."""

    name = "ppo"
    label_keys = ("kl_coef", "learning_rate")
    trains = True
    config_class = PPOMethodConfig
    facts = PPO_FACTS  # methods/ppo_config.py: read there without torch (harness/core/method_facts.py light_facts)

    def train(self, policy: Policy, task: Task, ledger: Ledger, run_dir: Path) -> dict:
        c, run_dir = self.config, Path(run_dir)
        check_fsdp("ppo", c.peft, c.checkpoint_every)
        set_seed(c.seed)  # value-head init; numpy drives TRL's minibatch shuffles
        tok, model = policy.tokenizer, policy.model
        if tok.padding_side != "left":
            raise ValueError("PPO needs a left-padding tokenizer (TRL appends responses after the padded query); "
                             "load the policy with harness.core.policy.load_policy")
        rows = task.load("train").to_list()
        if len(rows) < c.prompts_per_step:
            raise ValueError(f"method.prompts_per_step={c.prompts_per_step} but the train split has {len(rows)} "
                             f"rows; lower it to at most {len(rows)}")
        prompt_ids = tok([policy.format(r["prompt"]) for r in rows], add_special_tokens=False)["input_ids"]
        tok = trainer_tokenizer(tok, prompt_ids)  # TRL finds padding by its id: one no prompt contains
        if c.prompts_per_step % (world_size() * c.num_mini_batches):
            raise DistributedError(f"method.prompts_per_step={c.prompts_per_step} cannot be split over {world_size()} "
                                   f"processes x num_mini_batches={c.num_mini_batches}; make it a multiple of their product")
        peft_config = lora_config(c.lora, model) if c.peft else None
        lora_params = adapter_parameters(model, c.lora) if c.peft else 0
        self._check_fits(model.config, prompt_ids, ledger, lora_params)
        response, longest = c.response_length or task.max_new_tokens, max(map(len, prompt_ids))
        if model.device.type == "cuda":  # run_one checked it before the load (preflight); kept for direct callers
            self._check_gpus(model.config, torch.cuda.get_device_properties(model.device).total_memory,
                             longest + response, longest, str(model.dtype).removeprefix("torch."))
        # the planner's micro-batch (ppo_config.train_micro_batch), in the dtype the trainer computes in: fp32 on
        # the CPU (no autocast), the model's own under autocast on a GPU; read before the upcast below
        micro = train_micro_batch(c, model.config, world_size(), longest + response, response,
                                  4 if model.device.type == "cpu" else dtype_bytes(model.dtype))
        reward_model = TaskRewardModel(task, tok, rows, prompt_ids)
        callback = LedgerCallback(ledger, _UpdateCost(reward_model, model.config, lora_params), trl_metrics,
                                  checkpoint_every=c.checkpoint_every, raise_when_spent=True)
        dataset = datasets.Dataset.from_dict({"input_ids": prompt_ids})
        checkpoint = latest_dir(run_dir / CKPT, "state.json")
        done = json.loads((checkpoint / "state.json").read_text())["updates"] if checkpoint else 0
        if done >= c.max_updates:
            raise ValueError(f"{checkpoint} already holds method.max_updates={c.max_updates} updates; "
                             "raise max_updates or use a fresh run_dir")
        # Precision: the policy and the value model train in fp32 (an fp32 master: AdamW's steps at lr 1e-6 are
        # far below half a bf16 ulp of most weights and would round away), computing under autocast in the model's
        # dtype on a GPU; the reference stays in the model's dtype. LoRA trains fp32 adapters on the frozen base.
        model_dtype, on_cpu = model.dtype, model.device.type == "cpu"
        ref_model = None if c.peft else create_reference_model(model)  # a frozen copy, before the upcast
        if not c.peft:
            model.float()
        autocast = None if on_cpu else {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(model_dtype)
        if autocast:  # TRL samples rollouts with the unwrapped policy, outside accelerate's autocast
            autocast_forward(model, model.device.type, model_dtype)
        with tensorboard_dir(run_dir):
            trainer = PPOTrainer(
                args=self._trl_config(ledger, run_dir, response, done, on_cpu=on_cpu, autocast=autocast,
                                      micro=micro),
                processing_class=tok, model=model, ref_model=ref_model,
                reward_model=reward_model, value_model=make_value_model(model), train_dataset=dataset,
                data_collator=DataCollatorWithPadding(tok), callbacks=[callback], peft_config=peft_config)
        wrapper = trainer.accelerator.unwrap_model(trainer.model)
        parameters = {"policy": trained_parameters(wrapper.policy), "value": trained_parameters(wrapper.value_model),
                      "all": trained_parameters(wrapper)}
        if c.peft and parameters["policy"]["trainable"] != lora_params:
            raise RuntimeError(f"LoRA: TRL's policy trains {parameters['policy']['trainable']} parameters but the "
                               f"cost model priced {lora_params} adapter parameters; the FLOPs would be wrong")
        trainer.remove_callback(PrinterCallback)  # it prints TRL's metrics dict every update; ledger prints one line
        trainer.dataloader = _PromptStream(dataset, c.prompts_per_step, trainer.data_collator, c.seed, start=done,
                                           rank=rank(), world=world_size())
        callback.checkpoint = lambda control, state: self._save_checkpoint(run_dir, trainer, ledger)
        price_before_stepping(trainer, callback)
        if checkpoint:
            self._load_checkpoint(checkpoint, trainer, ledger)  # last: it restores the RNG states
        try:
            trainer.train()
        except BudgetSpent:
            pass
        ledger.close()
        trained = trained_model(trainer.accelerator, trainer.model, part="policy")  # whole on rank 0, also under FSDP
        trained_dtype = str(next(trained.parameters()).dtype).removeprefix("torch.")
        if "forward" in vars(trained):
            del trained.forward  # the class's own forward again (autocast_forward set an instance attribute)
        # LoRA: fold the adapters into the weights, so evaluation runs (and costs) the plain architecture;
        # evaluation runs in the model's dtype, as ES's fp32 master is cast into its working weights
        policy.model = (trained.merge_and_unload() if c.peft else trained).to(model_dtype).eval()
        return {"steps": ledger.steps, "resumed_from": done, "flops": ledger.flops, "samples": ledger.samples,
                "parameters": parameters, "peft": c.peft, "world_size": world_size(), "trained_dtype": trained_dtype,
                "wall_s": ledger.wall_s, "last_reward_mean": ledger.history[-1].reward_mean if ledger.history else None,
                "config": asdict(c)}

    def _trl_config(self, ledger: Ledger, run_dir: Path, response_length: int, done: int,
                    on_cpu: bool = False, autocast: str | None = None, micro: int | None = None) -> PPOConfig:
        """TRL's PPOConfig; `micro`: sequences per training forward/backward (train() passes ppo_config's
        train_micro_batch; None: method.train_micro_batch or the whole minibatch)."""
        c = self.config
        local = c.prompts_per_step // world_size()  # TRL: local batch = per_device x gradient_accumulation_steps
        # several minibatches: TRL slices each whole out of the rank's batch, and accumulation would span them
        micro = (micro or c.train_micro_batch or local) if c.num_mini_batches == 1 else local
        if local % micro:
            raise ValueError(f"method.train_micro_batch={micro} must divide the {local} prompts each of "
                             f"{world_size()} processes takes per update")
        log.info("PPO: %d prompts per process per minibatch in micro-batches of %d (method.train_micro_batch=%s)",
                 local // c.num_mini_batches, micro, c.train_micro_batch)
        return PPOConfig(
            output_dir=str(run_dir / "ppo"), learning_rate=c.learning_rate, kl_coef=c.kl_coef,
            num_ppo_epochs=c.num_ppo_epochs, num_mini_batches=c.num_mini_batches,
            per_device_train_batch_size=micro, gradient_accumulation_steps=local // micro,
            total_episodes=(c.max_updates - done) * c.prompts_per_step, response_length=response_length,
            temperature=c.temperature, stop_token="eos", seed=c.seed,
            local_rollout_forward_batch_size=c.rollout_batch_size, lr_scheduler_type="constant",
            # accelerate's autocast of the prepared policy + value model (bf16 | fp16 | None: fp32 compute)
            bf16=autocast == "bf16", fp16=autocast == "fp16", report_to=report_to(ledger), save_strategy="no",
            use_cpu=on_cpu,  # also what makes accelerate take a torchrun launch on CPU as MULTI_CPU (gloo)
            num_sample_generations=0, disable_tqdm=True,
        )

    # ---- checkpoints at update boundaries (TRL's PPOTrainer cannot resume; see the module docstring) ----
    def _save_checkpoint(self, run_dir: Path, trainer: PPOTrainer, ledger: Ledger) -> None:
        if not is_main_process():  # rank 0 writes; the ranks hold the same weights (DDP)
            return
        wrapper = trainer.accelerator.unwrap_model(trainer.model)
        state = {"updates": ledger.steps, "config": asdict(self.config), "ledger": ledger.state_dict()}

        def write(tmp: Path) -> None:
            torch.save({"policy": wrapper.policy.state_dict(), "value": wrapper.value_model.state_dict(),
                        "optimizer": trainer.optimizer.state_dict(), "scheduler": trainer.lr_scheduler.state_dict(),
                        "rng": portable(rng_state())}, tmp / "trainer.pt")
            fsync_file(tmp / "trainer.pt")
            write_text_atomic(tmp / "state.json", json.dumps(state) + "\n")  # last: marks it complete

        save_dir_atomic(run_dir / CKPT, write)

    def _load_checkpoint(self, path: Path, trainer: PPOTrainer, ledger: Ledger) -> None:
        state = json.loads((path / "state.json").read_text())
        check_resumable(path, asdict(self.config), state["config"], ("max_updates", "checkpoint_every", "rollout_batch_size"), "PPO")
        try:  # weights_only: a crafted run folder must not run code on resume; RNG states live on CPU
            saved = torch.load(path / "trainer.pt", map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - an older (pickled) or foreign checkpoint: refuse, never unpickle it
            raise UserError(f"{path / 'trainer.pt'} cannot be read as weights only ({type(e).__name__}); it was "
                            "written by older code or not by esbench: remove that folder to restart the run") from None
        wrapper = trainer.accelerator.unwrap_model(trainer.model)
        wrapper.policy.load_state_dict(saved["policy"])
        wrapper.value_model.load_state_dict(saved["value"])
        trainer.optimizer.load_state_dict(saved["optimizer"])
        trainer.lr_scheduler.load_state_dict(saved["scheduler"])
        ledger.load_state_dict(state["ledger"])
        set_rng_state(from_portable(saved["rng"]))
        print(f"ppo: resumed from {path} at update {state['updates']}", flush=True)

    def preflight(self, prompter: Policy, task: Task, dtype: str) -> None:
        """train()'s launch-size check, before the weights load: the model's shape from its config alone
        (harness/core/model_shapes.py load_shape), the longest training prompt as train() tokenises it."""
        if prompter.device != "cuda":
            return
        prompts = [prompter.format(r) for r in task.load("train")["prompt"]]
        longest = max(map(len, prompter.tokenizer(prompts, add_special_tokens=False)["input_ids"]))
        response = self.config.response_length or task.max_new_tokens
        gpu_bytes = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
        self._check_gpus(load_shape(resolve_model_path(prompter.name)), gpu_bytes,
                         longest + response, longest, dtype)

    def _check_gpus(self, shape, gpu_bytes: int, tokens: int, prompt_tokens: int | None = None,
                    dtype: str = "bfloat16") -> None:
        """Refuse in one line a launch smaller than the planner says this run needs (harness/core/distributed.py
        check_gpus_fit: e.g. a 7B PPO in one process, as a Slurm job of the submitit launcher starts it); with the
        longest prompt, priced at the micro-batch train() runs (the response's logits size it)."""
        parts, gpus, note = ppo_memory(self.config, shape, tokens, gpu_gb=gpu_bytes / 1e9, headroom=0.9,
                                       dtype=dtype, prompt_tokens=prompt_tokens)
        check_gpus_fit(f"method=ppo on {getattr(shape, 'name_or_path', '') or 'this model'}", parts, gpus, note,
                       gpu_bytes)

    def _check_fits(self, config: PretrainedConfig, prompt_ids: list[list[int]], ledger: Ledger,
                    lora_params: int = 0) -> None:
        """Fail before any work when even the cheapest possible update (shortest prompts, 1 token each) exceeds the budget.

        A lower bound, unlike ES's worst case: an update's cost depends on sampled completion
        lengths, and a budget of about one update must still run exactly one.
        """
        n = self.config.prompts_per_step
        if ledger.kind == "samples":
            cost = n
        else:
            shortest = min(len(ids) for ids in prompt_ids)
            cost = update_flops(config, [shortest] * n, [1] * n, self.config.num_ppo_epochs, lora_params)["total"]
        ledger.check_step_fits(cost, "PPO update")
