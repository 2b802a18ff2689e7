"""What a run record carries about training and evaluation, typed: TrainSummary, BudgetSummary, Metric.

The runner builds them (harness/runner/run.py), Record writes them with `to_dict()` and reads them with
`from_dict(d, version)` (harness/core/records.py), and every reader uses their attributes: a key renamed
on one side cannot be read as a silent default on the other.

Reading is strict from record schema TYPED_SINCE on (records this module wrote): a key no dataclass
declares, or a declared one that is missing, raises PayloadError naming the key (read_record adds the
file). Older records (schemas 1 and 2, untyped dicts) are read as they are: every key they hold goes
into its field, a key they lack reads None, so their tables regenerate unchanged.

The train summary is what `method.train(...)` returns. COMMON are the keys every shipped method
returns; each method declares the keys it returns beyond them in its own facts (`summary_keys`,
harness/core/method_facts.py: always, and on some paths only), and a typed record is checked against
that declaration. TrainSummary's fields are COMMON and the shipped methods' declared keys (None where
another method's record is read; tests/test_payloads.py keeps the two in step). A method that declares
no keys (one from outside the repository) returns whatever it likes: the COMMON ones and any field name
fill those fields, the rest go to `extra` as it returned them, and none is required.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

TYPED_SINCE = 3  # the record schema from which payloads are checked key by key
_NUMBER = (int, float)


class PayloadError(ValueError):
    """A payload that is not the shape this module writes; the message names the payload and the key."""


def is_number(v) -> bool:
    """An int or float that is not a bool (JSON's true is not a count)."""
    return isinstance(v, _NUMBER) and not isinstance(v, bool)


def _keys_problem(where: str, got, required, allowed) -> None:
    unknown = [k for k in got if k not in allowed]
    missing = [k for k in required if k not in got]
    if unknown:
        raise PayloadError(f"{where} has unknown key {unknown[0]!r} (known: {', '.join(allowed)})")
    if missing:
        raise PayloadError(f"{where} lacks key {missing[0]!r}")


# ---------------------------------------------------------------------------------------------- budget
@dataclass(frozen=True)
class BudgetSummary:
    """What the ledger spent (harness/core/budget.py). The ledger's `flops` and `samples` are written as
    flops_used and samples_used (the names runs.csv and the tables have always had). BudgetSummary() is
    a run that stopped before its ledger was read: every field None."""

    kind: str | None = None           # flops | samples | updates
    limit: float | None = None        # the budget, in `kind`
    spent: float | None = None        # what was spent of it, in `kind`
    flops_used: float | None = None   # the FLOPs charged
    samples_used: int | None = None   # the completions scored
    steps: int | None = None          # ledger steps
    executed_flops: float | None = None  # the FLOPs that ran, padding included; None when no step reported them

    @classmethod
    def of(cls, ledger) -> "BudgetSummary":
        return cls(kind=ledger.kind, limit=ledger.limit, spent=ledger.spent, flops_used=ledger.flops,
                   samples_used=ledger.samples, steps=ledger.steps, executed_flops=ledger.executed_flops)

    @classmethod
    def from_dict(cls, d: dict, version: int = TYPED_SINCE) -> "BudgetSummary":
        names = [f.name for f in fields(cls)]
        # every schema wrote these keys or a subset of them (executed_flops came later): unknown ones fail always
        _keys_problem("budget", d, names if version >= TYPED_SINCE else (), names)
        for k in names if version >= TYPED_SINCE else ():
            ok = isinstance(d[k], str) if k == "kind" else is_number(d[k]) or (k == "executed_flops" and d[k] is None)
            if not ok:
                raise PayloadError(f"budget.{k} is {d[k]!r:.40}, not a {'name' if k == 'kind' else 'number'}")
        return cls(**{k: d.get(k) for k in names})

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


# --------------------------------------------------------------------------------------------- metrics
@dataclass(frozen=True)
class Metric:
    """One evaluation metric of one split (harness/evaluation/metrics.py): the mean over prompts with its
    bootstrap CI, and the per-prompt scores comparisons pair on (absent from older records)."""

    mean: float | None
    ci_low: float | None
    ci_high: float | None
    n: int | None = None               # prompts behind the mean
    prompts: str | None = None         # prompt_set_id of the evaluated prompts, in order
    per_prompt: list | None = None     # one score per prompt
    correct: list | None = None        # pass@k: correct samples per prompt ...
    n_samples: int | None = None       # ... out of this many

    REQUIRED = ("mean", "ci_low", "ci_high")

    @classmethod
    def from_dict(cls, d: dict, where: str = "metric") -> "Metric":
        # every schema wrote these keys (summarize and attach_per_prompt): the check is the same for all
        _keys_problem(where, d, cls.REQUIRED, [f.name for f in fields(cls)])
        return cls(**d)

    def to_dict(self) -> dict:
        """The required keys, and the optional ones the entry has (None never stands for one of them)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None or f.name in self.REQUIRED}


def read_metrics(d: dict, where: str) -> dict[str, Metric]:
    """metric name -> Metric of one split (or one held-out task)."""
    return {name: m if isinstance(m, Metric) else Metric.from_dict(m, f"{where}.{name}") for name, m in d.items()}


def metrics_dict(named: dict[str, Metric]) -> dict:
    return {name: m.to_dict() for name, m in named.items()}


# ------------------------------------------------------------------------------------------ train summary
COMMON = ("steps", "resumed_from", "flops", "samples", "wall_s")


@dataclass(frozen=True)
class TrainSummary:
    """A method's train summary: COMMON, then every shipped method's declared keys (None where it has none)."""

    steps: int | None = None           # steps (iterations, optimizer steps) at the end, resumed ones included
    resumed_from: int | None = None    # the step this process resumed from (0: a fresh run)
    flops: float | None = None         # the ledger's FLOPs at the end
    samples: int | None = None         # the ledger's samples at the end
    wall_s: float | None = None        # training wall time, summed over resumed processes
    skipped_updates: int | None = None   # es: iterations whose update was skipped (every member scored the same)
    sigma: float | None = None
    alpha: float | None = None
    fitness: str | None = None           # es: real | placebo
    last_reward_mean: float | None = None
    workers: int | None = None
    engine: str | None = None
    master_checksum: str | None = None   # es: the workers' agreed master weights
    numerics: dict | None = None         # es: its arithmetic's own record (harness/analysis/numerics.py)
    peft: str | None = None              # lora, or None
    adapter_params: int | None = None
    parameters: dict | None = None       # grpo, ppo: trainable, total, fraction
    world_size: int | None = None
    trained_dtype: str | None = None
    reward_first: float | None = None
    reward_last: float | None = None
    config: dict | None = None           # ppo: its resolved config
    order: list | None = None            # sequential: the stages' method names, in order
    split: float | None = None
    split_by: str | None = None
    switch: dict | None = None           # sequential: the ledger at the switch
    stages: list | None = None           # sequential: each stage's summary, as that stage returned it
    extra: dict = field(default_factory=dict)  # a method outside the repository: the keys no field names
    keys: tuple = field(default=(), repr=False)  # the keys the method returned, in its order (to_dict writes these)

    @classmethod
    def from_dict(cls, d: dict, method: str, version: int = TYPED_SINCE,
                  declared: tuple[tuple[str, ...], tuple[str, ...]] | None = None) -> "TrainSummary":
        """`d` as `method` returned it (a record of schema `version`); strict for a typed record of a method
        that declared its keys (`declared`: its facts' summary_keys, (always, sometimes))."""
        if version >= TYPED_SINCE and declared is not None:
            always, sometimes = (tuple(k) for k in declared)
            _keys_problem(f"train ({method}'s summary)", d, COMMON + always, COMMON + always + sometimes)
            bad = [k for k in COMMON if not is_number(d[k])]
            if bad:
                raise PayloadError(f"train.{bad[0]} is {d[bad[0]]!r:.40}, not a number")
        return cls(**{k: v for k, v in d.items() if k in _FIELDS},
                   extra={k: v for k, v in d.items() if k not in _FIELDS}, keys=tuple(d))

    def to_dict(self) -> dict:
        return {k: self.extra[k] if k in self.extra else getattr(self, k) for k in self.keys}


_FIELDS = frozenset(f.name for f in fields(TrainSummary)) - {"extra", "keys"}


def read_train(d: dict | None, method: str, version: int = TYPED_SINCE,
               declared: tuple[tuple[str, ...], tuple[str, ...]] | None = None) -> TrainSummary | None:
    """The summary of a record's `train` ({} before the method returned one: None); `declared`: the method's
    facts' summary_keys (None: not checked)."""
    if d is None or isinstance(d, TrainSummary):
        return d
    return TrainSummary.from_dict(d, method, version, declared) if d else None


def read_budget(d: dict | None, version: int = TYPED_SINCE) -> BudgetSummary | None:
    """The summary of a record's `budget` ({} before training ended: None)."""
    if d is None or isinstance(d, BudgetSummary):
        return d
    return BudgetSummary.from_dict(d, version) if d else None
