"""A run's child process dies with the experiment process that started it.

An experiment runs each run in a child (`python -m harness ... +run_index=I +child_run=true`,
harness/runner/experiment.py). After `kill -9` of the parent the child used to live on as an
orphan, still writing into the stamp folder while a rerun started the same run again. The parent
names itself in ESBENCH_PARENT_PID; the child, first thing at start, asks Linux to send it SIGTERM
when that parent dies (prctl PR_SET_PDEATHSIG), and SIGTERM makes the run's record say interrupted
(harness/runner/cli.py), so a rerun resumes it. The parent can die between starting the child and
the prctl call: the child then sees another parent (getppid) and stops at once.

Elsewhere (macOS) there is no PR_SET_PDEATHSIG; the per-run lock (harness/core/locks.py) still
keeps a rerun off a run an orphan is running.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys

PARENT_ENV = "ESBENCH_PARENT_PID"
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def child_env(env: dict | None = None) -> dict:
    """The environment for a child that must die with this process."""
    return {**(os.environ if env is None else env), PARENT_ENV: str(os.getpid())}


def die_with_parent() -> bool:
    """In a child started with child_env(): SIGTERM when the parent dies; exit now if it already has.

    Returns True when the death signal is armed. The variable is removed so the child's own children
    (sandboxes, workers) do not check against a parent that is not theirs.
    """
    expected = os.environ.pop(PARENT_ENV, None)
    if not expected or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        armed = libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) == 0
    except (OSError, AttributeError):
        armed = False
    if os.getppid() != int(expected):  # the parent died before the signal was armed: nobody to report to
        print(f"esbench: the experiment process {expected} that started this run is gone; not starting it "
              "(rerun the experiment with its stamp=... to resume)", file=sys.stderr)
        sys.exit(143)
    return armed
