"""`sequential`'s hyperparameters (SequentialConfig) with every check its constructor runs, importable without
torch: methods/sequential.py re-exports them (methods/config_common.py says why)."""
from __future__ import annotations

from dataclasses import dataclass, field

from harness.core.budget import KINDS
from harness.core.method_facts import COMPOSITE, MethodFacts, configure, facts_of


@dataclass
class SequentialConfig:
    """Two stages under one budget (conf/method/sequential.yaml, whose values are these defaults: test_defaults.py)."""

    order: list = field(default_factory=lambda: ["grpo", "es"], metadata={
        "help": "the two stages, first to last: names of entries in `stages` ([grpo, es] or [es, grpo])"})
    split: float = field(default=0.5, metadata={"help": "fraction of the budget the first stage may spend, in (0, 1)"})
    split_by: str | None = field(default=None, metadata={
        "help": "the unit of the split: updates (NOTE-076), flops or samples; must be budget.kind; null: budget.kind"})
    stages: dict = field(default_factory=dict, metadata={
        "help": "each stage's method: a built method or its config (a dict with _target_)"})

    def __post_init__(self):
        self.order = list(self.order)
        if len(self.order) != 2 or self.order[0] == self.order[1]:
            raise ValueError(f"method.order={self.order} must name two different stages, e.g. [grpo, es] or [es, grpo]")
        missing = [s for s in self.order if s not in self.stages]
        if missing:
            raise ValueError(f"method.order names {missing[0]!r} but method.stages has only "
                             f"{', '.join(self.stages) or 'nothing'}; add method.stages.{missing[0]} or fix the order")
        if self.split_by not in (None, *KINDS):
            raise ValueError(f"method.split_by={self.split_by!r} is unknown; use updates, flops, samples or null")
        if not 0 < self.split < 1:
            raise ValueError(f"method.split={self.split} must be in (0, 1): the first stage's share of the budget")



# ---- what sequential says about itself (Sequential.facts), read without torch ----
def stage_samples(c: SequentialConfig) -> float:
    """Completions one update scores: each stage's (its own facts) weighted by its share of the budget."""
    def samples(spec) -> float:
        target = str(spec["_target_"])
        return float(facts_of(target).samples_per_step(configure(target, spec)))
    first, second = (samples(c.stages[n]) for n in c.order)
    return c.split * first + (1 - c.split) * second


# Sequential.facts (methods/sequential.py), read here by the planner and the budget check
SEQUENTIAL_FACTS = MethodFacts(
    family=COMPOSITE,
    update_unit="its stages' updates, counted on one ledger",
    stages=("order", "stages"),  # each of config.stages[name] for name in config.order is checked in turn
    split_unit="split_by",
    summary_keys=(("order", "split", "split_by", "switch", "stages"), ()),  # stages: each stage's own summary
    samples_per_step=stage_samples)


# methods/sequential.py's method classes -> their config and facts (methods/config_common.py)
METHOD_CONFIGS = {"Sequential": SequentialConfig}
METHOD_FACTS = {"Sequential": SEQUENTIAL_FACTS}
