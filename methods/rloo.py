"""RLOO: TRL's `RLOOTrainer` on the task's reward, stopped by the compute ledger.

    python -m harness method=rloo method.beta=1e-3 method.learning_rate=1e-5
    python -m pytest tests/test_trl_online.py -q

RLOO (REINFORCE Leave-One-Out; Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE-Style Optimization for
Learning from Human Feedback in LLMs", arXiv 2402.14740): k completions per prompt, each one's baseline the mean
reward of the other k - 1, the whole sequence one action. One optimizer step = `prompts_per_step` training prompts
x `num_generations` (k) sampled completions, scored by `task.reward`, one update per `num_iterations`.

Built on the TRL online-trainer adapter (methods/trl_online.py), as GRPO is: the same prompts (through
`policy.format`, TRL's ids equal evaluation's), the same token recorder and cross-check against TRL's
num_input_tokens_seen, budgets (flops, samples, updates), checkpoint/resume (run_dir/trl, TRL's
resume_from_checkpoint, the ledger's state beside each checkpoint; `checkpoint_every` a multiple of
`num_iterations`), fp32 master, reference from run_dir/init_model, LoRA, data parallelism and summary.

Priced by RLOOTrainer's own forward-pass schedule (RLOO_SCHEDULE, checked against FlopCounterMode in
tests/test_trl_online.py), which differs from GRPO's: TRL 1.12's RLOOTrainer computes the sampling policy's
log-probs every time it generates (trl/trainer/rloo_trainer.py `_generate_and_score_completions`: `old_logps` for
the clipped sequence ratio, and the k1 KL penalty reads them), whatever num_iterations, where GRPOTrainer skips
them at num_iterations = 1. So each step pays generation + 3 x the scoring forward (update) + 1 old-log-prob
forward + 1 reference forward when beta > 0: GRPO's schedule would under-charge every RLOO step by one forward.

TRL 1.12 RLOO as configured here (conf/method/rloo.yaml names the RLOOConfig option each key sets):
- the KL enters the reward, not the loss: each sequence's reward less beta x sum over its tokens of
  log pi_old - log pi_ref (k1, the paper's), before the leave-one-out baseline; beta 1e-3 (the harness's grid
  corner, as GRPO's and PPO's; TRL's default 0.05);
- the loss: a PPO-style clipped ratio of whole-sequence probabilities (summed token log-probs), epsilon 0.2, mean
  over sequences; with num_iterations = 1 the ratio is 1 and the update is the paper's REINFORCE with the
  leave-one-out baseline;
- advantages not normalised over the batch (normalize_advantages False, TRL's default and the paper's);
- a constant learning rate (the ledger decides when training ends), temperature 1.0;
- generation with the policy itself (HF generate): engine=vllm serves evaluation only, as for PPO.

Departures, as GRPO's (methods/grpo.py): compute matched in FLOPs from real token counts, padding and decoding
past EOS not charged (recorded as executed FLOPs); max_completion_length defaults to the task's max_new_tokens;
per-step batch shape prompts_per_step x num_generations is a harness choice (8 x 8, as GRPO's; the paper uses k = 2
and 4).
"""
from __future__ import annotations

import logging
from pathlib import Path

from trl import RLOOConfig, RLOOTrainer

from harness.core.budget import Ledger
from harness.core.policy import Policy
from methods.rloo_config import RLOO_FACTS, RLOOMethodConfig  # noqa: F401 - light: methods/rloo_config.py
from methods.trl_online import ForwardSchedule, TRLOnlineMethod, declare_schedule

log = logging.getLogger(__name__)

# RLOOTrainer's forward-pass schedule (methods/trl_online.py): old log-probs at every generation, the reference
# when beta != 0 (TRL loads no reference model at beta 0)
RLOO_SCHEDULE = declare_schedule(RLOOTrainer, ForwardSchedule(
    generation=True, update=True, reference=lambda args: args.beta != 0.0, old_logprobs=True))


class RLOO(TRLOnlineMethod):
    """RLOO through TRL (see the module docstring). Keyword arguments: RLOOMethodConfig's fields."""

    name = "rloo"
    label_keys = ("beta", "learning_rate")
    trains = True
    config_class = RLOOMethodConfig
    facts = RLOO_FACTS  # methods/rloo_config.py: read there without torch (harness/core/method_facts.py light_facts)
    trainer_class = RLOOTrainer
    title = "RLOO"

    def _trl_args(self, policy: Policy, ledger: Ledger, run_dir: Path, max_completion_length: int,
                  longest_prompt: int = 0, lora_params: int = 0) -> RLOOConfig:
        cfg = self.config
        common = self._common_trl_args(policy, ledger, run_dir, max_completion_length, longest_prompt, RLOOConfig)
        return RLOOConfig(**common, epsilon_high=cfg.epsilon_high, normalize_advantages=cfg.normalize_advantages,
                          mask_truncated_completions=cfg.mask_truncated_completions)
