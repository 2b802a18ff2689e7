"""The old command names still run their new modules for one release (harness/aliases.py)."""
import subprocess
import sys

import pytest

ALIASES = {"tables": "harness.reporting", "analyze": "harness.analysis", "launch": "harness.runner.launch",
           "gpu_check": "harness.tools.gpu_check", "zoo": "harness.tools.zoo"}


@pytest.mark.parametrize("old", sorted(ALIASES))
def test_old_command_runs_the_new_module(old):
    args = [] if old == "launch" else ["--help"]  # launch has no --help: its first check answers instead
    p = subprocess.run([sys.executable, "-m", f"harness.{old}", *args], capture_output=True, text=True, timeout=120)
    assert f"is now `python -m {ALIASES[old]}`" in p.stderr
    if old == "launch":
        assert p.returncode != 0 and "pass stamp=NAME" in p.stderr
    else:
        assert p.returncode == 0 and "usage" in p.stdout.lower(), p.stderr[-2000:]
