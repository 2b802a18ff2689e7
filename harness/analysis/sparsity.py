"""Functional sparsity: zero every update coordinate with |delta| below a threshold, re-evaluate on test.

Zeroing coordinate j means setting it back to theta_0[j]; keeping it means theta_final[j]. Both come
from stored weights (harness/analysis/update.py), so threshold 0 is exactly the trained model and
threshold inf exactly the base model.

The ladder starts at the size of one step and doubles (analysis.sparsity_multiples), with 0 and inf
at the ends. One step:
  ES    one ES update (NOTE-076: "within the magnitude range of a single ES update"): the RMS per
        coordinate of one applied iteration's update, s1 = alpha/N sqrt(S_t) (zscore: alpha/sqrt(N)),
        from harness/analysis/null.py. The harness's earlier "one step", alpha/N x max|z| x E|eps| (eps ~
        N(0, 1); max|z| the median over iterations of the population's largest |z-score|, from the step
        log), is the largest single member's contribution to a coordinate in one iteration, about
        sqrt(N)/(max|z| 0.8) ~ 2-4x smaller than s1; it is kept as "one member's step" (member_step)
        and is the ladder's unit only for an ES variant with no null (centered_ranks).
  GRPO, PPO (Adam)  the learning rate: Adam's per-coordinate step is about lr.
  other  the median nonzero |delta| (said in the table).
The fraction zeroed is over the update's nonzero coordinates, as in the paper (77.6-93.0% below one
ES step there).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import replace

import torch

from harness.analysis.update import named_params
from harness.core.method_facts import ES, RL, record_family
from harness.evaluation.evaluate import EvalConfig, evaluate



def member_step(record) -> tuple[float | None, str]:
    """(one member's largest step, the rule): alpha/N x max|z| x E|eps|, for an ES run; (None, "") otherwise."""
    m = record.config.get("method", {})
    if record_family(record) != ES:
        return None, ""
    alpha = (record.train.alpha if record.train else None) or m.get("alpha")
    n = m.get("population")
    zs = []
    for s in record.steps:
        e = s.get("extras", {})
        std, mean = s.get("reward_std"), s.get("reward_mean")
        if e.get("skipped") or not std or e.get("reward_max") is None:
            continue
        zs.append(max(e["reward_max"] - mean, mean - e["reward_min"]) / (std + 1e-8))
    if not (alpha and n and zs):
        return None, ""
    zmax = statistics.median(zs)
    return (alpha / n * zmax * math.sqrt(2 / math.pi),
            f"alpha/N x max abs(z) x E abs(eps) = {alpha:g}/{n} x {zmax:.2f} x 0.798")


def step_size(record, walk=None) -> tuple[float | None, str]:
    """(one step's size, the rule used) for the run's method: one ES update (walk.s1) when the run has a
    random-walk null (harness/analysis/null.py Walk), else one member's step; Adam's lr for GRPO/PPO."""
    m = record.config.get("method", {})
    family = record_family(record)
    if family == ES:
        if walk is not None and walk.s1 > 0:
            return walk.s1, f"one ES update: RMS per coordinate = alpha/N sqrt(S_t) ({walk.rule})"
        step, rule = member_step(record)
        if step:
            return step, f"one member's step: {rule}"
    if family == RL and m.get("learning_rate"):  # the RL baselines train with Adam (TRL)
        return float(m["learning_rate"]), f"Adam step ~ lr = {m['learning_rate']:g}"
    return None, "median nonzero |delta|"


def thresholds(step: float, multiples: list[float]) -> list[float]:
    return [0.0, *sorted(step * float(x) for x in multiples), math.inf]


def fraction_below(delta: dict[str, torch.Tensor], t: float) -> float:
    """Share of nonzero update coordinates with |delta| < t."""
    nz = below = 0
    for d in delta.values():
        a = d.abs()
        nz += int((a > 0).sum())
        below += int(((a > 0) & (a < t)).sum())
    return below / nz if nz else 0.0


@torch.no_grad()
def apply_threshold(model, theta0: dict[str, torch.Tensor], final: dict[str, torch.Tensor],
                    delta: dict[str, torch.Tensor], t: float) -> None:
    """Write theta_0 where |delta| < t and theta_final elsewhere into `model`'s parameters."""
    for name, p in named_params(model):
        keep = delta[name].abs() >= t
        p.copy_(torch.where(keep, final[name].to(p.dtype), theta0[name].to(p.dtype)).to(p.device))


def sparsity_eval_config(record, n_prompts: int, n_samples: int) -> EvalConfig:
    """The run's own eval settings on fewer prompts: greedy, plus pass@1 over n_samples when > 0."""
    ev = dict(record.config.get("eval") or {})
    base = EvalConfig(**{k: v for k, v in ev.items() if k in EvalConfig.__dataclass_fields__})
    return replace(base, n_prompts=n_prompts or base.n_prompts, n_samples=n_samples, pass_ks=[1] if n_samples else [],
                   maj_ks=[], greedy=True, kl_to_base=False, tasks=[], n_examples=0, n_boot=200,
                   every_flops_fraction=None)


def sparsity_curve(policy, task, theta0, final, delta, ladder: list[float], cfg: EvalConfig) -> list[dict]:
    """One row per threshold: fraction zeroed, test greedy accuracy and pass@1 (means over prompts)."""
    rows = []
    for t in ladder:
        apply_threshold(policy.model, theta0, final, delta, t)
        res = evaluate(policy, task, "test", cfg)
        rows.append({"threshold": t, "fraction_zeroed": fraction_below(delta, t),
                     **{k: res.metrics[k]["mean"] for k in ("greedy_acc", "pass@1") if k in res.metrics}})
    apply_threshold(policy.model, theta0, final, delta, math.inf)  # leave the base weights in place
    return rows


def zeroable_at(rows: list[dict], points: float = 1.0) -> float | None:
    """The largest fraction zeroed whose greedy accuracy is within `points` of the unthresholded model."""
    if not rows or "greedy_acc" not in rows[0]:
        return None
    ref = rows[0]["greedy_acc"]
    ok = [r["fraction_zeroed"] for r in rows if r["greedy_acc"] >= ref - points / 100]
    return max(ok) if ok else 0.0
