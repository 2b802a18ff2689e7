"""No sandboxed process outlives its judge.

A judge (a harness process scoring MBPP) is SIGKILLed while a completion sleeps for an hour in the
sandbox, having also started a detached `sleep` in a session of its own. Within a few seconds no
process of the judge's sandbox may run (none of the sandbox's uid, none of the judge's process
tree) and none of its cgroups or scratch folders may be left. Before these layers the program ran on
as its random uid, reparented to pid 1, with its cgroups and /tmp/esbench-sandbox-<pid>-* in place.

The layers tried here: the watchdog (tasks/judge/sandbox_reaper.py) sweeps a killed judge; without it,
the parent-death chain (unshare under `setpriv --pdeathsig`, the child's signal re-armed after the
uid switch) still kills the processes and the next judge's start-up sweep removes the rest.

    python -m pytest tests/test_sandbox_lifetime.py -x -q
"""
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from tasks.judge import cgroup, sandbox, sandbox_reaper
from tasks.judge.sandbox import layers, run_python

ROOT = Path(__file__).parents[1]
SETTLE_S = 5  # how long the judge's sandbox may take to go once the judge is killed
pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs Linux /proc")


def _completion(marker: str) -> str:
    return ("```python\nimport os, time\nif os.fork() == 0:\n    os.setsid()\n"
            f"    os.execv('/bin/sleep', ['sleep', {marker!r}])\ntime.sleep(3600)\n```")


def _harness(marker: str) -> str:
    return (f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nfrom tasks.mbpp import MBPP\n"
            f"MBPP(n_eval=None, timeout_s=3600).reward([{_completion(marker)!r}], "
            "test_list=[['assert f(1) == 1']])\n")


def _table() -> dict[int, tuple[int, int, str, str]]:
    """pid -> (ppid, uid, state, cmdline) of every process."""
    out = {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            out[int(name)] = (int(fields["PPid"]), int(fields["Uid"].split()[0]),
                              fields["State"].split()[0], cmd)
        except (OSError, KeyError, ValueError):
            pass  # ended while we looked
    return out


def _descendants(pid: int, table: dict) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        parent = todo.pop()
        kids = {p for p, row in table.items() if row[0] == parent} - found
        found |= kids
        todo.extend(kids)
    return found


class Judge:
    """A harness in a subprocess, scoring a completion that sleeps for an hour. Its scratch
    folders go in `tmp`, a TMPDIR of its own, so that no other judge on a shared host sweeps
    them before the test looks (cgroups have no such place: only their absence is asserted)."""

    def __init__(self, tmp: str):
        self.marker = f"3600.{uuid.uuid4().int % 10**9}"  # a sleep argument, unique to this test
        self.tmp, self.env = tmp, {**os.environ, "TMPDIR": tmp}
        self.proc = subprocess.Popen([sys.executable, "-c", _harness(self.marker)], cwd=ROOT,
                                     stdin=subprocess.DEVNULL, env=self.env)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            table = _table()
            sleepers = [p for p, row in table.items() if row[3].split() == ["sleep", self.marker]]
            if sleepers:
                break
            assert self.proc.poll() is None, "the harness ended before its sandbox started"
            time.sleep(0.1)
        else:
            self.kill()
            raise AssertionError("the sleeping completion never started in the sandbox")
        time.sleep(0.3)  # the completion itself is now in time.sleep
        table = _table()
        self.tree = _descendants(self.proc.pid, table)
        self.uid = table[sleepers[0]][1]
        self.watchdogs = {p for p in self.tree if "sandbox_reaper" in table[p][3]}

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def left(self) -> dict:
        """What of this judge's sandbox is still on the host (zombies hold nothing: not counted)."""
        table = _table()
        live = {p: row[3][:80] for p, row in table.items() if row[2] != "Z"
                and (p in self.tree or (self.uid >= sandbox._UID_RANGE[0] and row[1] == self.uid))}
        where = cgroup.backend()
        parents = where.parents if isinstance(where, cgroup.Backend) else ()
        return {"processes": live,
                "cgroups": [g for p in parents
                            for g in glob.glob(f"{p}/esbench-{self.proc.pid}-*")],
                "scratch": glob.glob(f"{self.tmp}/esbench-sandbox-{self.proc.pid}-*")}

    def settle(self, what=("processes", "cgroups", "scratch"), wait_s: float = SETTLE_S) -> dict:
        """Wait up to wait_s for `what` to be gone; what is left then."""
        deadline = time.monotonic() + wait_s
        while True:
            left = {k: v for k, v in self.left().items() if k in what and v}
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.1)


def test_parent_death_signal_is_armed_after_the_uid_switch():
    """Inside the sandbox PR_GET_PDEATHSIG reads SIGKILL (it once read 0, cleared by the uid
    switch, so a killed judge's program ran on)."""
    if not layers()["parent_death"]:
        pytest.skip(f"no parent_death layer on this host (isolation: {sandbox.isolation()})")
    code = ("import ctypes, os\nv = ctypes.c_int()\nctypes.CDLL(None).prctl(2, ctypes.byref(v))\n"
            "print(v.value, os.getuid())")
    result = run_python(code)
    assert result.ok, result.stderr_tail
    signal_number, uid = map(int, result.stdout_tail.split())
    assert signal_number == signal.SIGKILL
    if layers()["uid_drop"]:
        assert uid >= sandbox._UID_RANGE[0]  # it is armed after the switch, not only before


@pytest.mark.parametrize("parent_gone", [True, False])
def test_child_exits_when_its_parent_went_before_the_signal_was_armed(parent_gone):
    """The race the pipe closes: a parent that died before prctl armed the signal."""
    script = (f"import os, sys\nsys.path.insert(0, {str(ROOT / 'tasks' / 'judge')!r})\n"
              "import sandbox_child\nr, w = os.pipe()\n"
              f"{'os.close(w)' if parent_gone else ''}\n"
              "sandbox_child._parent_death(r)\nprint('ran on')\n")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", script], capture_output=True,
                          text=True, timeout=30)
    assert (done.returncode, done.stdout.strip()) == ((125, "") if parent_gone else (0, "ran on"))


@pytest.fixture
def judge():
    """A judge scoring the sleeper; whatever a failed test left of it is swept afterwards."""
    tmp = tempfile.mkdtemp(prefix="esbench-lifetime-")
    os.chmod(tmp, 0o711)  # as /tmp lets a sandbox uid reach its scratch folder
    started = Judge(tmp)
    yield started
    started.kill()
    where = cgroup.backend()
    parents = where.parents if isinstance(where, cgroup.Backend) else ()
    sandbox_reaper.sweep(started.proc.pid, tmp, parents, sandbox._mode().python)
    shutil.rmtree(tmp, ignore_errors=True)


def test_killed_judge_leaves_no_sandbox(judge):
    """SIGKILL the judge mid-reward: its sandbox is gone within seconds."""
    assert judge.left()["processes"] and judge.left()["scratch"], judge.left()  # it really ran
    judge.kill()
    left = judge.settle()
    assert not left, f"after {SETTLE_S} s the killed judge's sandbox is still here: {left}"
    assert judge.watchdogs, "the judge started no watchdog"


def test_startup_sweep_removes_what_a_killed_watchdog_left(judge):
    """Without the watchdog the parent-death chain ends the processes; the next judge's first
    sandbox use removes the cgroups and scratch folders left."""
    assert judge.watchdogs, "the judge started no watchdog"
    for pid in judge.watchdogs:
        os.kill(pid, signal.SIGKILL)
    judge.kill()
    if shutil.which("setpriv") and layers()["pid_ns"] and layers()["parent_death"]:
        left = judge.settle(("processes",))
        assert not left, f"the parent-death chain left processes: {left}"
    stale = judge.left()
    assert stale["scratch"], "nothing stale to sweep: the test proves nothing"
    fresh = subprocess.run([sys.executable, "-c", f"import sys\nsys.path.insert(0, {str(ROOT)!r})"
                            "\nfrom tasks.judge.sandbox import run_python\n"
                            "assert run_python('print(1)', timeout_s=60).ok"],  # wall clock: loaded hosts are slow
                           cwd=ROOT, capture_output=True, text=True, timeout=120, env=judge.env)
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    swept = next((line for line in fresh.stderr.splitlines() if "swept the sandboxes" in line), "")
    assert str(judge.proc.pid) in swept, fresh.stderr[-2000:]
    left = judge.settle(wait_s=1)
    assert not left, f"the start-up sweep left {left} (was {stale})"


def test_a_judge_that_exits_normally_stops_its_watchdog():
    """Every run cleaned up after itself, so the watchdog goes with the judge, quietly (no
    "subprocess still running" ResourceWarning under -X dev -W error)."""
    script = (f"import os, sys\nsys.path.insert(0, {str(ROOT)!r})\n"
              "from tasks.judge import sandbox_reaper\nfrom tasks.judge.sandbox import run_python\n"
              "assert run_python('print(1)').ok\n"
              "print(sandbox_reaper._watchdogs[os.getpid()].pid)\n")
    done = subprocess.run([sys.executable, "-X", "dev", "-W", "error", "-c", script], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "Warning" not in done.stderr, done.stderr[-2000:]
    watchdog = int(done.stdout.split()[-1])
    deadline = time.monotonic() + SETTLE_S
    while _table().get(watchdog, (0, 0, "Z"))[2] != "Z" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _table().get(watchdog, (0, 0, "Z"))[2] == "Z", "the watchdog outlived its judge"


def _report(kill_watchdog: bool) -> str:
    """SIGKILL a judge mid-reward; when its processes, and all of it, were gone."""
    tmp = tempfile.mkdtemp(prefix="esbench-lifetime-")
    os.chmod(tmp, 0o711)
    judge, gone = Judge(tmp), {}
    for pid in judge.watchdogs if kill_watchdog else ():
        os.kill(pid, signal.SIGKILL)
    judge.kill()
    start = time.monotonic()
    while time.monotonic() - start < SETTLE_S and "everything" not in gone:
        left = {k: v for k, v in judge.left().items() if v}
        if "processes" not in left:
            gone.setdefault("processes", time.monotonic() - start)
        if not left:
            gone["everything"] = time.monotonic() - start
        time.sleep(0.02)
    left = {k: v for k, v in judge.left().items() if v}
    shutil.rmtree(tmp, ignore_errors=True)
    return (f"watchdog {'killed first' if kill_watchdog else 'running'}: "
            + ", ".join(f"{k} gone after {v:.2f} s" for k, v in gone.items())
            + f"; after {SETTLE_S} s left: {left}")


if __name__ == "__main__":  # python tests/test_sandbox_lifetime.py
    print(_report(kill_watchdog=False))
    print(_report(kill_watchdog=True))  # the next judge's first run sweeps what is left
