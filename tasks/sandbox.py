"""Run untrusted (model-written) Python in a throwaway, resource-limited process.

Nothing from a completion is ever eval'd or exec'd in the harness process. `run_python` writes the
code to a fresh temporary directory and runs it with the strongest isolation this host allows,
probed once and reported by `isolation()`:

- as root with util-linux `unshare` (the Linux dev box and most containers): new network (loopback
  only), PID (with its own /proc), mount, IPC and UTS namespaces, and a random unprivileged uid/gid
  per call, so the code cannot touch files it does not own and RLIMIT_NPROC (which root ignores)
  stops fork bombs;
- as root without `unshare`: the random uid only; as a normal user with unprivileged user
  namespaces: `unshare --user --map-root-user` plus the same namespaces; otherwise rlimits only
  (RLIMIT_NPROC then sized from the user's current process count).

A dropped uid must be able to execute the interpreter: when this one lives under a private home
(a pyenv in /root), the first same-version interpreter it can run is used instead (e.g.
/usr/bin/python3.11); the probe checks the whole path a real run takes.

Always: `python -I -S -B -u` (no PYTHON* variables, no site-packages or .pth hooks; stdlib only),
an environment of PATH, HOME, TMPDIR and LANG only (HOME and cwd are the temp dir; no secrets),
stdin closed, stdout/stderr to size-limited files (a pipe could fill the harness's memory), rlimits
on address space, CPU time, processes, file size and open files, a wall-clock timeout that kills
the process group and, when a uid is dropped, every process of that uid (a child that calls setsid
leaves the process group). The rlimits are set by a one-line prologue in the child rather than in
`preexec_fn`, which is unsafe when the harness scores in threads; a dropped uid cannot raise them.

`ok` means exit status 0 *and* a per-call random sentinel printed after the code, so a program that
calls `os._exit(0)` or `sys.exit(0)` early, or closes stdout, fails. Limits: code that reads its own
source could forge the sentinel, and world-writable dirs (/tmp) stay writable; this is a training
sandbox, not a security boundary for adversaries who target it.

    python -m pytest tests/test_task_mbpp.py -q
"""
from __future__ import annotations

import functools
import logging
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

TAIL_CHARS = 2000
_UID_RANGE = (1_000_000_000, 2_000_000_000)  # far above real and subuid ranges
_PY_FLAGS = ["-I", "-S", "-B", "-u"]  # -u keeps the sentinel after earlier prints
_NS_FLAGS = ["--net", "--pid", "--fork", "--mount-proc", "--ipc", "--uts", "--kill-child"]


@dataclass(frozen=True)
class SandboxResult:
    """What one sandboxed run did. `ok` is True only if the code ran to its end and exited 0."""

    ok: bool
    returncode: int | None
    stdout_tail: str
    stderr_tail: str
    timed_out: bool


@dataclass(frozen=True)
class _Mode:
    labels: tuple[str, ...]
    python: str
    prefix: tuple[str, ...] = ()  # {uid} and {gid} are filled in per call
    drop_uid: bool = False  # via subprocess(user=...) when there is no prefix to do it


def _fill(args, uid: int) -> list[str]:
    return [a.format(uid=uid, gid=uid) for a in args]


def _interpreters() -> list[str]:
    """This interpreter, then same-version ones a dropped uid may be able to execute."""
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    found = [sys.executable, os.path.realpath(sys.executable), shutil.which(ver), f"/usr/bin/{ver}"]
    return list(dict.fromkeys(p for p in found if p and os.access(p, os.X_OK)))


def _probe(mode: _Mode) -> bool:
    """Whether `mode` runs a script exactly as run_python will (temp dirs, uid, namespaces)."""
    result = _run(mode, "import os; print(os.getuid())", 20, 512, 32, 16)
    uid = result.stdout_tail.strip()
    return result.ok and ("uid-drop" not in mode.labels or int(uid) >= _UID_RANGE[0])


@functools.lru_cache(maxsize=1)
def _mode() -> _Mode:
    unshare = shutil.which("unshare")
    pythons = _interpreters()
    candidates = []
    if os.name == "posix" and os.geteuid() == 0:
        if unshare:
            ns = (unshare, *_NS_FLAGS, "--setgid", "{gid}", "--setuid", "{uid}", "--")
            labels = ("net-ns", "pid-ns", "mount-ns", "ipc-ns", "uts-ns", "uid-drop", "rlimits")
            candidates += [_Mode(labels, py, ns) for py in pythons]
        candidates += [_Mode(("uid-drop", "rlimits"), py, drop_uid=True) for py in pythons]
    elif unshare:
        ns = (unshare, "--user", "--map-root-user", *_NS_FLAGS, "--")
        candidates.append(_Mode(("user-ns", "net-ns", "pid-ns", "mount-ns", "ipc-ns", "uts-ns",
                                 "rlimits"), sys.executable, ns))
    chosen = next((m for m in candidates if _probe(m)), _Mode(("rlimits",), sys.executable))
    logging.getLogger(__name__).info("sandbox isolation: %s (%s)", chosen.labels, chosen.python)
    return chosen


def isolation() -> tuple[str, ...]:
    """The isolation layers `run_python` uses on this host, e.g. ("net-ns", "pid-ns", ...)."""
    return _mode().labels


def _prologue(timeout_s: float, memory_mb: int, nproc: int, fsize_mb: int) -> str:
    limits = {"RLIMIT_AS": memory_mb << 20, "RLIMIT_CPU": math.ceil(timeout_s) + 1,
              "RLIMIT_FSIZE": fsize_mb << 20, "RLIMIT_NOFILE": 256, "RLIMIT_CORE": 0}
    if nproc:
        limits["RLIMIT_NPROC"] = nproc
    # One line, so a traceback's line numbers are off by exactly one. A hard limit can only be
    # lowered, so never ask for more than the current one.
    return ("import resource as _r; [_r.setrlimit(_k, (_v, _v) if _h == _r.RLIM_INFINITY else "
            "(min(_v, _h),) * 2) for _k, _v, _h in ((getattr(_r, _n), _v, "
            f"_r.getrlimit(getattr(_r, _n))[1]) for _n, _v in {limits!r}.items())]; del _r\n")


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


def _tail(path: Path, sentinel: str = "") -> str:
    text = path.read_bytes()[-(TAIL_CHARS * 4):].decode("utf-8", "replace")
    return text.replace(sentinel, "")[-TAIL_CHARS:] if sentinel else text[-TAIL_CHARS:]


def _kill_all(proc: subprocess.Popen, mode: _Mode, uid: int | None, timed_out: bool):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    # After a normal exit in a PID namespace the kernel has already killed everything in it.
    if uid is not None and (timed_out or "pid-ns" not in mode.labels):
        # kill(-1) sent *as* the sandbox uid reaches every process of that uid, including ones that
        # left the process group with setsid; killing the PID namespace's init ends the namespace.
        # The probed interpreter is known to run as a dropped uid; kill(1) binaries parse -1 oddly.
        kill = "import os, signal; os.kill(-1, signal.SIGKILL)"
        try:
            subprocess.run([mode.python, "-I", "-S", "-c", kill], user=uid, group=uid,
                           extra_groups=[], env={"PATH": "/usr/bin:/bin"}, cwd="/",
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            pass  # nothing left to kill, or the host is in trouble; never fail the caller
    proc.wait()


def run_python(code: str, timeout_s: float = 5, memory_mb: int = 512, nproc: int = 32,
               fsize_mb: int = 16) -> SandboxResult:
    """Run `code` as a Python script in a sandbox and report how it ended.

    Args:
        code: Python source; untrusted.
        timeout_s: Wall-clock limit in seconds; CPU time is capped at ceil(timeout_s) + 1 s.
        memory_mb: Address-space limit (RLIMIT_AS) in MiB.
        nproc: Processes (threads) the code may add. Exact with a dropped uid; for a normal
            user it is added to the user's current count; root ignores it. 0 leaves it unset.
        fsize_mb: Largest file the code may write, stdout and stderr included, in MiB.

    Returns:
        A SandboxResult; it never raises for anything the code does.
    """
    return _run(_mode(), code, timeout_s, memory_mb, nproc, fsize_mb)


def _run(mode: _Mode, code: str, timeout_s: float, memory_mb: int, nproc: int,
         fsize_mb: int) -> SandboxResult:
    uid = random.SystemRandom().randrange(*_UID_RANGE) if "uid-drop" in mode.labels else None
    sentinel = f"esbench-sandbox-done-{random.SystemRandom().getrandbits(64):016x}"
    outer = Path(tempfile.mkdtemp(prefix="esbench-sandbox-"))
    try:
        work = outer / "work"
        work.mkdir()
        script = outer / "main.py"
        epilogue = f"\nimport os as _o; _o.write(1, b'\\n{sentinel}\\n')\n"
        prologue = _prologue(timeout_s, memory_mb, _nproc_limit(nproc, uid), fsize_mb)
        script.write_text(prologue + code + epilogue, encoding="utf-8")
        if uid is not None:
            os.chmod(outer, 0o711)  # the uid may enter and read main.py but not list or write
            script.chmod(0o644)
            os.chown(work, uid, uid)
        env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "TMPDIR": str(work),
               "LANG": "C.UTF-8"}
        cmd = _fill(mode.prefix, uid or 0) + [mode.python, *_PY_FLAGS, str(script)]
        user = dict(user=uid, group=uid, extra_groups=[]) if mode.drop_uid else {}
        with open(outer / "stdout", "wb") as out, open(outer / "stderr", "wb") as err:
            try:
                proc = subprocess.Popen(cmd, cwd=work, env=env, stdin=subprocess.DEVNULL,
                                        stdout=out, stderr=err, start_new_session=True, **user)
            except OSError as e:
                return SandboxResult(False, None, "", f"sandbox could not start: {e}", False)
            timed_out = False
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            _kill_all(proc, mode, uid, timed_out)  # also reaps stragglers after a normal exit
        finished = sentinel.encode() in (outer / "stdout").read_bytes()
        return SandboxResult(
            ok=finished and proc.returncode == 0 and not timed_out,
            returncode=proc.returncode,
            stdout_tail=_tail(outer / "stdout", sentinel).rstrip("\n"),
            stderr_tail=_tail(outer / "stderr"),
            timed_out=timed_out,
        )
    finally:
        shutil.rmtree(outer, ignore_errors=True)
