"""No sandboxed program outlives its judge: a watchdog per judge process, and a sweep at start-up.

A judge (the harness process running tasks/judge/sandbox.py) names everything a run leaves on the host
after its own pid: the scratch folder `<tmp>/esbench-sandbox-<pid>-*` (the run's cwd; `work/` in
it is owned by the run's uid) and the cgroups `esbench-<pid>-*` (tasks/judge/cgroup.py). When the judge
ends normally each run removes its own. When it is SIGKILLed nothing of its own runs, so:

- `judging()` wraps every run. At a judge's first, `start_watchdog()` starts this file as a
  small process in a session of its own. It waits on a pidfd of the judge (where the kernel has
  none: polls getppid()) and, once the judge is gone, runs `sweep(judge pid)`. It runs as the
  judge's user (root: it must kill other uids and remove cgroups) but holds nothing the sandbox
  can reach: it is outside the sandbox's PID namespace, under another uid, with no fd of it, and
  the sandbox's seccomp filter refuses ptrace. A judge that exits normally stops it (every run
  has cleaned up after itself by then);
- `sweep_dead()`, at the same first run, sweeps every judge named on this host whose pid is dead
  (or a zombie): what a killed watchdog, or one that never started, left;
- `sweep(pid)` kills, repeatedly until none is left (a fork races a single pass): every process
  whose cwd is in the judge's scratch folders (`unshare`, whose --kill-child then kills the PID
  namespace's init, and a child that has not pivoted yet), every process of the uid that owns
  `work/` (as that uid: kill(-1) reaches processes that left the session), and every process in
  the judge's cgroups; then removes the cgroups and the folders.

The sandbox itself adds the fast path (tasks/judge/sandbox.py, tasks/judge/sandbox_child.py): `unshare` runs
with a parent-death signal, and the child re-arms its own after the uid switch, which clears it.

Stdlib only: the watchdog runs as `python -I -S -B`. It assumes one PID namespace per /tmp and
cgroup tree, as a judge's pid in a name means nothing in another.

    python -m pytest tests/test_sandbox_lifetime.py -x -q
"""
from __future__ import annotations

import atexit
import contextlib
import glob
import logging
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time

SCRATCH_PREFIX = "esbench-sandbox-"  # <tmp>/esbench-sandbox-<judge pid>-<random>
CGROUP_PREFIX = "esbench-"  # <cgroup parent>/esbench-<judge pid>-<random>
FIRST_SANDBOX_UID = 1_000_000_000  # tasks/judge/sandbox.py draws run uids at or above this
_NAMED = re.compile(r"esbench-(?:sandbox-)?(\d+)-[^/]*$")
# the project, three levels above tasks/judge/sandbox_reaper.py (for the watchdog's -c)
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_log = logging.getLogger("tasks.judge.sandbox")
_lock = threading.Lock()
_watchdogs: dict[int, object] = {}  # judge pid -> its watchdog (a forked judge needs its own)
_in_flight = [0]  # runs started and not yet cleaned up, under _lock


@contextlib.contextmanager
def judging(python: str, tmp: str, parents):
    """Around each sandbox run. The first in a process sweeps what killed judges left and
    starts this judge's watchdog; `python` is the sandbox's interpreter, `tmp` where the scratch
    folders go, `parents` where the cgroups do."""
    with _lock:
        if os.getpid() not in _watchdogs:
            swept = sweep_dead(tmp, parents, python)
            if swept:
                _log.warning("swept the sandboxes of killed judges (pids %s)", swept)
            watchdog = start_watchdog(python, tmp, parents)
            if isinstance(watchdog, str):
                _log.warning("%s", watchdog)
            elif not _watchdogs:
                atexit.register(_stop_watchdog)
            _watchdogs[os.getpid()] = watchdog
        _in_flight[0] += 1
    try:
        yield
    finally:
        with _lock:
            _in_flight[0] -= 1


def _stop_watchdog() -> None:
    """At a normal exit every run has ended and removed what it made, so the watchdog has
    nothing to sweep: stop it. A run still in flight (on a daemon thread) is left to it."""
    watchdog = _watchdogs.get(os.getpid())
    if isinstance(watchdog, subprocess.Popen) and not _in_flight[0]:
        watchdog.kill()
        watchdog.wait()


def owned(tmp: str, parents, pid: int | str = "[0-9]*") -> tuple[list[str], list[str]]:
    """(scratch folders, cgroup dirs) named after judge `pid` (default: any judge)."""
    scratch = glob.glob(os.path.join(tmp, f"{SCRATCH_PREFIX}{pid}-*"))
    groups = [g for p in parents for g in glob.glob(os.path.join(p, f"{CGROUP_PREFIX}{pid}-*"))]
    return [d for d in scratch if _NAMED.search(d)], [g for g in groups if _NAMED.search(g)]


def _alive(pid: int) -> bool:
    """Whether `pid` runs: a zombie (killed, not yet reaped by its new parent) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: alive
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] == b"Z"
    except (OSError, IndexError):
        return False  # gone, or no /proc: kill(0) already said it exists


def sweep_dead(tmp: str, parents, python: str) -> list[int]:
    """Sweep every judge named under `tmp` or the cgroup `parents` whose process is gone; the
    judge pids swept. This process and live judges are never touched."""
    scratch, groups = owned(tmp, parents)
    pids = {int(_NAMED.search(p).group(1)) for p in scratch + groups} - {os.getpid()}
    dead = sorted(p for p in pids if not _alive(p))
    for pid in dead:
        sweep(pid, tmp, parents, python)
    return dead


def sweep(pid: int, tmp: str, parents, python: str, wait_s: float = 10) -> bool:
    """Kill every process of dead judge `pid`'s sandboxes, then remove its cgroups and scratch
    folders; True when all of it is gone. `python` runs the kill as a sandbox uid (one that uid
    can read). Never raises."""
    scratch, groups = owned(tmp, parents, pid)
    uids = {_owner(os.path.join(d, "work")) for d in scratch} - {None}
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        found = _kill_cwd_in(scratch) + sum(_kill_group(g) for g in groups)
        found += sum(kill_uid(uid, python) for uid in uids if _uid_has_processes(uid))
        if not found:
            break
        time.sleep(0.02)
    for g in groups:  # killed tasks leave a cgroup only once reaped, so retry
        while not _rmdir(g) and time.monotonic() < deadline:
            time.sleep(0.02)
    for d in scratch:
        shutil.rmtree(d, ignore_errors=True)
    scratch, groups = owned(tmp, parents, pid)
    return not scratch and not groups


def kill_uid(uid: int, python: str) -> int:
    """SIGKILL every process of `uid`, sent as that uid: kill(-1) then reaches them all at once,
    including ones that left their session; 1 if it ran."""
    kill = "import os, signal; os.kill(-1, signal.SIGKILL)"
    try:
        subprocess.run([python, "-I", "-S", "-c", kill], user=uid, group=uid, extra_groups=[],
                       env={"PATH": "/usr/bin:/bin"}, cwd="/", stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return 0  # nothing left to kill, or the host is in trouble; never fail the caller
    return 1


def _owner(path: str) -> int | None:
    try:
        uid = os.stat(path).st_uid
    except OSError:
        return None
    return uid if uid >= FIRST_SANDBOX_UID else None  # never a real user's


def _processes():
    try:
        names = os.listdir("/proc")
    except OSError:
        return  # not Linux: the cgroup and uid kills still apply
    for name in names:
        if name.isdigit() and int(name) != os.getpid():
            yield int(name)


def _uid_has_processes(uid: int) -> bool:
    """Whether a live process (not a zombie: it holds nothing and cannot be killed) has `uid`."""
    for pid in _processes():
        try:
            if os.stat(f"/proc/{pid}").st_uid == uid and not _zombie(pid):
                return True
        except OSError:
            pass  # it ended while we looked
    return False


def _kill_cwd_in(folders: list[str]) -> int:
    """SIGKILL processes whose cwd is in one of `folders`; how many were found."""
    if not folders:
        return 0
    found = 0
    for pid in _processes():
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue  # ended, or a kernel thread
        if any(cwd == d or cwd.startswith(d + "/") for d in folders):
            found += _kill(pid)
    return found


def _kill_group(path: str) -> int:
    """SIGKILL every process in cgroup `path` (v2: cgroup.kill too); how many were found."""
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            pids = [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        return 0
    if pids and os.path.exists(os.path.join(path, "cgroup.kill")):
        try:
            with open(os.path.join(path, "cgroup.kill"), "w") as f:
                f.write("1")
        except OSError:
            pass  # the per-pid kills below still run
    return sum(_kill(p) for p in pids if not _zombie(p))  # a zombie leaves once reaped


def _kill(pid: int) -> int:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        return 0  # gone already
    return 1


def _rmdir(path: str) -> bool:
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True


def start_watchdog(python: str, tmp: str, parents) -> subprocess.Popen | str:
    """Start the watchdog of this judge; the process, or a one-line reason why it could not."""
    code = (f"import sys; sys.path.insert(0, {_ROOT!r}); "
            "from tasks.judge.sandbox_reaper import main; main(sys.argv[1:])")
    try:
        return subprocess.Popen(
            [sys.executable, "-I", "-S", "-B", "-c", code, str(os.getpid()), python, tmp, *parents],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            cwd="/", start_new_session=True)  # its own session: not killed with the judge's
    except OSError as e:
        return f"the sandbox watchdog could not start ({e}); sandboxes of a killed judge are " \
            "then swept only by the next judge's start-up"


def _wait_for_exit(pid: int) -> None:
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # Python < 3.9 or kernel < 5.3: poll our parent instead
        while os.getppid() == pid:
            time.sleep(0.5)
        return
    poll = select.poll()
    poll.register(fd, select.POLLIN)
    while not poll.poll():
        pass


def main(argv: list[str]) -> None:
    """`<judge pid> <python> <tmp> <cgroup parent>...`: wait for the judge to end, sweep it."""
    pid, python, tmp, parents = int(argv[0]), argv[1], argv[2], argv[3:]
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the judge
    _wait_for_exit(pid)
    sweep(pid, tmp, parents, python)
