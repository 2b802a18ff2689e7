"""An experiment's runs in child processes: started so they die with their parent, and their exit explained.

`python -m harness experiment=X` runs each run as `python -m harness ... +run_index=I +child_run=true`
(harness/runner/experiment.py), so a local experiment and a fanned-out one run every run the same
way and no state (RNG, caches, warning filters, memory) passes from one run to the next. It does not
make runs bit-identical: one short GRPO run alone in a fresh process, four times, gave two weight
sets, two and two (same metrics); memory layout decides it (ASLR off: 6 of 7 alike), README
"Reproducibility".

The child gets ESBENCH_PARENT_PID and arms PR_SET_PDEATHSIG at start (harness/core/lifeline.py): a
`kill -9` of the experiment no longer leaves it running as an orphan beside a rerun.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness.core.errors import Terminated
from harness.core.lifeline import child_env
from harness.core.records import RECORD_NAME, read_record, write_record

_HYDRA_FLAGS = ("--config-dir", "-cd", "--config-path", "-cp", "--config-name", "-cn")


def _hydra_flags(argv: list[str]) -> list[str]:
    """The command line's Hydra flags that choose the config (e.g. --config-dir of a plugin's YAML), and its
    hydra.searchpath override (Hydra keeps it out of the task overrides a child is given)."""
    out = []
    for i, a in enumerate(argv):
        if a in _HYDRA_FLAGS and i + 1 < len(argv):
            out += [a, argv[i + 1]]
        elif a.startswith(tuple(f + "=" for f in _HYDRA_FLAGS)) or a.lstrip("+").startswith("hydra.searchpath="):
            out.append(a)
    return out


def config_flags() -> list[str]:
    """This process's config-choosing flags (_hydra_flags of sys.argv), for a command it prints or starts: a
    printed `python -m harness ...` keeps the --config-dir it was given, so it composes the same files."""
    return _hydra_flags(sys.argv[1:])


def start_child(args: list[str], env: dict | None = None) -> subprocess.Popen:
    """Start `python -m harness <this command line's Hydra flags> ARGS` in a child that dies with this process;
    `env` adds variables (a lane's CUDA_VISIBLE_DEVICES). Start it from the main thread: the kernel's
    death signal follows the thread that started the child (PR_SET_PDEATHSIG), not the process."""
    cmd = [sys.executable, "-m", "harness", *_hydra_flags(sys.argv[1:]), *args]
    return subprocess.Popen(cmd, env=child_env({**os.environ, **(env or {})}))


def stop_children(procs: list[subprocess.Popen], grace_s: float = 120.0) -> None:
    """SIGTERM each child still running (each writes its record as interrupted, then stops); SIGKILL the
    ones that have not stopped within `grace_s`, counted from the first signal, not per child."""
    live = [p for p in procs if p.poll() is None]
    for p in live:
        p.terminate()
    deadline = time.monotonic() + grace_s
    for p in live:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def exit_status(rc: int, what: str) -> int:
    """A child's exit status as the experiment takes it. Raises Terminated when it was interrupted from
    outside (exit 130 or 143), so the experiment stops too and a rerun resumes."""
    if rc in (130, 143):
        raise Terminated(f"{what} was interrupted (exit status {rc})")
    return rc


def run_child(args: list[str], what: str) -> int:
    """`python -m harness <this command line's Hydra flags> ARGS` in a child that dies with this process.

    Returns its exit status (negative: killed by that signal). Raises Terminated when it was
    interrupted (exit 130 or 143), so the experiment stops too and a rerun resumes.
    """
    proc = start_child(args)
    try:
        rc = proc.wait()
    except BaseException:  # SIGTERM or Ctrl-C here: the child writes its record as interrupted, then stops
        stop_children([proc])
        raise
    return exit_status(rc, what)


def mark_killed(run_dir: Path, why: str) -> None:
    """A child killed by a signal could not finish its record: write it as failed, with why, for the tables."""
    try:
        rec = read_record(run_dir / RECORD_NAME)
    except (OSError, ValueError, TypeError):
        return
    if rec.status == "running":
        rec.status, rec.error = "failed", why
        write_record(run_dir, rec)


def _failure(run_dir: Path, rc: int = 1) -> str:
    """Why a run in its own process failed, from its record (the child said it on its stderr too), or from
    its exit status when it died without saying (a signal: SIGKILL is most often the out-of-memory killer)."""
    if rc < 0:
        name = signal.Signals(-rc).name if -rc in signal.valid_signals() else f"signal {-rc}"
        why = "; SIGKILL is most often the kernel's out-of-memory killer (see dmesg)" if -rc == signal.SIGKILL else ""
        return f"its process was killed by {name}{why}; a rerun with the same stamp resumes from its checkpoint"
    path = Path(run_dir) / RECORD_NAME
    try:
        rec = read_record(path)
    except (OSError, ValueError, TypeError):
        return f"failed before writing {path} (exit status {rc})"
    if rec.status == "failed" and rec.error:
        return rec.error
    # its own failure leaves a failed record: this one it did not write (another process's, or it stopped
    # before replacing it, e.g. refused by the run's lock), so say what is there instead of "no error"
    return (f"failed (exit status {rc}) without recording why: {path} says {rec.effective_status}, written by "
            f"process {rec.pid} on {rec.host}; the child's lines above say why it stopped")
