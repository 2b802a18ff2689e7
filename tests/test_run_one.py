"""The main path in process: compose as `python -m harness` does, run, read the record back.

    python -m pytest tests/test_run_one.py -q

`python -m harness method=es model=zoo-100k ...` rewrites `model=` (harness/runner/model_arg.py), composes
conf/config.yaml, validates it (harness/runner/cli.py) and hands one run to harness/runner/run.py's run_one, which
trains until the ledger stops it, evaluates and writes <run_dir>/record.json. This runs that path
without a subprocess, on the smallest zoo model with a 2-iteration budget and an 8-prompt
evaluation, so it is in the default suite; tests/test_cli.py and tests/test_experiment.py cover
the command line itself (slow: a fresh interpreter each).
"""
import json
import re
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from harness.analysis.update import UPDATE_NAME, base_hash
from harness.core.policy import load_policy
from harness.core.records import RECORD_NAME, read_record
from harness.analysis.settings import analysis_config
from harness.runner.run import run_one, track_entropy
from tasks.base import TaskDataError
from harness.runner.schema import validate

POPULATION, PROMPTS, ITERATIONS = 4, 4, 2
SAMPLES = POPULATION * PROMPTS * ITERATIONS  # ES scores population x prompts completions an iteration
N_EVAL = 8
TINY = ["model=zoo-100k", "device=cpu", "group=t", "budget.kind=samples", f"budget.samples={SAMPLES}",
        f"eval.n_prompts={N_EVAL}", "eval.n_samples=4", "eval.pass_ks=[1,4]", "eval.maj_ks=[4]", "eval.n_boot=50",
        "analysis.entropy_prompts=4", "analysis.entropy_samples=1", "analysis.entropy_every_flops_fraction=0.5"]
ES = ["method=es", f"method.population={POPULATION}", f"method.prompts_per_iteration={PROMPTS}",
      f"method.generation_batch_size={PROMPTS}"]
METRICS = {"greedy_acc", "pass@1", "pass@4", "maj@4"}


def run(compose, run_dir, *overrides):
    """What harness/runner/cli.py does for a single run, minus the tables: compose, validate, run_one."""
    cfg = compose(*TINY, *overrides)
    validate(cfg)
    returned = run_one(cfg, run_dir)
    rec = read_record(run_dir / RECORD_NAME)  # what reporting reads, not the object in memory
    assert rec.to_dict() == json.loads(json.dumps(returned.to_dict()))  # written at the end, in full
    return rec


def check_common(rec, method: str):
    assert rec.status == "ok", rec.error
    assert (rec.method, rec.model, rec.seed, rec.torch_threads) == (method, "zoo-100k", 0, 1)
    assert rec.task == "tasks.countdown.Countdown" and rec.config["budget"]["samples"] == SAMPLES
    assert rec.versions["torch"] == torch.__version__ and {"python", "transformers", "trl"} <= set(rec.versions)
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", rec.git_sha), rec.git_sha  # this checkout's HEAD
    test = rec.metrics["test"]
    assert METRICS <= set(test), sorted(test)
    for name in METRICS:
        m = test[name]
        assert m.n == N_EVAL and 0.0 <= m.ci_low <= m.mean <= m.ci_high <= 1.0, (name, m)
    assert rec.eval_flops["test"] > 0 and set(rec.pass_curve["test"]) == {"1", "2", "4"}
    assert rec.wall_s["total"] >= rec.wall_s["train"] >= 0


def test_es_run_trains_charges_and_records(compose, tmp_path):
    rec = run(compose, tmp_path, *ES)
    check_common(rec, "es")
    assert rec.trains and rec.label.startswith("es sigma=")
    budget = rec.budget
    assert (budget.kind, budget.limit) == ("samples", SAMPLES)
    assert budget.steps == ITERATIONS == len(rec.steps) == rec.train.steps
    assert budget.samples_used == budget.spent == SAMPLES
    per_step = POPULATION * PROMPTS
    assert [s["samples"] for s in rec.steps] == [per_step * (i + 1) for i in range(ITERATIONS)]  # running totals
    assert 0 < rec.steps[0]["flops"] < rec.steps[-1]["flops"] == budget.flops_used <= budget.executed_flops
    # the trained weights were stored next to the record, and they moved from the zoo checkpoint
    base = load_policy("zoo-100k", "float32", device="cpu").model
    assert rec.update["base_sha256"] == base_hash(base) and rec.update["path"] == UPDATE_NAME
    final = load_file(tmp_path / UPDATE_NAME)
    moved = [n for n, p in base.named_parameters() if not torch.equal(final[n], p.detach())]
    assert moved, "ES changed no weight in two iterations"
    assert rec.entropy  # the token-entropy listener ran during training
    assert {(r["task"], r["split"]) for r in rec.entropy} == {("countdown", "validation")}  # never test


def test_entropy_on_a_held_out_task(compose, tmp_path):
    """analysis.entropy_task: the entropy rows come from that task's test prompts (NOTE-076: GPQA during GSM8K)."""
    rec = run(compose, tmp_path, *ES, "analysis.entropy_task=countdown4")
    assert rec.status == "ok" and rec.entropy
    assert {(r["task"], r["split"]) for r in rec.entropy} == {("countdown", "test")}
    assert all(r["entropy_tokens"] > 0 for r in rec.entropy)


def test_base_run_evaluates_and_records(compose, tmp_path):
    rec = run(compose, tmp_path, "method=base")
    check_common(rec, "base")
    assert not rec.trains and rec.label == "base"
    assert rec.budget.steps == rec.budget.samples_used == 0 and rec.steps == []
    assert not rec.update and not (tmp_path / UPDATE_NAME).exists()  # nothing trained, nothing stored


EVAL_ONLY = ["model=zoo-100k", "device=cpu", "group=t", "method=base", "task.n_eval=4", "task.max_new_tokens=8",
             "eval.n_prompts=4", "eval.n_samples=2", "eval.pass_ks=[1,2]", "eval.maj_ks=[2]", "eval.n_boot=20"]


@pytest.mark.parametrize("task", ["math500", "humaneval"])
def test_evaluation_only_tasks_run_with_base(compose, tmp_path, task):
    """Before: "MATH-500 is evaluation-only: there is no validation split ... evaluate with task=math500",
    from entropy tracking asking a run that trains nothing for validation prompts."""
    cfg = compose(*EVAL_ONLY, f"task={task}")
    validate(cfg)
    run_one(cfg, tmp_path)
    rec = read_record(tmp_path / RECORD_NAME)
    assert rec.status == "ok", rec.error
    assert rec.metrics["test"]["greedy_acc"].n == 4 and rec.entropy == []


class _Training:  # the members of methods/base.py's Method protocol that track_entropy reads
    name, trains, weights_in_driver = "toy", True, True


class _NoValidation:
    name, max_new_tokens = "noval", 4

    def __init__(self, rows=None):
        self.rows = rows

    def load(self, split):
        if self.rows is None:
            raise TaskDataError(f"noval is evaluation-only: there is no {split} split")
        import datasets
        return datasets.Dataset.from_list(self.rows)


@pytest.mark.parametrize("task, why", [(_NoValidation(), "noval is evaluation-only: there is no validation split"),
                                       (_NoValidation(rows=[]), "noval has no validation prompts")])
def test_entropy_tracking_is_skipped_with_a_note_without_validation_prompts(task, why):
    """A training run on a task with no validation split, or an empty one (an MBPP file with no validation
    rows was a 25-line `Column 'prompt' doesn't exist`), goes on without entropy and says so."""
    ledger = SimpleNamespace(listeners=[])
    analysis = analysis_config({"entropy_every_flops_fraction": 0.5, "entropy_prompts": 2, "entropy_samples": 1})
    note = track_entropy(ledger, analysis, policy=None, task=task, method=_Training(), rows=[])
    assert ledger.listeners == [] and note.startswith(f"entropy tracking skipped: {why}")


def test_a_rerun_notes_the_failed_record_it_replaces_and_a_busy_run_is_not_touched(compose, tmp_path):
    """A failed record is replaced only with a line saying so (log and record.notes); while another
    process holds the run's folder, nothing is written at all."""
    from harness.core.locks import FolderBusy
    from harness.core.records import new_record, write_record
    from test_locks import holder

    old = new_record(label="base")
    old.status, old.error = "failed", "RuntimeError: the first try"
    write_record(tmp_path, old)
    other = holder(tmp_path)
    try:
        with pytest.raises(FolderBusy, match=f"in use by process {other.pid}"):
            run(compose, tmp_path, "method=base")
    finally:
        other.kill()
        other.wait()
    assert read_record(tmp_path / RECORD_NAME).error == "RuntimeError: the first try"  # untouched
    rec = run(compose, tmp_path, "method=base")
    assert rec.status == "ok" and len(rec.notes) == 1
    assert rec.notes[0].startswith(f"replaces the failed record of {tmp_path}") and "the first try" in rec.notes[0]
