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
- Compute is matched in FLOPs (or samples) through the ledger, which stops training at the first
  update boundary at or past the budget; `max_updates` is only an upper bound.
- Constant learning rate (TRL defaults to linear decay over `total_episodes`): the ledger, not a
  preset horizon, decides when training ends, so a decay schedule would have nothing to decay to.
- temperature 1.0 for rollouts (TRL's PPO default is 0.7): on-policy sampling, as in GRPO.
- Generation stops at EOS (`stop_token="eos"`); tokens after EOS are padding and score nothing.
- kl_coef (beta) 1e-3 and learning rate 1e-6 are the low corners of the paper's per-model grid
  (beta in {1e-3, 5e-3}, lr in {1e-6, 1e-5}); sweep them as the paper did.

    python -m harness method=ppo                 # train with PPO
    python -m pytest tests/test_ppo.py -q        # tests
"""
from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace

import datasets
import torch
from torch import nn
from transformers import AutoModelForSequenceClassification, PretrainedConfig, PreTrainedModel, TrainerCallback, set_seed
from transformers.trainer_callback import PrinterCallback
from trl.experimental.ppo import PPOConfig, PPOTrainer
from trl.experimental.utils import create_reference_model

from harness.budget import Ledger
from harness.flops import forward_flops, generation_flops, train_flops
from harness.policy import Policy
from methods.base import log_step
from tasks.base import Task


@dataclass
class PPOMethodConfig:
    """PPO hyperparameters (the rest are TRL's PPOConfig defaults: cliprange 0.2, vf_coef 0.1, gamma 1, lam 0.95)."""

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
    seed: int = field(default=0, metadata={"help": "seeds value-head init, prompt order and sampling"})

    def __post_init__(self):
        for name in ("num_ppo_epochs", "num_mini_batches", "prompts_per_step", "max_updates", "rollout_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"method.{name}={getattr(self, name)} must be >= 1")
        if self.prompts_per_step % self.num_mini_batches:
            raise ValueError(f"method.prompts_per_step={self.prompts_per_step} is not a multiple of "
                             f"method.num_mini_batches={self.num_mini_batches}; make it one")
        if self.response_length is not None and self.response_length < 1:
            raise ValueError(f"method.response_length={self.response_length} must be >= 1 (or null for the task's)")
        if self.kl_coef < 0 or not self.learning_rate > 0 or not self.temperature > 0:
            raise ValueError(f"need method.kl_coef >= 0, learning_rate > 0 and temperature > 0; got "
                             f"{self.kl_coef}, {self.learning_rate}, {self.temperature}")


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
    special tokens (as harness.policy.generate does), so the score is exactly `task.reward`'s.

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


# ---- cost model of one update ----
def value_config(config: PretrainedConfig) -> PretrainedConfig:
    """The value model's cost shape: the policy's, with a 1-output head instead of the vocab-sized LM head."""
    cfg = copy.deepcopy(config)
    cfg.vocab_size = 1
    return cfg


def update_flops(config: PretrainedConfig, prompt_tokens: list[int], completion_tokens: list[int],
                 num_ppo_epochs: int) -> dict[str, float]:
    """FLOPs of one PPO update from the real token counts of its sequences.

    Counts exactly what TRL's loop runs: generation (prefill + each decoded token; the rollout
    log-probs come from the generation scores, no extra policy forward), one reference-policy
    forward and one value forward over prompt + completion, the reward (programmatic: 0), then
    `num_ppo_epochs` passes in which every sequence goes once (in its minibatch) through policy
    and value model, forward + backward (3 x forward). Padding positions are not counted.

    Args:
        config: the policy's model config.
        prompt_tokens: prompt length per sequence.
        completion_tokens: completion length per sequence, up to and including EOS.
        num_ppo_epochs: passes over the batch.

    Returns:
        FLOPs per component and their "total".
    """
    seqs = [p + c for p, c in zip(prompt_tokens, completion_tokens, strict=True)]
    vcfg = value_config(config)
    out = {
        "generation": generation_flops(config, prompt_tokens, completion_tokens),
        "reference": sum(forward_flops(config, s) for s in seqs),
        "value": sum(forward_flops(vcfg, s) for s in seqs),
        "reward": 0.0,
        "train": num_ppo_epochs * (train_flops(config, seqs) + train_flops(vcfg, seqs)),
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


class _BudgetSpent(Exception):
    """Raised at an update boundary once the ledger is exhausted (see _LedgerCallback)."""


class _LedgerCallback(TrainerCallback):
    """Charges the ledger after every PPO update, logs it, and stops training when the budget is spent.

    TRL 1.12's `PPOTrainer.train()` calls `on_step_end` after each update but never reads
    `control.should_training_stop` (its loop runs a precomputed number of updates). Rather than
    copying its 300-line loop, the callback raises `_BudgetSpent` from `on_step_end`, which
    `PPO.train` catches: the update (optimizer steps included) is complete at that point, and the
    rest of the loop body only frees tensors, saves (disabled) and prints samples (disabled).
    """

    def __init__(self, reward_model: TaskRewardModel, ledger: Ledger, config: PretrainedConfig, run_dir: Path):
        self.reward_model, self.ledger, self.config, self.run_dir = reward_model, ledger, config, run_dir
        self.updates, self.last, self.t0 = 0, {}, time.perf_counter()

    def on_train_begin(self, args, state, control, **kwargs):
        self.t0 = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        scored = self.reward_model.drain()
        prompt_tokens = [s["prompt_tokens"] for s in scored]
        completion_tokens = [s["completion_tokens"] for s in scored]
        flops = update_flops(self.config, prompt_tokens, completion_tokens, args.num_ppo_epochs)
        self.updates += 1
        self.ledger.charge(flops["total"], len(scored), method="ppo", update=self.updates)
        logs, now = state.log_history[-1], time.perf_counter()
        rewards = [s["reward"] for s in scored]
        self.last = {
            "update": self.updates, "reward_mean": sum(rewards) / len(rewards), "kl": logs["objective/kl"],
            "entropy": logs["objective/entropy"], "policy_loss": logs["loss/policy_avg"],
            "value_loss": logs["loss/value_avg"], "approxkl": logs["policy/approxkl_avg"],
            "clipfrac": logs["policy/clipfrac_avg"], "lr": logs["lr"],
            "completion_tokens_mean": sum(completion_tokens) / len(completion_tokens),
            "step_flops": flops["total"], **{f"flops_{k}": v for k, v in flops.items() if k != "total"},
            "flops": self.ledger.flops, "samples": self.ledger.samples, "wall_s": now - self.t0,
        }
        self.t0 = now
        log_step(self.run_dir, self.last)
        print(f"ppo upd {self.updates:4d} reward {self.last['reward_mean']:.4f} kl {self.last['kl']:.4f} "
              f"pg {self.last['policy_loss']:.4f} vf {self.last['value_loss']:.4f} "
              f"len {self.last['completion_tokens_mean']:.1f} flops {self.ledger.flops:.3g} "
              f"({self.ledger.fraction:.0%}) {self.last['wall_s']:.2f}s", flush=True)
        if self.ledger.exhausted:
            control.should_training_stop = True  # for the record; TRL does not read it (see class docstring)
            raise _BudgetSpent


# ---- the method ----
class PPO:
    """PPO via TRL's PPOTrainer; hyperparameters in PPOMethodConfig (built by Hydra)."""

    name = "ppo"
    label_keys = ("kl_coef", "learning_rate")  # the hyperparameters a table label shows
    trains = True

    def __init__(self, **kwargs):
        self.config = PPOMethodConfig(**kwargs)

    def train(self, policy: Policy, task: Task, ledger: Ledger, run_dir: Path) -> dict:
        c, run_dir = self.config, Path(run_dir)
        set_seed(c.seed)  # value-head init; numpy drives TRL's minibatch shuffles
        tok, model = policy.tokenizer, policy.model
        if tok.padding_side != "left":
            raise ValueError("PPO needs a left-padding tokenizer (TRL appends responses after the padded query); "
                             "load the policy with harness.policy.load_policy")
        rows = task.load("train").to_list()
        if len(rows) < c.prompts_per_step:
            raise ValueError(f"method.prompts_per_step={c.prompts_per_step} but the train split has {len(rows)} "
                             f"rows; lower it to at most {len(rows)}")
        prompt_ids = tok([policy.format(r["prompt"]) for r in rows], add_special_tokens=False)["input_ids"]
        self._check_fits(model.config, prompt_ids, ledger)
        reward_model = TaskRewardModel(task, tok, rows, prompt_ids)
        callback = _LedgerCallback(reward_model, ledger, model.config, run_dir)
        trainer = PPOTrainer(
            args=self._trl_config(run_dir, c.response_length or task.max_new_tokens),
            processing_class=tok, model=model, ref_model=create_reference_model(model),
            reward_model=reward_model, value_model=make_value_model(model),
            train_dataset=datasets.Dataset.from_dict({"input_ids": prompt_ids}), callbacks=[callback],
        )
        trainer.remove_callback(PrinterCallback)  # it prints TRL's metrics dict every update; we print one line
        try:
            trainer.train()
        except _BudgetSpent:
            pass
        policy.model = trainer.accelerator.unwrap_model(trainer.model).policy.eval()
        return {"steps": callback.updates, "last_reward_mean": callback.last.get("reward_mean"),
                "config": asdict(c)}

    def _trl_config(self, run_dir: Path, response_length: int) -> PPOConfig:
        c = self.config
        return PPOConfig(
            output_dir=str(run_dir / "ppo"), learning_rate=c.learning_rate, kl_coef=c.kl_coef,
            num_ppo_epochs=c.num_ppo_epochs, num_mini_batches=c.num_mini_batches,
            per_device_train_batch_size=c.prompts_per_step, gradient_accumulation_steps=1,
            total_episodes=c.max_updates * c.prompts_per_step, response_length=response_length,
            temperature=c.temperature, stop_token="eos", seed=c.seed,
            local_rollout_forward_batch_size=c.rollout_batch_size, lr_scheduler_type="constant",
            bf16=False, fp16=False, report_to="none", save_strategy="no",
            num_sample_generations=0, disable_tqdm=True,
        )

    def _check_fits(self, config: PretrainedConfig, prompt_ids: list[list[int]], ledger: Ledger) -> None:
        """Fail before any work when even the cheapest possible update (shortest prompts, 1 token each) exceeds the budget.

        A lower bound, unlike ES's worst case: an update's cost depends on sampled completion
        lengths, and a budget of about one update must still run exactly one.
        """
        n = self.config.prompts_per_step
        if ledger.kind == "samples":
            cost = n
        else:
            shortest = min(len(ids) for ids in prompt_ids)
            cost = update_flops(config, [shortest] * n, [1] * n, self.config.num_ppo_epochs)["total"]
        ledger.check_step_fits(cost, "PPO update")
