"""The command line: bad input gets one line naming the fix, before torch loads; a base run writes
record, tables and plot.

    python -m pytest tests/test_cli.py -q
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def harness(*args, cwd):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.slow  # a subprocess: Python, torch and Hydra start-up each time
def test_missing_model_path_is_one_clear_line(tmp_path):
    r = harness("method=base", "model.name_or_path=./no/such/model", cwd=tmp_path)
    assert r.returncode == 2
    assert "esbench: error: model path './no/such/model' does not exist" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.slow  # a subprocess: Python, torch and Hydra start-up each time
def test_unknown_task_names_the_options(tmp_path):
    r = harness("task=nosuchtask", cwd=tmp_path)  # one line, before Hydra (harness/runner/argv_check.py)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1
    assert r.stderr.startswith("esbench: error: task=nosuchtask is not an option of conf/task/; options: arithmetic,")
    assert "countdown" in r.stderr


@pytest.mark.slow  # a subprocess: Python, torch and Hydra start-up each time
def test_eval_n_smaller_than_k_is_explained(tmp_path):
    r = harness("method=base", "eval.n_samples=8", cwd=tmp_path)
    assert r.returncode == 2 and "eval.n_samples=8 is smaller than the largest k=32" in r.stderr


@pytest.mark.slow
def test_base_run_writes_record_table_and_plot(tmp_path):
    r = harness("method=base", "model=zoo-100k", "eval.n_prompts=20", "eval.n_samples=32", "group=t",
                "eval.tasks=[conciseness]", "eval.kl_to_base=true", "eval.max_new_tokens=16", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads(next((tmp_path / "runs" / "t").rglob("record.json")).read_text())
    assert rec["status"] == "ok" and rec["metrics"]["test"]["pass@32"]["n"] == 20
    assert rec["metrics"]["test"]["kl_to_base"]["mean"] == 0.0  # base model: no drift from itself
    assert rec["heldout"]["conciseness"]["metrics"]["mean_reward"]["n"] == 8
    assert rec["config"]["seed"] == 0 and rec["torch_threads"] == 1 and rec["versions"]["trl"] == "1.12.0"
    out = tmp_path / "outputs" / "t"   # a plain run never rewrites the curated results/
    assert "pass@16" in (out / "table.md").read_text() and (out / "passk.png").is_file()
    assert "## Held-out task: conciseness" in (out / "table.md").read_text()
    assert "| zoo-100k | base | 1/1 |" in r.stdout
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_sigterm_leaves_an_interrupted_record(tmp_path):
    """What `timeout` and Slurm send: the record says interrupted (never vanishes), exit 143."""
    import signal
    import time
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    p = subprocess.Popen([sys.executable, "-m", "harness", "method=es", "model=zoo-100k", "group=t",
                          "method.population=4", "method.prompts_per_iteration=8", "budget.flops=1e15",
                          "eval.n_prompts=4", "eval.n_samples=32"], cwd=tmp_path, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    while time.time() < deadline and not (tmp_path / "runs").exists():
        time.sleep(0.5)
    recs = []
    while time.time() < deadline and not recs:  # wait until the running record exists
        recs = list((tmp_path / "runs").rglob("record.json"))
        time.sleep(0.5)
    time.sleep(2)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 143, err[-2000:]
    rec = json.loads(recs[0].read_text())
    assert rec["status"] == "interrupted" and "SIGTERM" in rec["error"]
    assert "esbench: interrupted" in err and "Traceback" not in err


def _imports(*args, env=None):
    """Run `python -X importtime -m harness ARGS`: (exit code, stderr lines that are not import timings, modules)."""
    env = {k: v for k, v in {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}.items() if v is not None}
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "harness", *args], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    lines = r.stderr.splitlines()
    modules = {ln.rsplit("|", 1)[1].strip() for ln in lines if ln.startswith("import time:")}
    return r.returncode, [ln for ln in lines if not ln.startswith("import time:")], modules


@pytest.mark.parametrize("args, message", [
    (["+eval.n_prompt=20"], "esbench: error: unknown key 'n_prompt' in eval"),
    (["method=es", "method.params='([bad'"], "esbench: error: method.params='([bad' is not all"),
    (["model=./no/such/model"], "esbench: error: model=./no/such/model: no conf/model option and no folder"),
    # these used to come after torch (10-57 s), some as tracebacks or naming no key
    (["method=es", "method.sigma=0"], "esbench: error: method.sigma=0 and method.alpha=0.005 must both be > 0"),
    (["method=es", "method.population=0"], "esbench: error: method.population=0: z-scores need at least 2 members"),
    (["method=es", "method.population=2.5"], "esbench: error: method.population=2.5 must be a whole number"),
    (["method=es", "method.sigma=abc"], "esbench: error: method.sigma='abc' must be a finite number"),
    (["method=grpo", "method.num_generations=1"], "esbench: error: method.num_generations=1: GRPO needs a group"),
    (["method=grpo", "method.learning_rate=-1e-5"], "esbench: error: method.learning_rate=-1e-05 must be > 0"),
])
def test_config_errors_come_in_one_line_before_torch_loads(args, message, tmp_path):
    rc, err, modules = _imports(*args, f"runs_dir={tmp_path}")  # Hydra makes its run folder before the check
    assert rc == 2 and err == [next(ln for ln in err if ln.startswith(message))], err
    assert "torch" not in modules and "transformers" not in modules and "trl" not in modules


EXPERIMENTS = {
    "broken": ("cells:\n  - {label: base, overrides: [method=base]\n  - {label: ES, overrides: [method=es]}\n",
               "esbench: error: {conf}/experiment/broken.yaml:5:3: expected ',' or '}}', but got '-' "
               "(while parsing a flow mapping at line 4)"),
    "nomodel": ("models: [zoo-100k, zoo-nosuch]\ncells:\n  - {label: base, overrides: [method=base]}\n",
                "esbench: error: models[1]='zoo-nosuch' is not a conf/model option; did you mean 'zoo-4m'?; "
                "choose from: "),
    "twice": ("cells:\n  - {label: base, overrides: [method=base]}\n  - {label: base, overrides: [method=es]}\n",
              "esbench: error: cells[1] is named 'base' like cells[0]"),
    "cellvalue": ("models: [zoo-100k]\ncells:\n  - {label: ES, overrides: [method=es, method.alpha=0]}\n",
                  "esbench: error: run 0 (ES): method.sigma=0.01 and method.alpha=0 must both be > 0"),
}


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_experiment_file_errors_come_in_one_line_before_torch_loads(tmp_path, name):
    """Before: a 95-line YAML traceback; Hydra's 27-line model listing after 32 s; duplicate labels passing
    +dry_run; a cell's bad value after torch loaded. The cell's value is checked with every run's config."""
    body, message = EXPERIMENTS[name]
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / f"{name}.yaml").write_text(f"# @package _global_\ngroup: {name}\n{body}")
    rc, err, modules = _imports("--config-dir", str(tmp_path), f"experiment={name}", "+dry_run=true",
                                f"runs_dir={tmp_path / 'runs'}")
    assert rc == 2 and len(err) == 1 and err[0].startswith(message.format(conf=tmp_path)), err
    assert "torch" not in modules and "transformers" not in modules


def test_a_hub_model_that_cannot_load_offline_is_one_line_within_seconds():
    """No network, HF_HUB_OFFLINE unset: one probe (here refused at once), then the cache alone decides."""
    import time
    start = time.time()
    rc, err, modules = _imports("model=esbench-test/no-such-model", "method=base",
                                env={"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_OFFLINE": None})
    assert rc == 2 and len(err) == 1, err
    assert "model 'esbench-test/no-such-model' is not in the local hub cache and the hub is unreachable" in err[0]
    assert "torch" not in modules and time.time() - start < 30
