"""The compute ledger every method charges after every step.

`budget.kind` is "flops" (default: compute counted from the tokens really processed, see
harness/flops.py) or "samples" (the ES paper's protocol: number of completions scored).
A method asks `ledger.exhausted` at each step boundary and stops at the first boundary at or
past the limit, so every run overshoots by at most one step; the record stores what was spent.
"""
from __future__ import annotations

from dataclasses import dataclass, field


class BudgetError(ValueError):
    """The budget cannot buy even one step; the message says how large it must be."""


@dataclass
class Ledger:
    """Running totals of FLOPs and scored samples against one limit.

    Args:
        limit: the budget, in FLOPs (kind="flops") or completions scored (kind="samples").
        kind: "flops" or "samples".
    """

    limit: float
    kind: str = "flops"
    flops: float = 0.0
    samples: int = 0
    steps: int = 0
    history: list[dict] = field(default_factory=list)

    def __post_init__(self):
        if self.kind not in ("flops", "samples"):
            raise BudgetError(f"budget.kind={self.kind!r} is unknown; use 'flops' or 'samples'")
        if not self.limit > 0:
            raise BudgetError(f"budget limit must be > 0, got {self.limit}; set budget.flops or budget.samples")

    def charge(self, flops: float, samples: int = 0, **info) -> None:
        """Record one step's cost (FLOPs from real token counts, completions scored)."""
        self.flops += float(flops)
        self.samples += int(samples)
        self.steps += 1
        self.history.append({"step": self.steps, "flops": self.flops, "samples": self.samples, **info})

    @property
    def spent(self) -> float:
        return self.flops if self.kind == "flops" else float(self.samples)

    @property
    def exhausted(self) -> bool:
        return self.spent >= self.limit

    @property
    def fraction(self) -> float:
        return self.spent / self.limit

    def check_step_fits(self, step_cost: float, what: str) -> None:
        """Fail early when one step costs more than the whole budget (no step would be honest)."""
        if step_cost > self.limit:
            raise BudgetError(
                f"one {what} step costs {step_cost:.3g} {self.kind} but the budget is {self.limit:.3g}; "
                f"raise budget.{self.kind} to at least {step_cost:.3g} or shrink the step (fewer prompts/members)"
            )
