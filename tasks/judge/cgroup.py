"""One memory and process ceiling per sandboxed program: a cgroup per run, v2 or v1.

RLIMIT_AS limits each process, so forked children (or tmpfs pages, which belong to no process)
multiply it. A cgroup counts every process of the program, and every page it creates, against one
limit. tasks/judge/sandbox.py creates one per run below the harness's own cgroup (so the host's limits
on the harness still apply above it), with:

- v2 (`/sys/fs/cgroup` is cgroup2, with memory and pids delegated to the harness's cgroup):
  memory.max, memory.swap.max=0, memory.oom.group=1 (one OOM kill ends the whole program),
  pids.max;
- v1 (separate `memory` and `pids` hierarchies, as on older hosts and some VMs):
  memory.limit_in_bytes with memory.memsw.limit_in_bytes equal to it (no swap; where the kernel
  does not account swap the host must have none), and pids.max.

The sandboxed program joins by writing "0" to each `procs` file before it drops root
(tasks/judge/sandbox_child.py), so nothing untrusted ever runs outside it. After the run `destroy()`
kills whatever is left in it and removes it. `backend()` says why not when the host has neither
(no cgroup filesystem, controllers not delegated, not writable): the sandbox then reports the
"cgroup" layer missing.

    python -m pytest tests/test_sandbox_hostile.py -q -k ceiling
"""
from __future__ import annotations

import functools
import os
import signal
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Backend:
    version: int  # 1 or 2
    parents: tuple[str, ...]  # where per-run cgroups go: v2 one dir; v1 the memory and pids dirs
    memsw: bool = False  # v1: swap is accounted (memory.memsw.*)


def _mountinfo() -> list[tuple[str, str, str, set]]:
    """(root inside the fs, mount point, fs type, super options) of every cgroup mount."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, rfields = left.split(), right.split()
            if rfields and rfields[0] in ("cgroup", "cgroup2"):
                out.append((fields[3], fields[4], rfields[0], set(rfields[2].split(","))))
    return out


def _own_paths() -> dict[str, str]:
    """Controller (or "" for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    paths = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                paths[name] = path
    return paths


def _join(mount: str, root: str, path: str) -> str:
    """The directory of cgroup `path` under a mount of the hierarchy at `root`."""
    if root != "/" and path.startswith(root):
        path = path[len(root):]
    return os.path.join(mount, path.lstrip("/")).rstrip("/")


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _write(path: str, value) -> None:
    with open(path, "w") as f:
        f.write(str(value))


def _swap_total() -> int:
    with open("/proc/meminfo") as f:
        return next((int(line.split()[1]) for line in f if line.startswith("SwapTotal:")), 0)


def _v2(mounts, own) -> Backend | str:
    mount = next((m for m in mounts if m[2] == "cgroup2"), None)
    if mount is None or "" not in own:
        return "no cgroup2 mount"
    parent = _join(mount[1], mount[0], own[""])
    try:
        available = set(_read(f"{parent}/cgroup.controllers").split())
    except OSError as e:
        return f"cgroup2 at {parent}: {e.strerror}"
    if not {"memory", "pids"} <= available:
        return f"cgroup2 at {parent} has no memory and pids controllers (not delegated)"
    try:
        if not {"memory", "pids"} <= set(_read(f"{parent}/cgroup.subtree_control").split()):
            _write(f"{parent}/cgroup.subtree_control", "+memory +pids")
    except OSError as e:
        # A cgroup with processes of its own cannot hand controllers to children (EBUSY).
        return (f"cgroup2 at {parent}: cannot enable memory and pids for child cgroups "
                f"({e.strerror}); run the harness in a delegated cgroup of its own, e.g. "
                "systemd-run --user --scope -p Delegate=yes python -m harness ...")
    if not os.access(parent, os.W_OK):
        return f"cgroup2 at {parent} is not writable"
    return Backend(2, (parent,))


def _v1(mounts, own) -> Backend | str:
    dirs = []
    for controller in ("memory", "pids"):
        mount = next((m for m in mounts if m[2] == "cgroup" and controller in m[3]), None)
        if mount is None or controller not in own:
            return f"no cgroup v1 {controller} hierarchy"
        parent = _join(mount[1], mount[0], own[controller])
        if not os.access(parent, os.W_OK):
            return f"cgroup v1 {controller} at {parent} is not writable"
        dirs.append(parent)
    memsw = os.path.exists(f"{dirs[0]}/memory.memsw.limit_in_bytes")
    if not memsw and _swap_total():
        return "cgroup v1 memory does not account swap (memsw) and the host has swap"
    return Backend(1, tuple(dirs), memsw)


@functools.lru_cache(maxsize=1)
def backend() -> Backend | str:
    """The cgroup setup this host allows, or a one-line reason why there is none."""
    if not os.path.exists("/proc/self/mountinfo"):
        return "no /proc/self/mountinfo (not Linux)"
    try:
        mounts, own = _mountinfo(), _own_paths()
    except (OSError, ValueError) as e:
        return f"cannot read the cgroup setup: {e}"
    v2 = _v2(mounts, own)
    if isinstance(v2, Backend):
        return v2
    v1 = _v1(mounts, own)
    return v1 if isinstance(v1, Backend) else f"{v2}; {v1}"


class Cgroup:
    """One run's cgroup: created with its limits, joined by the program, destroyed after."""

    def __init__(self, where: Backend, name: str, memory_bytes: int, pids: int):
        self.backend, self.dirs = where, tuple(f"{p}/{name}" for p in where.parents)
        made = []
        try:
            for d in self.dirs:
                os.mkdir(d, 0o755)
                made.append(d)
            if where.version == 2:
                d = self.dirs[0]
                _write(f"{d}/memory.max", memory_bytes)
                _write(f"{d}/memory.swap.max", 0)
                _try_write(f"{d}/memory.oom.group", 1)  # kernels before 4.19 lack it
                _write(f"{d}/pids.max", pids or "max")
            else:
                memory, pid_dir = self.dirs
                _write(f"{memory}/memory.limit_in_bytes", memory_bytes)
                if where.memsw:  # after the memory limit: memsw may never be below it
                    _write(f"{memory}/memory.memsw.limit_in_bytes", memory_bytes)
                _write(f"{pid_dir}/pids.max", pids or "max")
        except OSError:
            for d in reversed(made):
                _rmdir(d)
            raise

    @property
    def procs(self) -> list[str]:
        """The files the program writes "0" to, to join."""
        return [f"{d}/cgroup.procs" for d in self.dirs]

    def _memory_file(self, v1: str, v2: str) -> str:
        return f"{self.dirs[0]}/{v2 if self.backend.version == 2 else v1}"

    def peak_bytes(self) -> int | None:
        """The most memory the program held at once (None where the kernel does not say)."""
        try:
            return int(_read(self._memory_file("memory.max_usage_in_bytes", "memory.peak")))
        except (OSError, ValueError):
            return None

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of the program for reaching the memory limit."""
        try:
            text = _read(self._memory_file("memory.oom_control", "memory.events"))
        except OSError:
            return False
        counts = dict(line.split() for line in text.splitlines() if len(line.split()) == 2)
        return int(counts.get("oom_kill", 0)) > 0

    def destroy(self, wait_s: float = 5) -> bool:
        """Kill every process still in the cgroup, then remove it; False if it could not be
        removed within `wait_s`. Never raises."""
        deadline = time.monotonic() + wait_s
        for d in self.dirs:
            while True:
                pids = _procs(d)
                if not pids or time.monotonic() > deadline:
                    break
                if os.path.exists(f"{d}/cgroup.kill"):
                    _try_write(f"{d}/cgroup.kill", 1)
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass  # gone already
                time.sleep(0.01)
        removed = True
        for d in reversed(self.dirs):
            while not _rmdir(d):
                if time.monotonic() > deadline:
                    removed = False
                    break
                time.sleep(0.01)  # killed tasks leave the cgroup when they are reaped
        return removed


def _procs(d: str) -> list[int]:
    try:
        return [int(p) for p in _read(f"{d}/cgroup.procs").split()]
    except (OSError, ValueError):
        return []


def _try_write(path: str, value) -> None:
    try:
        _write(path, value)
    except OSError:
        pass


def _rmdir(d: str) -> bool:
    try:
        os.rmdir(d)
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False
