"""harness.tools.gpu_check's child processes: each measurement (and each end-to-end run) in a process group of its
own, killed whole at its timeout, and the real error of one that failed.

A child's own children (vLLM's engine core and its worker, a GRPO run's colocated engine, `python -m harness`'s
Ray workers) hold GPU memory; killing only the child would leave them holding it through every later section.
So every child starts a new session (its own process group), and the group is killed when the child times out,
when the check itself is terminated (a lease ending sends SIGTERM) and, for anything left over, when it exits.
Output goes to files rather than pipes: a grandchild that outlives the group cannot keep a read blocking.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

TAG = "GPU_CHECK_RESULT "
GRACE_S = 10  # between SIGTERM and SIGKILL to a timed-out group: vLLM's shutdown frees its memory in that time

# Lines a child prints that say nothing about why it failed: nanobind's leak report (triton's bindings,
# at every exit of a process that imported vLLM), traceback carets, progress bars, torch.distributed's
# "[rank0]: " prefix.
EXIT_NOISE = re.compile(r"^(nanobind: |See https://nanobind| - (leaked|\.\.\. skipped)|\s*[\^~]*\s*$)")
PROGRESS = re.compile(r"\d+%\|| \d+% Completed \|")
RANK = re.compile(r"^\[rank\d+\]: ")


def child_error(output: str, keep: int = 15) -> dict:
    """The real error of a failed child: its last exception line and the lines before it, exit noise removed."""
    lines = [RANK.sub("", x) for x in output.replace("\r", "\n").splitlines()]
    lines = [x for x in lines if not EXIT_NOISE.match(x) and not PROGRESS.search(x)]
    starts = [i for i, x in enumerate(lines) if x.startswith("Traceback (most recent call last)")]
    if starts:  # keep the last traceback: its frames, then the exception line(s) after them
        tb = lines[starts[-1]:]
        end = next((i for i in range(1, len(tb)) if not tb[i].startswith((" ", "\t"))), len(tb) - 1)
        exception = tb[end]
        return {"exception": exception, "tail": (tb[:end + 1])[-keep:]}
    return {"exception": lines[-1] if lines else "(no output)", "tail": lines[-keep:]}


def kill_group(pgid: int, grace: float = GRACE_S) -> None:
    """SIGTERM the process group, then SIGKILL whatever is left of it after `grace` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 0)):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            return
        end = time.monotonic() + wait
        while time.monotonic() < end:
            try:
                os.killpg(pgid, 0)
            except (ProcessLookupError, PermissionError):
                return
            time.sleep(0.2)


def run_group(cmd: list[str], timeout: float, env: dict | None = None) -> dict:
    """Run `cmd` in a process group of its own for at most `timeout` seconds: {rc, out, timed_out, s}. The group
    is killed at the timeout, on any exception here (SIGTERM to the check arrives as SystemExit), and after the
    child exits (its orphans)."""
    a = time.perf_counter()
    with tempfile.TemporaryFile("w+") as log:
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True, env=env)
        timed_out = False
        try:
            p.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            kill_group(p.pid, GRACE_S if p.poll() is None else 0)
            p.wait()
        log.seek(0)
        return {"rc": p.returncode, "out": log.read(), "timed_out": timed_out, "s": time.perf_counter() - a}


def run_child(job: dict, timeout: float) -> dict:
    """One measurement (harness/tools/gpu_check_measure.py measure) in its own process group: its figures, or
    {"error": ...} naming the timeout or the child's real exception."""
    r = run_group([sys.executable, "-m", "harness.tools.gpu_check", "--one", json.dumps(job)], timeout)
    if r["timed_out"]:
        return {"error": f"timed out after {timeout:.0f}s (its process group was killed)", "process_s": r["s"]}
    lines = [x[len(TAG):] for x in r["out"].splitlines() if x.startswith(TAG)]
    if r["rc"] or not lines:
        err = child_error(r["out"])
        return {"error": f"exit {r['rc']}: {err['exception']}", "tail": err["tail"]}
    res = json.loads(lines[-1])
    res["process_s"] = r["s"]
    return res


class Terminated(SystemExit):
    """SIGTERM (a lease ending, `timeout`): unwinds through run_group's cleanup and the JSON's last save."""


def exit_on_sigterm():
    """Make SIGTERM raise Terminated in this (main) thread; returns the previous handler (None off the main thread,
    where Python lets no handler be set)."""
    def handler(signum, frame):
        raise Terminated(128 + signum)
    try:
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:
        return None
