"""Experiments end to end on the smallest zoo model (conf/experiment/smoke.yaml): plan, run by index
into one shared folder, resume, failed runs marked, both tables written, tables rebuilt from records.

    python -m pytest tests/test_experiment.py -q
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def harness(*args, cwd, module="harness"):
    # PYTHONPATH: run this checkout's code even where another checkout is pip-installed (worktrees)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.slow  # a subprocess: Python, torch and Hydra start-up each time
def test_dry_run_lists_every_run_and_writes_nothing(tmp_path):
    r = harness("experiment=smoke", "+dry_run=true", "stamp=plan", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "7 runs -> runs/smoke/plan/" in r.stdout and "one job per run: 7" in r.stdout
    assert "   6  zoo-100k" in r.stdout and "method.learning_rate=0.0001" in r.stdout
    assert not list(tmp_path.rglob("record.json"))


@pytest.mark.slow  # a subprocess: Python, torch and Hydra start-up each time
def test_bad_run_index_is_one_clear_line(tmp_path):
    r = harness("experiment=smoke", "+run_index=99", cwd=tmp_path)
    assert r.returncode == 2 and "+run_index=99 is out of range: this experiment has 7 runs" in r.stderr


@pytest.mark.slow
def test_failed_runs_are_marked_and_the_rest_still_run(tmp_path):
    # a budget no training step fits: ES and GRPO fail at once, base (no training) succeeds
    r = harness("experiment=smoke", "budget.flops=1000", "stamp=f", cwd=tmp_path)
    assert r.returncode == 1 and "FAILED run 1" in r.stderr
    table = (tmp_path / "outputs" / "smoke" / "table.md").read_text()
    assert "| zoo-100k | base | 1/1 |" in table
    assert "| zoo-100k | ES | 0/2, 2 FAILED | - | FAILED |" in table
    assert "GRPO (no successful grid point)" in table
    records = [json.loads(p.read_text()) for p in (tmp_path / "runs" / "smoke" / "f").rglob("record.json")]
    assert len(records) == 7 and sum(rec["status"] == "failed" for rec in records) == 6
    assert all("BudgetError" in rec["error"] for rec in records if rec["status"] == "failed")


@pytest.mark.slow
def test_smoke_experiment_end_to_end(tmp_path):
    # 1. two runs as a Hydra multirun (one job each, as on a cluster) without a stamp: one shared folder
    r = harness("-m", "experiment=smoke", "+run_index=0,1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    folders = [p.parent for p in (tmp_path / "runs" / "smoke").glob("*/experiment.json")]
    assert len(folders) == 1, folders
    root = folders[0]
    assert len(list(root.rglob("record.json"))) == 2
    assert "analysis: left to the experiment's last job (5 of 7 runs not finished)" in r.stdout
    assert not (tmp_path / "outputs" / "smoke" / "analysis.md").exists()
    # 2. the whole experiment with that stamp: the two done runs are skipped, the other five run
    r = harness("experiment=smoke", f"stamp={root.name}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("done already") == 2
    out = tmp_path / "outputs" / "smoke"
    table, grid = (out / "table.md").read_text(), (out / "grid.md").read_text()
    assert "| zoo-100k | ES | 2/2 |" in table and "(best of 2 on validation)" in table
    assert "| MISSING" not in table and "| FAILED" not in table and ", 1 " not in table
    assert grid.count("| zoo-100k | GRPO") == 2 and "←" in grid
    assert (out / "passk.png").stat().st_size > 1000 and (out / "summary.md").exists()
    assert (out / "curves.png").stat().st_size > 1000  # train reward against FLOPs, every trained method
    primary = (out / "findings.md").read_text().split("## Primary endpoints")[1].split("\n## ")[0]
    assert "greedy_acc: ES vs GRPO (chosen on validation" in primary  # the file's declared endpoint, first
    records = [json.loads(p.read_text()) for p in root.rglob("record.json")]
    assert sorted(rec["run_index"] for rec in records) == list(range(7))
    # step 2 gave each of its five runs a process of its own: a run's bits must not depend on the runs before it
    assert len({rec["pid"] for rec in records if rec["run_index"] >= 2}) == 5
    assert {rec["seed"] for rec in records if rec["cell"] == "ES"} == {0, 1}
    # 3. the same stamp with other settings would mix two experiments in one table: refused up front
    r = harness("experiment=smoke", f"stamp={root.name}", "budget.flops=4e8", "+run_index=1", cwd=tmp_path)
    assert r.returncode == 2 and "was made with other budget settings" in r.stderr
    # 4. rebuilt from records alone after one record is lost: that run shows as MISSING
    next(root.glob("zoo-100k/ES/seed1/record.json")).unlink()
    r = harness(str(root), "--out", str(tmp_path / "rebuilt"), cwd=tmp_path, module="harness.reporting")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "| zoo-100k | ES | 1/2, 1 MISSING |" in (tmp_path / "rebuilt" / "table.md").read_text()


def test_launch_fans_out_one_job_per_planned_run():
    from harness.runner.launch import command
    cmd = command(["experiment=sigma_sweep", "stamp=s1", "launcher=submitit_slurm", "hydra.launcher.partition=gpu"])
    assert cmd[-1] == "+run_index=range(0,48)" and cmd[2:4] == ["harness", "-m"]
    with pytest.raises(SystemExit, match="stamp"):
        command(["experiment=sigma_sweep"])


def test_an_indexed_job_leaves_the_analysis_to_the_last_one(tmp_path):
    # analysing every finished run in every fanned-out job would be quadratic in the runs
    import subprocess as sp
    from harness.runner.experiment import unfinished
    from harness.core.records import PlannedRun, new_record, write_record
    runs = [PlannedRun(index=i, model="m", seed=0, cell="c", column="c", label="c", grid=None, key=f"m/c/seed{i}")
            for i in range(4)]
    dead = sp.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for i, (status, pid) in enumerate([("ok", None), ("failed", None), ("running", os.getpid())]):
        rec = new_record()
        rec.status, rec.pid = status, pid or rec.pid
        write_record(tmp_path / runs[i].key, rec)
    assert unfinished(tmp_path, runs) == 2          # run 2 is still running, run 3 has no record yet
    rec = new_record()
    rec.pid = dead.pid                                # a killed run reads interrupted: finished, never waited on
    write_record(tmp_path / runs[3].key, rec)
    rec = new_record()
    rec.status = "ok"
    write_record(tmp_path / runs[2].key, rec)
    assert unfinished(tmp_path, runs) == 0


def test_an_ok_record_from_other_versions_or_another_isa_is_not_reused(tmp_path):
    from harness.runner.experiment import ExperimentError, _check_same_arithmetic
    from harness.core.records import cpu, new_record

    same = new_record()
    _check_same_arithmetic(tmp_path, same)  # this process's own versions and CPU: reused
    other_versions = new_record()
    other_versions.versions = {**other_versions.versions, "transformers": "0.0.1"}
    with pytest.raises(ExperimentError, match="transformers 0.0.1"):
        _check_same_arithmetic(tmp_path, other_versions)
    other_isa = new_record()
    other_isa.cpu = {**cpu(), "capability": "NO_SUCH_ISA"}
    with pytest.raises(ExperimentError, match="NO_SUCH_ISA"):
        _check_same_arithmetic(tmp_path, other_isa)


def test_a_record_made_before_a_new_setting_is_reused_only_at_its_default():
    """ES records from before method.numerics / noise_seeding / numerics_record existed match a run that
    leaves them at their YAML defaults, not one that changes them; other differences still count."""
    from harness.runner.experiment import settings_since
    old = {"_target_": "methods.es.ES", "population": 30, "sigma": 0.001}
    mine = {**old, "numerics": "exact", "noise_seeding": "iid", "numerics_record": None}
    assert settings_since(mine, old, "method") == old
    assert settings_since({**mine, "numerics": "inplace"}, old, "method") == {**old, "numerics": "inplace"}
    assert settings_since({**mine, "sigma": 0.002}, old, "method")["sigma"] == 0.002  # a recorded key: kept
    assert settings_since(mine, {**old, "_target_": "methods.grpo.GRPO"}, "method") == mine  # another method
    assert settings_since(3, 4, "seed") == 3


def test_a_run_killed_by_a_signal_says_so_not_no_error(tmp_path):
    """A child killed by SIGKILL (the out-of-memory killer) leaves a 'running' record with no error: the
    experiment names the signal instead of 'no error in its record'."""
    from harness.runner.experiment import _failure

    msg = _failure(tmp_path, -9)
    assert msg.startswith("its process was killed by SIGKILL") and "out-of-memory" in msg
    assert _failure(tmp_path, 1) == f"failed before writing {tmp_path / 'record.json'} (exit status 1)"
    from harness.core.records import new_record, read_record, write_record
    from harness.runner.experiment import mark_killed

    write_record(tmp_path, new_record(label="PPO"))
    mark_killed(tmp_path, msg)
    rec = read_record(tmp_path / "record.json")
    assert rec.status == "failed" and rec.error == msg and rec.label == "PPO"


@pytest.mark.parametrize("args, folder", [
    (["experiment=smoke", "stamp=busy"], "runs/smoke/busy"),                     # a whole experiment
    (["experiment=smoke", "stamp=busy", "+run_index=3"], "runs/smoke/busy"),     # one job of a fan-out
    (["method=base", "model=zoo-100k", "stamp=busy"], "runs/adhoc/busy-base"),   # an ad-hoc single run
])
def test_a_second_process_on_a_stamp_is_refused_in_one_line(tmp_path, args, folder):
    """Before the stamp lock: two processes on one stamp both ran every run, one ES run died on
    FileNotFoundError in its checkpoint, an ok record overwrote a failed one, the step log got duplicate lines."""
    from test_locks import holder
    other = holder(tmp_path / folder)
    try:
        r = harness(*args, cwd=tmp_path)
    finally:
        other.kill()
        other.wait()
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr[-2000:]
    assert lines[0].startswith("esbench: error: the ") and f"{folder} is in use by process {other.pid} " in lines[0]
    assert not list(tmp_path.rglob("record.json"))  # refused before writing anything


def test_a_failure_whose_record_another_process_wrote_says_so(tmp_path):
    """Before: "FAILED run 2 ... (no error in its record)" when the other process's ok record overwrote it."""
    from harness.core.records import new_record, write_record
    from harness.runner.experiment import _failure

    rec = new_record(label="ES")
    rec.status, rec.pid, rec.host = "ok", 4242, "elsewhere"
    write_record(tmp_path, rec)
    msg = _failure(tmp_path, 1)
    assert msg.startswith("failed (exit status 1) without recording why: ") and "says ok" in msg
    assert "process 4242 on elsewhere" in msg and "no error in its record" not in msg
