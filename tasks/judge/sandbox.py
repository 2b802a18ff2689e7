"""Run untrusted (model-written) Python in a throwaway, resource-limited process.

Nothing from a completion is ever eval'd or exec'd in the harness process. Each run starts
tasks/judge/sandbox_child.py with the strongest isolation this host allows, probed once and reported by
`isolation()` (labels) and `layers()` (a dict of every layer, True when active):

- as root with util-linux `unshare` (the Linux dev box and most containers): new network (loopback
  only), PID, mount, IPC and UTS namespaces; inside, the child joins the run's cgroup, pivots into
  a minimal root (only what the interpreter loads, read-only: tasks/judge/sandbox_root.py; no /usr as a
  whole, no site-packages, project, data files or homes; /tmp, /dev/shm and HOME on one
  size-capped private tmpfs that dies with the run), switches to a random unprivileged uid/gid per
  call (so RLIMIT_NPROC, which root ignores, stops fork bombs), sets no_new_privs and rlimits, and
  installs a seccomp filter;
- as a normal user with unprivileged user namespaces: `unshare --user --map-root-user` plus the
  same namespaces and root; the child drops every capability instead of switching uid;
- as root without `unshare`: the cgroup, the random uid, no_new_privs, rlimits and seccomp;
  otherwise what of those the host allows. `layers()` says which are missing; `missing_layers()`
  lists the ones training requires (REQUIRED).

One memory ceiling per program: each run gets its own cgroup (tasks/judge/cgroup.py; v2, or v1's
memory+memsw and pids hierarchies) limiting all its processes together, and the tmpfs pages they
write, to `memory_mb` with no swap, and its tasks to `nproc`. RLIMIT_AS alone was per process: 8
forked children of 300 MiB took 2.4 GiB. A run the kernel OOM-killed is not ok.

Seccomp (tasks/judge/seccomp.py, a hand-assembled classic BPF filter installed with prctl, no binding
needed): no new namespaces (unshare, setns, clone with CLONE_NEW*; a nested user namespace had
full capabilities, could mount an uncapped tmpfs and open raw sockets), no mounts, ptrace,
keyrings, io_uring, bpf, perf events, userfaultfd, and sockets of AF_UNIX only (an allow-list:
AF_VSOCK slipped past the old deny-list); each fails with EPERM. Required where a filter exists
for the architecture (x86_64, aarch64).

Nothing outlives the judge (tasks/judge/sandbox_reaper.py): `unshare` gets a parent-death signal, the
child re-arms its own after the uid switch (which clears it), a watchdog process sweeps a killed
judge's sandboxes, cgroups and scratch folders, and the first run in a process sweeps those of
judges whose pid is dead.

Always: `python -I -S -B -u` (no PYTHON* variables, no site-packages; stdlib only), an environment
of PATH, HOME, TMPDIR and LANG only, stdin a private unlinked file the child reads and replaces with
/dev/null, stdout/stderr to size-limited files, a wall-clock timeout that kills the process group
and, when a uid is dropped, every process of that uid.

Results travel on an inherited fd as nonce-prefixed JSON lines that the child and trusted runner
scripts write, read within a byte and item budget before parsing (tasks/judge/sandbox_results.py); the
code's stdout is never parsed. `ok` means the child's `done` record arrived (the code
ran to its end), exactly once, after exit status 0 with stdout and stderr still open. Code that
inspects the interpreter's memory could find the nonce; judges must therefore compare values in
the harness (tasks/judge/mbpp_judge.py) rather than trust a pass/fail the sandbox reports.

    python -m pytest tests/test_task_mbpp.py tests/test_sandbox_hostile.py -q
"""
from __future__ import annotations

import functools
import json
import logging
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tasks.judge import cgroup, sandbox_reaper, sandbox_results, sandbox_root, seccomp

SCRATCH_MB = 64  # /tmp + /dev/shm + HOME together, on a tmpfs that dies with the run
_UID_RANGE = (sandbox_reaper.FIRST_SANDBOX_UID, 2_000_000_000)  # far above real and subuid ranges
_PY_FLAGS = ["-I", "-S", "-B", "-u"]
_NS_FLAGS = ["--net", "--pid", "--fork", "--ipc", "--uts", "--mount", "--kill-child"]
_NS_LABELS = ("net-ns", "pid-ns", "mount-ns", "ipc-ns", "uts-ns")
_CHILD = Path(__file__).with_name("sandbox_child.py")
# The child's source comes on stdin's first line, so no host path is in its argv, its
# /proc/1/cmdline, its code's file names or a module's __file__ (the checkout's location).
_BOOT = ("import json, sys\nchild = {'__name__': 'sandbox_child'}\n"
         "source = json.loads(sys.stdin.buffer.readline())\n"
         "exec(compile(source, 'sandbox_child.py', 'exec'), child)\n"
         "del source\nsys.exit(child['main']())\n")
# Layers training requires; seccomp only where a filter exists for this architecture.
REQUIRED = ("net_ns", "pid_ns", "mount_ns", "hidden_fs", "private_tmp", "identity",
            "no_new_privs", "rlimits", "cgroup", "parent_death",
            *(("seccomp",) if seccomp.supported() else ()))
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SandboxResult:
    """What one sandboxed run did. `ok` is True only if the code ran to its end and exited 0.

    `records` are what a trusted runner script emitted on the result channel, in order (never the
    code's stdout); empty when the channel was malformed.
    """

    ok: bool
    returncode: int | None
    stdout_tail: str
    stderr_tail: str
    timed_out: bool
    records: tuple = field(default=())
    layers: dict = field(default_factory=dict)  # what the child says it applied
    peak_memory_mb: float | None = None  # the run's cgroup at its fullest (None: no cgroup)
    out_of_memory: bool = False  # the kernel killed a process at the run's memory ceiling
    # The result-stream limit a record passed (tasks/judge/sandbox_results.py: "bytes" or "items") and
    # why; `records` then hold only the records before it, and `ok` is False.
    over_limit: str | None = None
    over_limit_reason: str = ""


@dataclass(frozen=True)
class _Mode:
    labels: tuple[str, ...]
    python: str
    prefix: tuple[str, ...] = ()
    drop_uid: bool = False  # a random uid per call (root only)
    drop_caps: bool = False  # root of a user namespace: drop capabilities instead
    fs: bool = False  # the minimal root; needs a mount namespace we may mount in
    cgroup: bool = False  # one cgroup per run (tasks/judge/cgroup.py)
    seccomp: bool = False  # the seccomp filter (tasks/judge/seccomp.py)
    parent_death: bool = False  # the child dies with its parent, re-armed after the uid switch


def _interpreters() -> list[str]:
    """Same-version interpreters, system ones first: a dropped uid can read their stdlib even
    without the minimal root, and they expose nothing from a home directory."""
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    found = [f"/usr/bin/{ver}", shutil.which(ver), os.path.realpath(sys.executable)]
    return list(dict.fromkeys(p for p in found if p and os.access(p, os.X_OK)))


def _candidates() -> list[_Mode]:
    unshare, pythons = shutil.which("unshare"), _interpreters()
    extra = {"cgroup": isinstance(cgroup.backend(), cgroup.Backend),
             "seccomp": seccomp.supported(), "parent_death": sys.platform.startswith("linux")}
    # unshare dies with the judge (its --kill-child then ends the PID namespace's init); setpriv
    # sets that parent-death signal, which exec keeps, since Python's Popen has no option for it.
    setpriv = shutil.which("setpriv")
    guard = (setpriv, "--pdeathsig", "KILL", "--") if setpriv and unshare else ()
    modes = []
    if os.name == "posix" and os.geteuid() == 0:
        if unshare:
            ns = (*guard, unshare, *_NS_FLAGS, "--")
            modes += [_Mode(_NS_LABELS, py, ns, drop_uid=True, fs=True, **extra) for py in pythons]
        modes += [_Mode((), py, drop_uid=True, **extra) for py in pythons]
    elif unshare:
        ns = (*guard, unshare, "--user", "--map-root-user", *_NS_FLAGS, "--")
        modes.append(_Mode(("user-ns", *_NS_LABELS), sys.executable, ns, drop_caps=True, fs=True,
                           **extra))
    return modes + [_Mode((), sys.executable, **extra)]


def _probe(mode: _Mode) -> _Mode | None:
    """Run a script that imports after confinement; return the mode with the layers that took."""
    script = "import json, heapq, fractions\nprint(json.dumps(heapq.nsmallest(1, [3, 1])))"
    result = _run(mode, script, None, 20, 512, 32, 16, strict=False)
    got = result.layers
    if not result.ok or not got or result.stdout_tail.strip() != "[1]":
        return None
    labels = [*mode.labels, *(k.replace("_", "-") for k, v in got.items() if v)]
    return _Mode(tuple(labels), mode.python, mode.prefix, mode.drop_uid and got.get("uid_drop"),
                 mode.drop_caps and got.get("caps_dropped"), mode.fs and got.get("hidden_fs"),
                 mode.cgroup and got.get("cgroup"), mode.seccomp and got.get("seccomp"),
                 mode.parent_death and got.get("parent_death"))


@functools.lru_cache(maxsize=1)
def _mode() -> _Mode:
    chosen = next(filter(None, map(_probe, _candidates())), None)
    if chosen is None:
        chosen = _Mode(("rlimits",), sys.executable)
    _log.info("sandbox isolation: %s (%s)", chosen.labels, chosen.python)
    missing = missing_layers(_layers_of(chosen))
    if missing:
        why = cgroup.backend() if "cgroup" in missing else None
        _log.warning("sandbox is weaker on this host: missing %s%s", ", ".join(missing),
                     f" (cgroup: {why})" if isinstance(why, str) else "")
    return chosen


def _layers_of(mode: _Mode) -> dict[str, bool]:
    has = set(mode.labels)
    return {"user_ns": "user-ns" in has, "net_ns": "net-ns" in has, "pid_ns": "pid-ns" in has,
            "mount_ns": "mount-ns" in has, "ipc_ns": "ipc-ns" in has, "uts_ns": "uts-ns" in has,
            "hidden_fs": "hidden-fs" in has, "private_tmp": "private-tmp" in has,
            "identity": bool(has & {"uid-drop", "caps-dropped"}), "uid_drop": "uid-drop" in has,
            "caps_dropped": "caps-dropped" in has, "no_new_privs": "no-new-privs" in has,
            "seccomp": "seccomp" in has, "rlimits": "rlimits" in has, "cgroup": "cgroup" in has,
            "parent_death": "parent-death" in has}


def isolation() -> tuple[str, ...]:
    """The isolation layers `run_python` uses on this host, e.g. ("net-ns", "pid-ns", ...)."""
    return _mode().labels


def layers() -> dict[str, bool]:
    """Every sandbox layer by name, True when active on this host (probed once)."""
    return _layers_of(_mode())


def missing_layers(active: dict[str, bool] | None = None) -> list[str]:
    """The required layers (REQUIRED) this host lacks; empty when the sandbox is complete."""
    active = layers() if active is None else active
    return [name for name in REQUIRED if not active.get(name)]


def _limits(timeout_s: float, memory_mb: int, nproc: int, fsize_mb: int) -> dict[str, int]:
    limits = {"RLIMIT_AS": memory_mb << 20, "RLIMIT_CPU": math.ceil(timeout_s) + 1,
              "RLIMIT_FSIZE": fsize_mb << 20, "RLIMIT_NOFILE": 256, "RLIMIT_CORE": 0}
    if nproc:
        limits["RLIMIT_NPROC"] = nproc
    return limits


def _own_tasks() -> int:
    """Threads of this user: RLIMIT_NPROC counts them all, so a shared uid needs headroom."""
    count, uid = 0, os.getuid()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}").st_uid == uid:
                count += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            pass  # the process ended while we looked
    return count


def _nproc_limit(nproc: int, uid: int | None) -> int:
    if not nproc or uid is not None:
        return nproc  # a fresh uid owns nothing yet
    if os.geteuid() == 0 or not os.path.isdir("/proc"):
        return 0  # root ignores RLIMIT_NPROC; without /proc we cannot size it
    return _own_tasks() + nproc


def _kill_all(proc: subprocess.Popen, mode: _Mode, uid: int | None, timed_out: bool):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    # After a normal exit in a PID namespace the kernel has already killed everything in it.
    if uid is not None and (timed_out or "pid-ns" not in mode.labels):
        # Killing the PID namespace's init ends the namespace; kill(-1) as the uid reaches every
        # process of it, including ones that left the process group with setsid.
        sandbox_reaper.kill_uid(uid, mode.python)
    proc.wait()


def run_python(code: str, timeout_s: float = 5, memory_mb: int = 512, nproc: int = 32,
               fsize_mb: int = 16) -> SandboxResult:
    """Run `code` as a Python script in a sandbox and report how it ended.

    Args:
        code: Python source; untrusted.
        timeout_s: Wall-clock limit in seconds; CPU time is capped at ceil(timeout_s) + 1 s.
        memory_mb: Address-space limit (RLIMIT_AS) per process and, with a cgroup, the memory
            ceiling of all the program's processes and tmpfs pages together, in MiB.
        nproc: Processes (threads) the code may add. Exact with a dropped uid; for a normal
            user it is added to the user's current count; root ignores it. 0 leaves it unset.
        fsize_mb: Largest file the code may write, stdout and stderr included, in MiB.

    Returns:
        A SandboxResult; it never raises for anything the code does.
    """
    return _run(_mode(), code, None, timeout_s, memory_mb, nproc, fsize_mb)


def run_runner(script: str, args, timeout_s: float = 5, memory_mb: int = 512, nproc: int = 32,
               fsize_mb: int = 16) -> SandboxResult:
    """Run a *trusted* runner `script` (it gets `esbench_args` and `esbench_emit` as globals and
    runs the untrusted code itself); its emitted records come back in `records`."""
    return _run(_mode(), script, args, timeout_s, memory_mb, nproc, fsize_mb)


def _run(mode: _Mode, script: str, args, timeout_s: float, memory_mb: int, nproc: int,
         fsize_mb: int, strict: bool = True) -> SandboxResult:
    where = cgroup.backend()
    parents = where.parents if isinstance(where, cgroup.Backend) else ()
    with sandbox_reaper.judging(mode.python, tempfile.gettempdir(), parents):
        return _run_once(mode, script, args, timeout_s, memory_mb, nproc, fsize_mb, strict)


def _run_once(mode: _Mode, script: str, args, timeout_s: float, memory_mb: int, nproc: int,
              fsize_mb: int, strict: bool) -> SandboxResult:
    rng = random.SystemRandom()
    uid = rng.randrange(*_UID_RANGE) if mode.drop_uid else None
    nonce = f"{rng.getrandbits(128):032x}"
    runtime = sandbox_root.layout(mode.python) if mode.fs else None
    if isinstance(runtime, str):
        if strict:
            return SandboxResult(False, None, "", f"sandbox could not start: {runtime}", False)
        runtime = None  # the probe then sees hidden_fs fail
    group = None
    if mode.cgroup:
        try:  # named for the judge (tasks/judge/sandbox_reaper.py); the program can read this name
            group = cgroup.Cgroup(cgroup.backend(),
                                  f"esbench-{os.getpid()}-{rng.getrandbits(48):012x}",
                                  memory_mb << 20, nproc)
        except (OSError, AttributeError) as e:
            if strict:
                return SandboxResult(False, None, "", f"sandbox could not start: cgroup: {e}",
                                     False)
    outer = Path(tempfile.mkdtemp(prefix=f"esbench-sandbox-{os.getpid()}-"))  # pid: whose it is
    alive = ()
    try:
        alive = os.pipe()  # see _start
        work, root = outer / "work", outer / "root"
        work.mkdir()
        root.mkdir()
        if uid is not None:
            os.chmod(outer, 0o711)  # without the minimal root the uid still needs its cwd
            os.chown(work, uid, uid)
        payload = {"fs": mode.fs, "root": str(root), "scratch_mb": SCRATCH_MB, "uid": uid,
                   "drop_caps": mode.drop_caps, "no_new_privs": True, "strict": strict,
                   "limits": _limits(timeout_s, memory_mb, _nproc_limit(nproc, uid), fsize_mb),
                   "nonce": nonce, "script": script, "args": args, "runtime": runtime,
                   "cgroup_procs": group.procs if group else None,
                   "parent_death": mode.parent_death,
                   "seccomp": _seccomp_hex() if mode.seccomp else None}
        # Unnamed files (O_TMPFILE): nothing to leave behind, and /proc/self/fd inside shows no
        # path naming the judge.
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
                tempfile.TemporaryFile() as res:
            started = _start(mode, payload, work, out, err, res, alive)
            if isinstance(started, str):
                return SandboxResult(False, None, "", f"sandbox could not start: {started}", False)
            timed_out = False
            try:
                started.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            _kill_all(started, mode, uid, timed_out)  # also reaps stragglers after a normal exit
            peak = group.peak_bytes() if group else None
            oom = bool(group and group.oom_killed())
            got = sandbox_results.read_records(res, nonce)
            records = got.records
            return SandboxResult(
                ok=got.done and started.returncode == 0 and not timed_out and not oom,
                returncode=started.returncode,
                stdout_tail=sandbox_results.tail(out).rstrip("\n"),
                stderr_tail=sandbox_results.tail(err),
                timed_out=timed_out,
                records=tuple(r for r in records if not r.keys() & {"done", "layers"}),
                layers=next((r["layers"] for r in records if "layers" in r), {}),
                peak_memory_mb=None if peak is None else round(peak / (1 << 20), 1),
                out_of_memory=oom,
                over_limit=got.over_limit,
                over_limit_reason=got.reason,
            )
    finally:
        for fd in alive:
            os.close(fd)
        if group and not group.destroy():  # kills what is left in it first
            _log.warning("sandbox cgroup %s could not be removed", group.dirs)
        shutil.rmtree(outer, ignore_errors=True)


@functools.lru_cache(maxsize=1)
def _child_source() -> str:
    return _CHILD.read_text(encoding="utf-8")


@functools.lru_cache(maxsize=1)
def _seccomp_hex() -> str:
    return seccomp.program().hex()


def _start(mode: _Mode, payload: dict, work: Path, out, err, res,
           alive: tuple[int, int]) -> subprocess.Popen | str:
    """Start the child; the payload goes through an unlinked private file, not argv or a path
    the code could read later, and the result file is passed as an inherited fd. So is the pipe
    `alive`: the child closes its write end, so the read end sees EOF once this judge (and an
    `unshare` between, which inherits a copy) has ended; the child checks it after re-arming its
    parent-death signal (tasks/judge/sandbox_child.py), since getppid() reads 0 in a PID namespace."""
    # With the minimal root the child moves to /home/sandbox before any code runs; these are the
    # values /proc/self/environ keeps, so they name no host folder either.
    home = ("/home/sandbox", "/tmp") if mode.fs else (str(work), str(work))
    env = {"PATH": "/usr/bin:/bin", "HOME": home[0], "TMPDIR": home[1], "LANG": "C.UTF-8"}
    cmd = [*mode.prefix, mode.python, *_PY_FLAGS, "-c", _BOOT]
    with tempfile.TemporaryFile() as stdin:
        stdin.write(json.dumps(_child_source()).encode() + b"\n")
        stdin.write(json.dumps({**payload, "result_fd": res.fileno(),
                                "parent_fds": list(alive)}).encode())
        stdin.seek(0)
        try:
            return subprocess.Popen(cmd, cwd=work, env=env, stdin=stdin, stdout=out, stderr=err,
                                    start_new_session=True, pass_fds=(res.fileno(), *alive))
        except OSError as e:
            return str(e)
