"""Commands that cannot overwrite committed results: a run asked to write tables into a folder git tracks files
in is refused in one line unless +overwrite_results=true; experiment files open with a command that writes to
outputs/; their stated run times are the committed runs.csv sums.

    python -m pytest tests/test_results_guard.py -q
"""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.reporting.report import TrackedResults, refuse_tracked
from harness.runner.usage import usage
from harness.tools.times import runs_minutes

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = sorted((ROOT / "conf" / "experiment").glob("*.yaml"))


def git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_a_tracked_folder_is_refused_unless_told_to_overwrite(tmp_path):
    git(tmp_path, "init", "-q")
    (tmp_path / "results" / "g").mkdir(parents=True)
    (tmp_path / "results" / "g" / "table.md").write_text("committed\n")
    git(tmp_path, "add", "results")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "results")
    with pytest.raises(TrackedResults, match=r"results/g holds files git tracks.*\+overwrite_results=true"):
        refuse_tracked(tmp_path / "results" / "g")
    refuse_tracked(tmp_path / "results" / "g", overwrite=True)
    refuse_tracked(tmp_path / "results" / "new")   # nothing committed there: nothing to protect
    refuse_tracked(tmp_path / "outputs" / "g")


def test_outside_a_checkout_nothing_is_refused(tmp_path):
    (tmp_path / "results").mkdir()
    refuse_tracked(tmp_path / "results")


def test_a_run_into_committed_results_is_refused_before_it_starts(tmp_path):
    runs = tmp_path / "runs"
    r = subprocess.run([sys.executable, "-m", "harness", "method=base", "results_dir=results", "group=quickstart",
                        f"runs_dir={runs}"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "results/quickstart" in lines[0] and "+overwrite_results=true" in lines[0]
    assert not runs.exists()  # no run folder left behind


def test_the_help_names_the_overwrite_switch():
    assert "  +overwrite_results=true" in usage([], ROOT / "conf")


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_experiment_files_open_with_a_command_that_writes_to_outputs(path):
    opening = next(line for line in path.read_text().splitlines() if line.startswith("# python -m harness"))
    assert "results_dir=results" not in opening, f"{path.name}: curating into results/ is a separate step"


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_stated_run_minutes_are_the_committed_runs_csv_sums(path):
    stated = [int(m) for m in re.findall(r"^#.*?\b(\d+) min of runs", path.read_text(), re.M)]
    if (ROOT / "results" / path.stem / "runs.csv").is_file():
        assert all(m == round(runs_minutes(path.stem)) for m in stated), (path.name, stated, runs_minutes(path.stem))
    else:
        assert not stated, f"{path.name} states minutes of runs with no results/{path.stem}/runs.csv behind them"
