"""Seconds the command line takes to answer: typos, --help, plans, a missing model; with the load average.

    python -m harness.tools.bench_cli                 # every command once, in a scratch folder
    python -m harness.tools.bench_cli --only errors   # errors | help | plans | model
    python -m harness.tools.bench_cli --repeat 3      # the median of three

Each command runs in a fresh interpreter in a temporary folder (what it writes is counted and then
discarded: a plan must write nothing), from this checkout (PYTHONPATH). One line per command: its
seconds, exit code, files written, the first line it printed, and the 1-minute load average before
it ran, because on a shared machine the same command takes 2-5x longer under load.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = {
    "errors": [["metod=es"], ["method.sigmaa=1e-3"], ["method.workers=2"], ["+metod=es"], ["task=gsm9k"]],
    "help": [["--help"], *([m, "--help"] for m in ("harness.analysis", "harness.reporting", "harness.runner.launch",
                                                     "harness.models", "harness.tools.zoo", "harness.tools.density",
                                                     "harness.tools.bench_es", "harness.tools.bench_engines",
                                                     "harness.tools.bench_heldout", "harness.tools.bench_sandbox",
                                                     "harness.tools.numerics_replay", "harness.tools.weight_magnitudes",
                                                     "harness.tools.gpu_check"))],
    "plans": [["experiment=qiu2025_table1", "+dry_run=true"], ["experiment=qiu2025_table1", "+plan=true"]],
    "model": [["model.name_or_path=./no/such/model"]],
}


def _argv(args: list[str]) -> list[str]:
    """`python -m harness ARGS`, or `python -m MODULE --help` for another entry point."""
    if args[0].startswith("harness.") and len(args) == 2:
        return [sys.executable, "-m", *args]
    return [sys.executable, "-m", "harness", *args]


def run_timed(argv: list[str], cwd: Path | None = None, timeout: float | None = None) -> dict:
    """One run of `argv` from this checkout (PYTHONPATH), offline, no progress bars: its seconds, exit code, the
    1-minute load average before it, its output, and the files it wrote when it ran in a scratch folder (cwd None)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1"}
        load = os.getloadavg()[0]
        start = time.perf_counter()
        r = subprocess.run(argv, cwd=cwd or tmp, env=env, capture_output=True, text=True, timeout=timeout)
        seconds = time.perf_counter() - start
        written = sum(1 for _ in Path(tmp).rglob("*"))
    return {"seconds": seconds, "rc": r.returncode, "written": written, "load": load, "output": r.stderr + r.stdout}


def time_one(args: list[str]) -> dict:
    r = run_timed(_argv(args), timeout=600)
    return {**r, "first": next((ln for ln in r["output"].splitlines() if ln.strip()), "")}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m harness.tools.bench_cli", description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=sorted(COMMANDS), action="append", help="a group of commands (repeatable)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per command; the median is printed")
    a = ap.parse_args(argv)
    print(f"{'seconds':>8} {'load1':>5} {'rc':>3} {'files':>5}  command  ->  first line")
    for group in a.only or list(COMMANDS):
        for args in COMMANDS[group]:
            runs = [time_one(args) for _ in range(max(1, a.repeat))]
            last = runs[-1]
            cmd = " ".join(["python -m", *(args if args[0].startswith("harness.") else ["harness", *args])])
            print(f"{statistics.median(r['seconds'] for r in runs):8.2f} {last['load']:5.2f} {last['rc']:3d} "
                  f"{last['written']:5d}  {cmd}  ->  {last['first'][:100]}", flush=True)


if __name__ == "__main__":
    main()
