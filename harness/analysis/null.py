"""The random-walk null beside every ES analysis: what drift, localisation and sparsity would read if
ES had learned nothing.

ES's update per applied iteration is alpha/N * sum_n c_n eps_n (methods/es/core.py es_update), eps_n
i.i.d. N(0, 1) per coordinate and independent of everything else; with no learning signal the
coefficients c_n (z-scores) are independent of the eps, so every coordinate steps by a zero-mean
Gaussian of variance alpha^2/N^2 * S_t, S_t = sum_n c_n^2, and after T applied iterations

    delta_j ~ N(0, s^2),  s^2 = alpha^2/N^2 * sum_t S_t,  i.i.d. over coordinates j.

S_t per normalisation (method.normalize, method.antithetic):
  zscore            S_t = N std^2/(std + 1e-8)^2 = N (population std): s = alpha sqrt(T/N), exact.
  none              S_t = sum r^2 = N (std_t^2 + mean_t^2) from the step log: exact.
  zscore, antithetic  pairs enter as one eps with c = z(+) - z(-); with exchangeable rewards
                    E z_i^2 = 1 and E z_i z_j = -1/(N-1) (sum z = 0), so E S_t = (N/2) * 2N/(N-1)
                    = N^2/(N-1): s = alpha sqrt(T/(N-1)), in expectation (the pairs' S_t is not logged).
  centered_ranks, or none with antithetic: S_t depends on ties / pairs the log does not keep: no null.
A LoRA run (method.peft) updates adapters, merged as a product: no null. Low-rank noise
(method.noise_rank) keeps unit variance per entry, so (a) holds; its coordinates are not independent,
so (b) and (c) are approximations there. Only the tensors ES updated count (method.params: tensors
whose delta is not all zero). The null ignores rounding theta_final into a model dtype below fp32.

Predictions, for a group of n updated coordinates out of d:
  (a) ||delta_g|| = s sqrt(n) (E||x||^2 = n s^2); relative drift = s sqrt(n) / ||theta0_g||.
  (b) top-k and top-fraction |delta|: coordinates are i.i.d., so each is equally likely to be among
      the largest: a group's expected count is k n/d (binomial spread sqrt(k p (1-p)), p = n/d).
  (c) fraction with |delta| < t: P(|x| < t) = erf(t / (s sqrt 2)).
NOTE-076's sparsity threshold is "within the magnitude range of a single ES update": the range,
the largest |coordinate| one applied update reaches. One update is d i.i.d. N(0, s1^2) coordinates,
s1 = s/sqrt(T) its RMS (zscore: alpha/sqrt(N)), so its largest magnitude is s1 c_d, with
c_d = Phi^-1((1 + 2^(-1/d))/2) the median of the maximum of d |Z| (harness/reporting/stats.py
range_multiple: 4.91 at d = 752k, 5.84 at 135M; the maximum's sd is about 1.28/c_d, 5% of it at
752k). Under the null the fraction below it is erf(c_d/sqrt(2T)): on zoo-1m above 93.0% at T <= 7,
inside NOTE-076's 77.6-93.0% at T = 8-16, below it after. The RMS s1 itself is kept as a second,
stricter threshold (erf(1/sqrt(2T)), at most 68.3%).

Tolerances (a figure within its tolerance is reported as matching the null):
  (a) |ratio - 1| <= max(2%, 3/sqrt(2n)): ||x||/(s sqrt n) has sd ~ 1/sqrt(2n) under the null (chi
      with n degrees of freedom), so 3 sd is the null's own spread; the 2% floor covers what the
      model leaves out (fp32 rounding, the z-score's 1e-8) and means a signal accounts for less than
      sqrt(1.02^2 - 1) = 20% of the update's norm.
  (b) |count - k p| <= 3 sqrt(k p (1-p)) + 1 in every group (+1: counts are integers; a group
      expected at 0.05 may hold one coordinate).
  (c) |fraction - P| <= max(1 point, 3 sqrt(P(1-P)/d)): the binomial spread is below 0.2 points for
      d >= 1e5; 1 point is the floor.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch

from harness.analysis.groups import GROUPS, group_of
from harness.core.method_facts import ES, config_defaults, declared, target_of
from harness.core.payloads import TrainSummary

MATCH = "matches the random-walk null: this measures the update rule, not learning"
NOT_RW = "no null: not a random-walk update"
NO_NORM = "no null for this normalisation"
DRIFT_FLOOR, SD_BAND, POINT_FLOOR = 0.02, 3.0, 0.01


@dataclass(frozen=True)
class Walk:
    """A run's random walk: alpha, N, T applied iterations, sum_t S_t, and how S_t was derived."""

    alpha: float
    n: int
    t: int
    sum_s: float
    rule: str
    notes: list = field(default_factory=list)

    @classmethod
    def zscore(cls, alpha: float, n: int, t: int) -> "Walk":
        return cls(alpha, n, t, float(n * t), "zscore: S_t = N")

    @property
    def s(self) -> float:
        """RMS per coordinate of the whole update: alpha/N sqrt(sum_t S_t)."""
        return self.alpha / self.n * math.sqrt(self.sum_s)

    @property
    def s1(self) -> float:
        """RMS per coordinate of one applied iteration's update (one ES update)."""
        return self.s / math.sqrt(self.t) if self.t else 0.0


def walk_of(method: str, mconf: dict, train: TrainSummary | None, steps: list,
            family: str | None = None) -> tuple[Walk | None, str]:
    """(the run's Walk, "") or (None, why there is no null) from its method (its name in the record), config,
    summary, step log. Only a method of the es family (`family`, the one its record keeps: method_facts
    record_family; else its declared facts, looked up: ES's update rule) has one; a setting the record's
    config lacks takes the method's own default (its config dataclass)."""
    target = target_of(method, mconf)
    if family is None:
        facts = declared(target) if target else None
        family = facts.family if facts is not None else None
    if family != ES:
        return None, NOT_RW
    defaults = config_defaults(target)

    def setting(key):
        return mconf.get(key, defaults.get(key))
    if setting("peft"):
        return None, "no null: a merged LoRA update is not a per-coordinate random walk"
    norm, anti = setting("normalize"), bool(setting("antithetic"))
    alpha, n = (train.alpha if train else None) or mconf.get("alpha"), mconf.get("population")
    if not alpha or not n:
        return None, "no null: alpha or population not recorded"
    if norm == "centered_ranks" or (norm == "none" and anti) or norm not in ("zscore", "none"):
        return None, NO_NORM
    applied = [s for s in steps if not (s.get("extras") or {}).get("skipped")]
    notes = ["low-rank noise: (b), (c) approximate"] if setting("noise_rank") else []
    if norm == "none":
        if not applied or any(s.get("reward_std") is None or s.get("reward_mean") is None for s in applied):
            return None, "no null: normalize=none needs the step log's reward mean and std"
        sum_s = sum(n * (s["reward_std"] ** 2 + s["reward_mean"] ** 2) for s in applied)
        return Walk(float(alpha), int(n), len(applied), sum_s, "none: S_t = N (std^2 + mean^2)", notes), ""
    if steps:
        t = len(applied)
    else:  # no step log: the summary's count
        t = int(train.steps or 0) - int(train.skipped_updates or 0) if train else 0
    if anti:
        return Walk(float(alpha), int(n), t, t * n * n / (n - 1), "zscore antithetic: E S_t = N^2/(N-1)",
                    notes + ["antithetic: in expectation"]), ""
    stds = [s.get("reward_std") for s in applied]
    sum_s = (sum(n * sd * sd / (sd + 1e-8) ** 2 for sd in stds) if steps and all(stds) else float(n * t))
    return Walk(float(alpha), int(n), t, sum_s, "zscore: S_t = N", notes), ""


def updated_counts(delta: dict[str, torch.Tensor]) -> dict[str, int]:
    """Coordinates per group in the tensors ES updated (any nonzero delta)."""
    out: dict[str, int] = {}
    for name, d in delta.items():
        if d.numel() and bool((d != 0).any()):
            out[group_of(name)] = out.get(group_of(name), 0) + d.numel()
    return {g: out[g] for g in GROUPS if g in out}


def frac_below(s: float, t: float) -> float:
    """P(|x| < t) for x ~ N(0, s^2)."""
    return math.erf(t / (s * math.sqrt(2))) if s > 0 else 1.0


def _drift_cell(obs: float, null: float, n: int) -> dict:
    ratio = obs / null if null else math.inf
    tol = max(DRIFT_FLOOR, SD_BAND / math.sqrt(2 * n))
    return {"observed": obs, "null": null, "ratio": ratio, "tol": tol, "ok": abs(ratio - 1) <= tol}


def _count_cells(counts: dict, k: int, n: dict[str, int]) -> dict:
    d = sum(n.values())
    out = {}
    for g, ng in n.items():
        p = ng / d
        e, c = k * p, counts.get(g, 0)
        sd = math.sqrt(k * p * (1 - p))
        out[g] = {"observed": c, "null": e, "ratio": c / e if e else math.inf, "sd": sd,
                  "ok": abs(c - e) <= SD_BAND * sd + 1}
    for g, c in counts.items():  # a count in a group ES did not update cannot be the null's
        out.setdefault(g, {"observed": c, "null": 0.0, "ratio": math.inf, "sd": 0.0, "ok": False})
    return out


def _below_cell(obs: float, s: float, t: float, d: int) -> dict:
    p = frac_below(s, t)
    tol = max(POINT_FLOOR, SD_BAND * math.sqrt(p * (1 - p) / d)) if d else POINT_FLOOR
    return {"threshold": t, "observed": obs, "null": p, "ratio": obs / p if p else math.inf, "tol": tol,
            "ok": abs(obs - p) <= tol}


def null_figures(walk: Walk, counts: dict[str, int], drift_res: dict, loc: dict, below: dict[str, tuple]) -> dict:
    """Each measured figure beside its null: drift and ||delta|| (whole, per group), top-k and
    top-fraction counts per group, and the fraction below each threshold in `below` ({key: (t, observed)}).
    Verdicts: drift, top_k, top_fraction, and one per `below` key."""
    d = sum(counts.values())
    s = walk.s
    base = drift_res["groups"]
    base_whole = math.sqrt(sum(g["base_norm"] ** 2 for g in base.values()))
    norm_whole = _drift_cell(drift_res["delta_norm"], s * math.sqrt(d), d)
    groups = {g: _drift_cell(base[g]["delta_norm"], s * math.sqrt(n), n) for g, n in counts.items()}
    rel = {"whole": {**norm_whole, "observed": drift_res["whole"],
                     "null": s * math.sqrt(d) / base_whole if base_whole else None}}
    for g, c in groups.items():
        bn = base[g]["base_norm"]
        rel[g] = {**c, "observed": base[g]["drift"], "null": c["null"] / bn if bn else math.inf}
    out = {"walk": {**asdict(walk), "s": s, "s1": walk.s1}, "n_updated": d, "delta_norm": norm_whole,
           "delta_norm_groups": groups, "drift": rel,
           "top_k": _count_cells(loc["top_k_counts"], loc["top_k"], counts),
           "top_fraction": _count_cells(loc["top_fraction_counts"], loc["k_fraction"], counts),
           "below": {key: _below_cell(obs, s, t, d) for key, (t, obs) in below.items()}}
    out["verdict"] = {"drift": all(c["ok"] for c in rel.values()),
                      "top_k": all(c["ok"] for c in out["top_k"].values()),
                      "top_fraction": all(c["ok"] for c in out["top_fraction"].values()),
                      **{key: c["ok"] for key, c in out["below"].items()}}
    return out


def verdict(ok: bool, departs: str = "") -> str:
    """The words for a run's row: the MATCH sentence, or where it departs."""
    return MATCH if ok else "departs from the random-walk null" + (f" ({departs})" if departs else "")
