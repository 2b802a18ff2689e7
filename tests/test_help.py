"""Every `python -m harness...` entry point answers --help at once: nothing heavy loads before its arguments
are parsed, and `python -m harness --help` says what the bare command runs and lists conf/'s groups.

    python -m pytest tests/test_help.py -q
"""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.core.paths import CONF_DIR
from harness.runner.usage import usage

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers", "trl", "pandas", "matplotlib", "datasets", "numpy")


def entry_points() -> list[str]:
    """Every package with a __main__.py and every tool with a main(), as `python -m` names them."""
    mods = sorted(".".join(p.relative_to(ROOT).parent.parts) for p in (ROOT / "harness").rglob("__main__.py"))
    mods += sorted(f"harness.tools.{p.stem}" for p in (ROOT / "harness" / "tools").glob("*.py")
                   if "\ndef main(" in p.read_text())
    return [*mods, "harness.runner.launch", "harness.models"]


def test_the_page_names_the_bare_run_the_groups_and_the_switches():
    page = usage([], CONF_DIR)
    assert "With no arguments it runs the CPU quickstart comparison" in page
    assert "experiment=quickstart: base; ES sigma=1e-2 (zoo set); ES sigma=1e-3 (paper set); GRPO (grid of 4" in page
    assert "on model=zoo-1m task=countdown budget=quickstart" in page
    for switch in ("+dry_run=true", "+plan=true", "experiment=NAME", "results_dir=DIR", "stamp=NAME", "+run_index=I"):
        assert f"  {switch}" in page
    for group in ("method", "task", "model", "experiment", "budget", "engine", "eval"):
        options = sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
        line = next(ln for ln in page.splitlines() if ln.startswith(f"  {group}:"))
        assert [o.rstrip("*") for o in line.split(":", 1)[1].strip().split(", ")] == options, line
    assert "method:     base*, " in page and ", es," in page  # the default marked


def test_a_config_dir_option_is_listed(tmp_path):
    (tmp_path / "task").mkdir()
    (tmp_path / "task" / "mine.yaml").write_text("_target_: tasks.countdown.Countdown\n")
    assert "mine" in next(ln for ln in usage(["--config-dir", str(tmp_path)], CONF_DIR).splitlines()
                          if ln.startswith("  task:"))


@pytest.mark.slow  # one subprocess per entry point (Python start-up each time)
@pytest.mark.parametrize("module", ["harness", *entry_points()])
def test_help_answers_before_heavy_imports(module):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.time()
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", module, "--help"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    seconds = time.time() - start
    modules = {ln.rsplit("|", 1)[1].strip() for ln in r.stderr.splitlines() if ln.startswith("import time:")}
    assert r.returncode == 0 and "usage" in r.stdout.lower() or module == "harness.tools.density", r.stderr[-2000:]
    assert r.stdout.strip(), r.stderr[-2000:]
    assert not [m for m in HEAVY if m in modules]
    assert seconds < 10  # under 2 s on an idle 2-core machine (harness/tools/bench_cli.py); 10 leaves room for load
