"""The compute ledger every method charges after every step, and the one place steps are logged.

`budget.kind` is "flops" (default: compute counted from the tokens really processed, see
harness/core/flops.py), "samples" (the ES paper's protocol: number of completions scored) or
"updates" (NOTE-076's protocol: a number of updates, one per ledger step: an ES iteration, a GRPO
optimizer step, a PPO update; each method's facts.update_unit). Whatever the kind, the ledger records FLOPs and
samples, so the tables show what each method spent under an updates budget too.
The stop rule, the same for every method: the last step is charged pro rata. A method asks
`ledger.exhausted` at each step boundary and stops once it is true. Once a step's cost is known (after its
generation, before its update), `ledger.fraction_of(flops, samples)` gives the share f of it the budget has
left: 1 when the whole step fits, else f = (limit - spent) / the step's cost in the budget's unit (0 < f < 1).
The method applies that step's update scaled by f (ES: alpha x f; TRL trainers: the learning rate x f for the
step's optimizer steps) and charges it with `ledger.step(..., fraction=f)`, which charges f x its FLOPs (and,
under a samples budget, the samples left: f x its samples, a whole number when the limit is one; samples stay
an int, rounded up otherwise; under a FLOPs budget the samples column counts every completion scored) and lands
the total exactly on the limit. So every run spends its budget to the FLOP, and runs that differ in step size
stop at the same point. What really ran stays visible: `executed_flops` counts the whole last step, and
`last_step_fraction` (ledger state, checkpoints, the step's `charged_fraction` extra) stores f. Under an updates
budget the limit is a whole number of steps and f is always 1. A method that does not scale its last step passes
no fraction and is charged the whole step (the run then overshoots by part of a step); every shipped method
scales it.

Every method calls `ledger.step(...)` once per step and nothing else: it charges the cost,
appends a `StepStats` to `ledger.history` and hands it to every listener in `ledger.listeners`
(train_log.jsonl, the progress line, TensorBoard/W&B, periodic evaluation: harness/core/steplog.py).
Logging in one place is what keeps the logs of ES, GRPO and PPO comparable and a resumed run's
log free of repeated steps.

Two FLOPs columns. `flops` is the charge: what the method algorithmically needs (real token
counts, no padding, the LM head only where logits are used; harness/core/flops.py), and the budget is
spent in it. `executed_flops` is what ran, padding and decoding past EOS included (the same
formulas on the padded batch shapes), recorded beside it when the method reports it: the
executed/charged ratio says how much a method's implementation wastes. It is None for a run
none of whose steps reported it.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from harness.core.errors import UserError
from harness.core.method_facts import declared

KINDS = ("flops", "samples", "updates")
# What one update is, each method says (MethodFacts.update_unit, harness/core/method_facts.py): every method
# charges the ledger once per step, so an updates budget counts ledger steps, and a method that declares no
# update unit (its step is not one update, or it declares no facts) is refused rather than counted in some
# other unit.


class BudgetError(UserError, ValueError):
    """The budget cannot buy even one step, or cannot be counted the way it asks; the message says the fix."""


def method_problem(kind: str, method) -> str | None:
    """One line when `method` (a config mapping with _target_) cannot run under budget.kind=`kind`, else None.

    Read from the method's declared facts before torch loads (method_facts.declared). A composite (facts.stages,
    e.g. sequential) is checked through its split unit (split_problem) and each of its stages in turn.
    """
    target = str(method.get("_target_") or "")
    facts = declared(target) if target else None
    if facts is not None and facts.stages:
        line = split_problem(method.get(facts.split_unit), kind) if facts.split_unit else None
        if line:
            return line
        order_key, stages_key = facts.stages
        stages = method.get(stages_key) or {}
        for name in method.get(order_key) or []:
            stage = stages.get(name)
            line = method_problem(kind, stage) if hasattr(stage, "get") else None
            if line:
                return f"method.{stages_key}.{name}: {line}"
        return None
    if kind == "updates" and (facts is None or facts.update_unit is None):
        why = "declares no update unit (facts.update_unit)" if facts else "declares no facts (methods/base.py)"
        return (f"budget.kind=updates: {target or 'this method'} has no known update count (it {why}); "
                "use budget.kind=flops or budget.kind=samples")
    return None


def split_problem(split_by: str | None, kind: str) -> str | None:
    """One line when method.split_by (sequential) names another unit than the budget's, else None.

    The split is a share of the budget, so it is in the budget's unit: updates under an updates budget
    (NOTE-076's split), FLOPs under a FLOPs budget; split_by only states which one an experiment means.
    """
    if split_by is None or split_by == kind:
        return None
    if split_by not in KINDS:
        return f"method.split_by={split_by!r} is unknown; use updates, flops, samples or null (the budget's unit)"
    fix = "budget=updates budget.updates=N" if split_by == "updates" else f"budget.kind={split_by}"
    return (f"method.split_by={split_by} splits the budget in {split_by} but budget.kind={kind}; "
            f"write {fix}, or method.split_by={kind}")


def unreachable(kind: str, limit: float, steps: int, cap: str, most_per_step: float) -> str | None:
    """One line when `steps` steps (the method's own cap, e.g. method.max_iterations) cannot spend the budget.

    `most_per_step` must be an upper bound on one step's charge (harness/runner/run.py derives it from the
    samples a step scores and the longest sequence the model takes), so the warning is never wrong:
    without it `budget.flops=1e30` ran silently to max_iterations and the table read as if it were spent.
    """
    if kind == "updates":  # a step is exactly one update, whatever it costs
        most_per_step = 1.0
    most = steps * most_per_step
    if not limit > most:
        return None
    return (f"budget.{kind}={limit:.3g} cannot be spent: {cap}={steps} steps buy at most {most:.3g} {kind}, "
            f"so the run will stop at {cap}; raise {cap} or lower budget.{kind}")


@dataclass
class StepStats:
    """One training step as every method reports it.

    flops and samples are cumulative after the step, wall_s is cumulative training time (across
    resumed processes, evaluation excluded); method-specific numbers go under `extras`.
    """

    step: int
    flops: float
    samples: int
    reward_mean: float | None
    reward_std: float | None
    wall_s: float
    extras: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


Listener = Callable[["Ledger", StepStats], None]


@dataclass
class Ledger:
    """Running totals of FLOPs and scored samples against one limit.

    Args:
        limit: the budget, in FLOPs (kind="flops"), completions scored (kind="samples") or updates
            (kind="updates": ledger steps, a whole number).
        kind: "flops", "samples" or "updates".
        report_to: the experiment tracker the listeners stream to ("none", "tensorboard" or
            "wandb"); TRL-based methods pass it on to TRL so its own metrics land there too.
    """

    limit: float
    kind: str = "flops"
    flops: float = 0.0
    executed_flops: float | None = None
    samples: int = 0
    steps: int = 0
    wall_s: float = 0.0
    history: list[StepStats] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    last_step_fraction: float = 1.0  # the share f of the last step charged (module docstring; 1: a whole step)
    listeners: list[Any] = field(default_factory=list, repr=False)
    report_to: str = "none"
    _clock: float | None = field(default=None, repr=False)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise BudgetError(f"budget.kind={self.kind!r} is unknown; use 'flops', 'samples' or 'updates'")
        if not self.limit > 0:
            raise BudgetError(f"budget limit must be > 0, got {self.limit}; set budget.{self.kind} to a positive number")
        if self.kind == "updates" and self.limit != int(self.limit):
            raise BudgetError(f"budget.updates={self.limit:g} is not a whole number of updates; write e.g. budget.updates=300")

    def start_clock(self) -> None:
        """Start timing training (methods call it once setup is done, so loading is not train time)."""
        self._clock = time.perf_counter()

    def fraction_of(self, flops: float, samples: int) -> float:
        """The share f of a step costing `flops` and `samples` that the budget has left (the module docstring's
        stop rule): 1 when the whole step fits (always under an updates budget), else (limit - spent) / its cost.

        Raises:
            ValueError: the budget is already spent (a method must not start a step once `exhausted`).
        """
        if self.kind == "updates":
            return 1.0
        cost = float(flops) if self.kind == "flops" else float(samples)
        left = self.limit - self.spent
        if cost <= left + self._rounding:
            return 1.0
        if left <= 0:
            raise ValueError(f"a step was started with the budget spent ({self.spent:.6g} of {self.limit:.6g} "
                             f"{self.kind}); a method stops once ledger.exhausted")
        return left / cost

    def step(self, flops: float, samples: int, reward_mean: float | None = None, reward_std: float | None = None,
             executed_flops: float | None = None, fraction: float = 1.0, **extras) -> StepStats:
        """Charge one step (FLOPs from real token counts, completions scored), record and broadcast it.

        `executed_flops`: the FLOPs the step really ran, padding included (see the module docstring);
        None when the method cannot tell. `fraction`: the share f of the step whose update was applied, as
        `fraction_of` gave it (f < 1 only for the step that spends the budget); the step is charged f of its
        cost and the total lands on the limit; its executed FLOPs are counted whole.
        """
        if fraction != 1.0:
            fits = self.fraction_of(flops, samples)
            if not (0 < fraction < 1 and abs(fraction - fits) <= 1e-9):
                raise ValueError(f"ledger.step(fraction={fraction!r}) but the budget has {fits!r} of this step left; "
                                 "pass the fraction ledger.fraction_of(flops, samples) gave, or none")
        now = time.perf_counter()
        self.wall_s += now - (self._clock if self._clock is not None else now)
        if executed_flops is not None:
            self.executed_flops = (self.executed_flops or 0.0) + float(executed_flops)
        if fraction == 1.0:
            self.flops += float(flops)
            self.samples += int(samples)
        else:  # the last step: charged pro rata, the budget's own total lands exactly on the limit
            self.flops = self.limit if self.kind == "flops" else self.flops + fraction * float(flops)
            self.samples = math.ceil(self.limit) if self.kind == "samples" else self.samples + int(samples)
            extras = {**extras, "charged_fraction": fraction}
        self.last_step_fraction = float(fraction)
        self.steps += 1
        stats = StepStats(self.steps, self.flops, self.samples, _num(reward_mean), _num(reward_std),
                          self.wall_s, extras)
        self.history.append(stats)
        for listener in self.listeners:
            listener(self, stats)
        self._clock = time.perf_counter()  # listeners (evaluation, logging) are not training time
        return stats

    def close(self) -> None:
        """Training is over: let listeners finish (a last evaluation, flushing the tracker)."""
        for listener in self.listeners:
            if hasattr(listener, "close"):
                listener.close(self)

    @property
    def spent(self) -> float:
        return {"flops": self.flops, "samples": float(self.samples), "updates": float(self.steps)}[self.kind]

    @property
    def _rounding(self) -> float:
        """FLOPs totals are float sums: a total within this of the limit has spent it (an exact-fit budget,
        summed in another order, must not leave a sliver that buys a step of f ~ 1e-16); counts are exact."""
        return 1e-12 * self.limit if self.kind == "flops" else 0.0

    @property
    def exhausted(self) -> bool:
        return self.spent >= self.limit - self._rounding

    @property
    def fraction(self) -> float:
        return self.spent / self.limit

    def check_step_fits(self, step_cost: float, what: str) -> None:
        """Fail early when one step costs more than the whole budget (no step would be honest).

        Under an updates budget a step costs one update and the limit is at least one: it always fits
        (methods pass their FLOPs cost then, which is not in the budget's unit).
        """
        if self.kind != "updates" and step_cost > self.limit:
            raise BudgetError(
                f"one {what} step costs {step_cost:.3g} {self.kind} but the budget is {self.limit:.3g}; "
                f"raise budget.{self.kind} to at least {step_cost:.3g} or shrink the step (fewer prompts/members)"
            )

    # ---- checkpoints ----
    def state_dict(self) -> dict:
        """Everything a resumed run needs to continue the same totals and logs (JSON-serialisable)."""
        return {"kind": self.kind, "limit": self.limit, "flops": self.flops, "executed_flops": self.executed_flops,
                "samples": self.samples,
                "steps": self.steps, "wall_s": self.wall_s, "last_step_fraction": self.last_step_fraction,
                "history": [s.to_dict() for s in self.history],
                "evals": list(self.evals)}

    def load_state_dict(self, state: dict) -> None:
        """Restore totals, history and evaluations, then tell listeners (the log is rewritten from history)."""
        if state["kind"] != self.kind:
            raise BudgetError(f"the checkpoint's budget is in {state['kind']} but this run's is in {self.kind}; "
                              "resume with the same budget.kind or use a fresh run_dir")
        self.flops, self.samples, self.steps = float(state["flops"]), int(state["samples"]), int(state["steps"])
        self.wall_s = float(state.get("wall_s", 0.0))
        self.last_step_fraction = float(state.get("last_step_fraction", 1.0))  # absent before the pro-rata rule
        executed = state.get("executed_flops")  # absent in checkpoints written before the column existed
        self.executed_flops = None if executed is None else float(executed)
        self.history = [StepStats(**s) for s in state["history"]]
        self.evals = list(state.get("evals", []))
        for listener in self.listeners:
            if hasattr(listener, "restored"):
                listener.restored(self)


def _num(x) -> float | None:
    """Plain floats in StepStats (tensors and numpy scalars would not serialise)."""
    return None if x is None else float(x)
