"""Evaluate a policy on one split of a task: greedy accuracy, pass@k, maj@k, mean reward, with CIs.

Greedy decoding gives the ES paper's accuracy metric. Then `n_samples` completions per prompt are
sampled (temperature/top_p from conf/eval): pass@k uses the unbiased estimator of Chen et al. 2021,
maj@k the majority vote over extracted answers (harness/evaluation/metrics.py). Every metric is a mean over
prompts with a bootstrap 95% CI over prompts.

    python -m harness method=base          # evaluates the default zoo model on Countdown
"""
from __future__ import annotations

from collections.abc import Mapping

import functools
import logging
import time
from dataclasses import dataclass, field, replace

import numpy as np

from harness.core.errors import UserError
from harness.core.flops import generation_flops
from harness.evaluation.grading import judge_all
from harness.evaluation.kl import per_token_kl
from harness.evaluation.metrics import attach_per_prompt, maj_at_k, pass_at_k, summarize
from harness.core.policy import Generation, Policy, generate

log = logging.getLogger(__name__)
CURVE_KS = (1, 2, 4, 8, 16, 32, 64, 128)


class EvalConfigError(UserError, ValueError):
    """An evaluation setting is inconsistent; the message says which key to change."""


@dataclass
class EvalConfig:
    """Evaluation settings (conf/eval/*.yaml).

    Args:
        n_samples: sampled completions per prompt; must be >= every k in pass_ks and maj_ks.
        temperature, top_p: sampling parameters for the sampled completions.
        pass_ks, maj_ks: the k of the pass@k and maj@k columns.
        greedy: also decode greedily (the ES paper's accuracy).
        n_prompts: evaluate at most this many prompts (None: the task's n_eval).
        max_new_tokens: None = the task's max_new_tokens.
        batch_size: sequences per generate call.
        n_boot: bootstrap resamples for the 95% CIs.
        maj_subsets: random k-subsets averaged for maj@k when n_samples > k.
        n_examples: completions kept in the run record.
        seed: sampling, bootstrap and subset seed.
        kl_to_base: also report `kl_to_base`, the mean per-token KL (k3) of the policy from the
            untrained model on the sampled completions (harness/evaluation/kl.py).
        tasks: held-out tasks (conf/task option names) also evaluated on their test split after
            training, so forgetting is measured, not inferred.
        task_overrides: settings of a held-out task (or of analysis.entropy_task) that differ from its
            YAML, by task name, e.g. {gpqa: {source: hub}} to read GPQA from the hub instead of its fixture.
        validation_greedy_only: on the validation split (used only to select RL configurations
            by greedy accuracy), skip the sampled completions to save time.
        every_flops_fraction: learning curves: evaluate validation greedy accuracy each time training
            crosses a multiple of this fraction of the budget (e.g. 0.1); None: off. Its cost is
            recorded in the run record, never charged to the budget.
        curve_prompts: validation prompts per learning-curve point (a fixed subset: the first N).
    """

    n_samples: int = 32
    temperature: float = 1.0
    top_p: float = 1.0
    pass_ks: list[int] = field(default_factory=lambda: [1, 16, 32])
    maj_ks: list[int] = field(default_factory=lambda: [16, 32])
    greedy: bool = True
    n_prompts: int | None = None
    max_new_tokens: int | None = None
    batch_size: int = 512
    n_boot: int = 1000
    maj_subsets: int = 200
    n_examples: int = 8
    seed: int = 1234
    validation_greedy_only: bool = True
    kl_to_base: bool = False
    tasks: list[str] = field(default_factory=list)
    task_overrides: dict = field(default_factory=dict)
    every_flops_fraction: float | None = None
    curve_prompts: int = 100

    def for_curve(self) -> "EvalConfig":
        """The settings of one learning-curve point: greedy only, on the first `curve_prompts` prompts."""
        return replace(self, greedy=True, n_samples=0, pass_ks=[], maj_ks=[], n_prompts=self.curve_prompts,
                       n_examples=0, kl_to_base=False)

    def for_split(self, split: str) -> "EvalConfig":
        """The settings used on `split` (validation may be greedy-only)."""
        if split == "validation" and self.validation_greedy_only:
            return replace(self, greedy=True, n_samples=0, pass_ks=[], maj_ks=[])
        return self

    def __post_init__(self):
        big = max([*self.pass_ks, *self.maj_ks], default=0)
        if self.n_samples < big:
            raise EvalConfigError(f"eval.n_samples={self.n_samples} is smaller than the largest k={big}; "
                                  f"set eval.n_samples>={big} or drop that k from eval.pass_ks/eval.maj_ks")
        f = self.every_flops_fraction
        if f is not None and not (isinstance(f, (int, float)) and 0 < f <= 1):
            raise EvalConfigError(f"eval.every_flops_fraction={f!r} must be in (0, 1], e.g. 0.1 (ten curve points); "
                                  "null turns learning curves off")
        if not isinstance(self.task_overrides, Mapping) or not all(
                isinstance(v, Mapping) for v in self.task_overrides.values()):
            raise EvalConfigError(f"eval.task_overrides={self.task_overrides!r} must map a task name to its settings, "
                                  "e.g. {gpqa: {source: hub}}")
        if self.n_samples < 0 or (self.n_samples == 0 and not self.greedy):
            raise EvalConfigError(f"eval.n_samples={self.n_samples} with eval.greedy={self.greedy} evaluates nothing; "
                                  "set eval.greedy=true or eval.n_samples>=1")


@dataclass
class EvalResult:
    metrics: dict[str, dict]          # metric -> {mean, ci_low, ci_high, n, prompts, per_prompt | correct+n_samples}
    pass_curve: dict[int, float]      # k -> mean pass@k, for the pass@k plot
    examples: list[dict]
    flops: float
    wall_s: float


def evaluate(policy: Policy, task, split: str, cfg: EvalConfig, reference=None, engine=None) -> EvalResult:
    """Score `policy` on `split` of `task` (see module docstring).

    Args:
        policy: the model to evaluate.
        task: a Task.
        split: "test" or "validation".
        cfg: evaluation settings.
        reference: the untrained model; with it, `kl_to_base` is measured on the sampled completions.
        engine: generate with this engine (harness/engines, e.g. vLLM) instead of HF generate on
            `policy`; token counts, and so FLOPs, are counted the same way either way.
    """
    start = time.time()
    gen = engine.generate if engine is not None else functools.partial(generate, policy)
    rows = task.load(split)
    limit = cfg.n_prompts or getattr(task, "n_eval", None)
    if limit:
        rows = rows.select(range(min(limit, len(rows))))
    cols = {c: rows[c] for c in rows.column_names}
    prompts = cols["prompt"]
    max_new = cfg.max_new_tokens or task.max_new_tokens
    per_prompt: dict[str, list[float]] = {}
    flops, examples = 0.0, []
    was_training = policy.model.training
    policy.model.eval()
    if cfg.greedy:
        g = gen(prompts, greedy=True, max_new_tokens=max_new, batch_size=cfg.batch_size,
                progress=f"{split}: greedy")
        flops += _flops(policy, g)
        texts = [t[0] for t in g.texts]
        greedy_ok, _ = judge_all(task, texts, [_row(cols, i) for i in range(len(texts))])
        per_prompt["greedy_acc"] = [float(ok) for ok in greedy_ok]
        per_prompt["greedy_reward"] = ([float(ok) for ok in greedy_ok] if getattr(task, "reward_is_correct", False)
                                       else task.reward(texts, **_others(cols)))
        examples += [{"prompt": prompts[i], "completion": texts[i], "correct": bool(per_prompt["greedy_acc"][i]),
                      "decoding": "greedy"} for i in range(min(cfg.n_examples, len(texts)))]
    curve, counts = {}, None
    if cfg.n_samples:
        s = gen(prompts, n=cfg.n_samples, greedy=False, temperature=cfg.temperature, top_p=cfg.top_p,
                max_new_tokens=max_new, batch_size=cfg.batch_size, seed=cfg.seed,
                progress=f"{split}: {cfg.n_samples} samples each")
        flops += _flops(policy, s)
        n = cfg.n_samples
        flat = [t for ts in s.texts for t in ts]
        # one bounded reading per completion: maj@k votes over the answers the judge scored
        flat_ok, flat_answers = judge_all(task, flat, [_row(cols, i) for i in range(len(prompts)) for _ in s.texts[i]])
        starts = np.cumsum([0] + [len(ts) for ts in s.texts])
        correct = [flat_ok[starts[i]:starts[i + 1]] for i in range(len(prompts))]
        if getattr(task, "reward_is_correct", False):  # GSM8K, MATH-500: not graded a second time
            rewards = np.array(flat_ok, dtype=float)
        else:
            rewards = np.array(task.reward(flat, **{k: [v for v in vs for _ in range(n)] for k, vs in _others(cols).items()}))
        per_prompt["mean_reward"] = rewards.reshape(len(prompts), n).mean(1).tolist()
        counts = [sum(c) for c in correct]
        for k in cfg.pass_ks:
            per_prompt[f"pass@{k}"] = [pass_at_k(n, c, k) for c in counts]
        answers = [flat_answers[starts[i]:starts[i + 1]] for i in range(len(prompts))]
        for k in cfg.maj_ks:
            per_prompt[f"maj@{k}"] = [maj_at_k(a, c, k, n_subsets=cfg.maj_subsets, seed=cfg.seed)
                                      for a, c in zip(answers, correct)]
        curve = {k: float(np.mean([pass_at_k(n, c, k) for c in counts])) for k in CURVE_KS if k <= n}
        if reference is not None:
            per_prompt["kl_to_base"] = _kl_per_prompt(policy, reference, prompts, s)
        examples += [{"prompt": prompts[i], "completion": s.texts[i][0], "correct": bool(correct[i][0]),
                      "decoding": f"T={cfg.temperature}"} for i in range(min(cfg.n_examples, len(prompts)))]
    policy.model.train(was_training)
    metrics = attach_per_prompt(summarize(per_prompt, n_boot=cfg.n_boot, seed=cfg.seed), per_prompt, prompts,
                                counts, cfg.n_samples)
    return EvalResult(metrics, curve, examples, flops, time.time() - start)


def _kl_per_prompt(policy: Policy, reference, prompts: list[str], s: Generation) -> list[float]:
    """Mean k3 KL from the reference over each prompt's sampled completions."""
    enc = policy.tokenizer([policy.format(p) for p in prompts], add_special_tokens=False)["input_ids"]
    n = len(s.completion_ids[0])
    kl = per_token_kl(policy.model, reference, [p for p in enc for _ in range(n)],
                      [c for cs in s.completion_ids for c in cs], policy.tokenizer.pad_token_id)
    return [float(np.mean(kl[i * n:(i + 1) * n])) for i in range(len(prompts))]


def _flops(policy: Policy, g: Generation) -> float:
    prompt = [p for p, cs in zip(g.prompt_tokens, g.completion_tokens) for _ in cs]
    return generation_flops(policy.model.config, prompt, [c for cs in g.completion_tokens for c in cs])


def _others(cols: dict) -> dict:
    return {k: v for k, v in cols.items() if k != "prompt"}


def _row(cols: dict, i: int) -> dict:
    return {k: v[i] for k, v in cols.items() if k != "prompt"}
