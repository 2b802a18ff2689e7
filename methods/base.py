"""The method interface, and `base` (no training: the "Original" column).

A method is one module in methods/ plus one YAML in conf/method/ whose `_target_` names its class;
the YAML's other keys are the constructor's keyword arguments (the method's hyperparameters),
exactly the fields of its config dataclass: an unknown key fails at construction, naming itself
and the valid ones, instead of being silently ignored by a sweep. The dataclass's defaults are the
defaults: the YAML writes the same values out (or an interpolation such as ${seed}) so a reader sees
them, and tests/test_defaults.py fails when the two disagree.

Methods are data as well as code. Every method class declares
    name        the method's name in records and tables ("es", "grpo", ...)
    label_keys  the hyperparameters a table label shows, e.g. ("sigma", "alpha")
    label_flags settings the label names when they differ from their default, e.g. {"fitness": "real"}
    trains      False only for `base` (nothing to train, nothing to charge)
    facts       a MethodFacts (harness/core/method_facts.py): its family, what one update is, its step cap,
                the completions a step scores, its memory model, whether it trains in the driver and whether
                it runs distributed. The budget check, the planner, the runner, the comparisons and the
                analysis read these and nothing else about a method, so a method defined outside this
                folder (a module on sys.path, a YAML through Hydra's searchpath) gets an updates budget, a
                price and its comparisons without an edit in harness/ (tests/test_toy_method.py).
and, through ConfiguredMethod, `config_class` (its hyperparameters' dataclass, whose defaults the planner
reads without building the method) and `weights_in_driver` (facts.trains_in_driver for its config).
The shipped methods keep their config dataclass and their facts in a light module beside them
(methods/es/config.py beside methods/es/loop.py; module `a.b` -> `a.b_config`, whose METHOD_CONFIGS and
METHOD_FACTS map the class name to them: methods/config_common.py), importable without torch, so the config
check builds the config and the planner prices the method before torch loads; a method without one (a
plugin) has its keys read from its source and its facts from its imported class.

`train(policy, task, ledger, run_dir)` trains `policy.model` in place on `task.load("train")` and
returns a summary dict (at least "steps", "resumed_from", "flops", "samples", "wall_s"). It calls
`ledger.start_clock()` once set up, `ledger.step(...)` once per step with the FLOPs of the tokens
it really processed (harness/core/flops.py), the completions it scored and its own numbers as extras,
stops at the step boundary where `ledger.exhausted` is true, then calls `ledger.close()`. The stop rule is
the same for every method (harness/core/budget.py): once a step's cost is known and before its update,
`ledger.fraction_of(flops, samples)` gives the share f of it the budget has left; the method applies the
update scaled by f (its step size or learning rate x f) and charges `ledger.step(..., fraction=f)`, so the last
step is charged pro rata and every run spends its budget exactly.
Logging, progress lines, trackers and periodic evaluation hang off the ledger (harness/core/steplog.py).
A method that checkpoints resumes from `run_dir` when it holds a checkpoint.
"""
from __future__ import annotations

import dataclasses
import inspect
import os
import shutil
from pathlib import Path
from typing import ClassVar, Protocol

from harness.core.budget import Ledger
from harness.core.method_facts import MethodFacts
from harness.core.policy import Policy
from methods.base_config import BASE_FACTS
from tasks.base import Task

__all__ = ["MethodFacts", "Method", "ConfiguredMethod", "Base"]


class Method(Protocol):
    """What the harness reads of a method: every member it uses is declared here (none is probed)."""

    name: ClassVar[str]
    label_keys: ClassVar[tuple[str, ...]]
    label_flags: ClassVar[dict[str, object]]  # setting -> default: the label names it when it differs
    trains: ClassVar[bool]
    facts: ClassVar[MethodFacts]
    config_class: ClassVar[type | None]  # its hyperparameters' dataclass (None: it takes none)

    @property
    def weights_in_driver(self) -> bool: ...  # facts.trains_in_driver for this method's config

    def preflight(self, prompter: Policy, task: Task, dtype: str) -> None: ...  # before the weights load

    def train(self, policy: Policy, task: Task, ledger: Ledger, run_dir: Path) -> dict: ...


def make_config(config_class: type, hparams: dict, method: str):
    """Build a method's config dataclass, failing in one line on a key it does not have."""
    valid = [f.name for f in dataclasses.fields(config_class)]
    unknown = [k for k in hparams if k not in valid]
    if "peft" in unknown:
        raise TypeError(f"method {method} does not support method.peft (LoRA); drop it, or use method=grpo or "
                        "method=ppo (LoRA through TRL's peft_config) or method=es (ES on LoRA adapters)")
    if unknown:
        raise TypeError(f"method {method} has no hyperparameter {unknown[0]!r}; valid: {', '.join(valid)}")
    return config_class(**hparams)


class ConfiguredMethod:
    """Base class of a method whose hyperparameters are the fields of `config_class`.

    The constructor's signature is the config's (so Hydra configs bind, and fail, against it
    without building anything) and `self.config` holds the validated hyperparameters.
    """

    name: ClassVar[str] = ""
    label_keys: ClassVar[tuple[str, ...]] = ()
    label_flags: ClassVar[dict[str, object]] = {}  # setting -> default; named in the label when it differs
    trains: ClassVar[bool] = True
    config_class: ClassVar[type | None] = None
    facts: ClassVar[MethodFacts]  # every method declares its own (checked when the class is defined)
    distributed: ClassVar[bool] = False  # facts.distributed

    def __init__(self, **hparams):
        self.config = make_config(self.config_class, hparams, self.name) if self.config_class else None
        if self.config is None and hparams:
            raise TypeError(f"method {self.name} takes no hyperparameters; got {', '.join(hparams)}")

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.config_class is not None:
            cls.__signature__ = inspect.signature(cls.config_class)
        if not isinstance(getattr(cls, "facts", None), MethodFacts):
            raise TypeError(f"method class {cls.__module__}.{cls.__qualname__} declares no facts; add "
                            "facts = MethodFacts(family=..., update_unit=..., ...) (harness/core/method_facts.py)")
        cls.distributed = cls.facts.distributed  # read as GRPO.distributed too; declared once, in the facts

    @property
    def weights_in_driver(self) -> bool:
        """False when the method trains on engine workers and the driver's model is stale until the end."""
        return self.facts.in_driver(self.config)

    def preflight(self, prompter: Policy, task: Task, dtype: str) -> None:
        """Refuse, before the weights load, a run that cannot fit its GPU (harness/runner/run.py calls it on a
        GPU, with the policy's tokenizer and prompt format but no model: harness/core/policy.py load_prompter,
        and the model's dtype). Nothing to check by default."""

    def label(self) -> str:
        """The table label: the name and the label_keys' values, e.g. "es sigma=0.001 alpha=0.0005"."""
        keys = " ".join(f"{k}={getattr(self.config, k):g}" for k in self.label_keys)
        return " ".join([f"{self.name} {keys}".strip(), *flag_labels(self, vars(self.config) if self.config else {})])


def flag_labels(method: Method, values) -> list[str]:
    """"key=value" for each of the method's label_flags whose value in `values` is not its default."""
    return [f"{k}={values[k]}" for k, default in method.label_flags.items() if k in values and values[k] != default]


class Base(ConfiguredMethod):
    """No training: evaluates the model as it is (the paper's "Original")."""

    name = "base"
    label_keys = ()
    trains = False
    facts = BASE_FACTS  # methods/base_config.py: read there without torch

    def train(self, policy: Policy, task: Task, ledger: Ledger, run_dir: Path) -> dict:
        return {"steps": 0, "resumed_from": 0, "flops": 0.0, "samples": 0, "wall_s": 0.0}


Base.__signature__ = inspect.Signature()


# ---- checkpoints: a folder swapped in atomically ----
def check_resumable(path: Path, mine: dict, theirs: dict, loose: tuple[str, ...], method: str) -> None:
    """Refuse to resume a checkpoint written with other hyperparameters (`loose` ones may differ).

    `.get`: checkpoints from before a field existed hold its default (None).
    """
    if any(mine[k] != theirs.get(k) for k in mine if k not in loose):
        raise ValueError(f"{path} was written with {method} config {theirs}, but this run uses {mine}; "
                         "use the same method settings to resume, or a fresh run_dir")


def save_dir_atomic(final: Path, write) -> None:
    """Write a checkpoint folder so that a kill at any moment leaves a complete one on disk.

    `write(tmp)` fills final.tmp (each file fsynced); then final -> final.old, final.tmp -> final,
    final.old removed. A folder cannot replace a non-empty one, hence the .old hop. Leftovers of a
    killed save are cleared first: a stale .tmp is partial, and a stale .old is redundant whenever
    `final` exists (`final` only ever appears complete), so neither can block this save.
    """
    final = Path(final)
    tmp, old = final.with_name(final.name + ".tmp"), final.with_name(final.name + ".old")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    write(tmp)
    _fsync_dir(tmp)
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
    os.replace(tmp, final)
    _fsync_dir(final.parent)
    shutil.rmtree(old, ignore_errors=True)


def latest_dir(final: Path, marker: str) -> Path | None:
    """The complete checkpoint folder to resume from: `final`, else the `.old` a killed save left."""
    final = Path(final)
    for path in (final, final.with_name(final.name + ".old")):
        if (path / marker).is_file():
            return path
    return None


def fsync_file(path: Path) -> None:
    """Flush a file written by a library (safetensors, torch.save) to disk before it is swapped in."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    try:
        fsync_file(path)
    except OSError:  # some filesystems do not fsync folders; the rename is still atomic
        pass
