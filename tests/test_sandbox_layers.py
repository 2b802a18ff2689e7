"""The sandbox's layers as pure logic, on any host: the seccomp program run through a small classic
BPF interpreter for each architecture it supports (aarch64 included, which no test host here
runs), cgroup detection and limits on fake v1 and v2 trees, and the minimal root's layout.
tests/test_sandbox_hostile.py checks the same layers against real attacks where the host has them.

    python -m pytest tests/test_sandbox_layers.py -q
"""
import os
import struct
import sys

import pytest

from tasks.judge import cgroup, sandbox_root, seccomp

ALLOW, EPERM = seccomp.RET_ALLOW, seccomp.RET_ERRNO | seccomp.EPERM
ENOSYS, KILL = seccomp.RET_ERRNO | seccomp.ENOSYS, seccomp.RET_KILL_PROCESS


def _run_bpf(program: bytes, nr: int, arch: int, *args: int) -> int:
    """Run a classic BPF seccomp program on one syscall; the verdict it returns."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *(list(args) + [0] * 6)[:6])
    code = [struct.unpack_from("<HBBI", program, i) for i in range(0, len(program), 8)]
    acc, pc = 0, 0
    while True:
        op, jt, jf, k = code[pc]
        if op == 0x20:  # ld [k]
            acc = struct.unpack_from("<I", data, k)[0]
        elif op == 0x54:  # and #k
            acc &= k
        elif op == 0x06:  # ret #k
            return k
        elif op in (0x15, 0x45):  # jeq / jset
            hit = acc == k if op == 0x15 else bool(acc & k)
            pc += jt if hit else jf
        else:
            raise AssertionError(f"unknown opcode {op:#x}")
        pc += 1


@pytest.mark.parametrize("machine", sorted(seccomp.ARCHES))
def test_seccomp_program_verdicts(machine):
    program = seccomp.program(machine)
    arch, foreign_bit, nr = seccomp.ARCHES[machine]
    verdict = lambda name, *args: _run_bpf(program, nr[name], arch, *args)  # noqa: E731
    must = ("unshare", "setns", "mount", "umount2", "pivot_root", "ptrace", "keyctl", "add_key",
            "request_key", "io_uring_setup", "io_uring_enter", "io_uring_register", "bpf",
            "perf_event_open", "userfaultfd")
    for name in {*must, *seccomp.DENIED}:
        assert verdict(name) == EPERM, name
    assert verdict("clone3") == ENOSYS  # glibc falls back to clone, whose flags we can read
    assert verdict("clone", 0x10000000 | 17) == EPERM  # CLONE_NEWUSER
    assert verdict("clone", 0x00020000) == EPERM  # CLONE_NEWNS
    assert verdict("clone", 0x003D0F00) == ALLOW  # what pthread_create passes
    assert verdict("clone", 17) == ALLOW  # fork
    for call in ("socket", "socketpair"):  # an allow-list: AF_UNIX (1) and nothing else
        for kind in (1, 2, 3, 5, 1 | 0x80000):  # stream, dgram, raw, seqpacket, cloexec stream
            assert verdict(call, 1, kind) == ALLOW, (call, kind)
            assert [f for f in range(64) if verdict(call, f, kind) != EPERM] == [1], (call, kind)
        assert verdict(call, 1 | 1 << 32) == ALLOW  # the kernel reads an int: family 1 too
        assert verdict(call, 1 | 1 << 8) == verdict(call, -1 & 0xFFFFFFFF) == EPERM
    assert _run_bpf(program, 0, arch) == ALLOW  # read / io_setup: an ordinary call
    assert _run_bpf(program, nr["unshare"], arch ^ 1) == KILL  # another ABI's numbers
    if foreign_bit:
        assert _run_bpf(program, foreign_bit | 0, arch) == KILL  # x32 read


def test_seccomp_unknown_arch_is_not_supported():
    assert seccomp.program("riscv64") is None and not seccomp.supported("riscv64")


_MOUNTINFO = """\
30 25 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
35 30 0:30 /docker/abc /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 30 0:31 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
37 30 0:32 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
40 25 8:1 / / rw - ext4 /dev/sda1 rw
"""


def test_cgroup_mountinfo_and_paths(tmp_path, monkeypatch):
    info = tmp_path / "mountinfo"
    info.write_text(_MOUNTINFO)
    real_open = open
    monkeypatch.setattr("builtins.open", lambda p, *a, **k: real_open(
        info if p == "/proc/self/mountinfo" else p, *a, **k))
    mounts = cgroup._mountinfo()
    assert [(m[1], m[2]) for m in mounts] == [("/sys/fs/cgroup/memory", "cgroup"),
                                             ("/sys/fs/cgroup/pids", "cgroup"),
                                             ("/sys/fs/cgroup/unified", "cgroup2")]
    assert "memory" in mounts[0][3]
    # A container sees its own cgroup at the mount's root: no path is doubled.
    assert cgroup._join("/sys/fs/cgroup/memory", "/docker/abc", "/docker/abc/job") == \
        "/sys/fs/cgroup/memory/job"
    assert cgroup._join("/sys/fs/cgroup/pids", "/", "/") == "/sys/fs/cgroup/pids"


def _fake_v2(tmp_path, controllers="cpu memory pids"):
    (tmp_path / "me").mkdir()
    (tmp_path / "me" / "cgroup.controllers").write_text(controllers)
    (tmp_path / "me" / "cgroup.subtree_control").write_text("")
    mounts = [("/", str(tmp_path), "cgroup2", {"rw"})]
    return mounts, {"": "/me"}


def test_cgroup_v2_backend_and_limits(tmp_path):
    where = cgroup._v2(*_fake_v2(tmp_path))
    assert where == cgroup.Backend(2, (str(tmp_path / "me"),))
    assert (tmp_path / "me" / "cgroup.subtree_control").read_text() == "+memory +pids"
    group = cgroup.Cgroup(where, "run", 128 << 20, 32)
    run = tmp_path / "me" / "run"
    assert {f: (run / f).read_text() for f in ("memory.max", "memory.swap.max",
                                              "memory.oom.group", "pids.max")} == \
        {"memory.max": str(128 << 20), "memory.swap.max": "0", "memory.oom.group": "1",
         "pids.max": "32"}
    assert group.procs == [f"{run}/cgroup.procs"]


def test_cgroup_v2_without_delegation_says_why(tmp_path):
    why = cgroup._v2(*_fake_v2(tmp_path, controllers="cpu hugetlb"))
    assert isinstance(why, str) and "not delegated" in why


def test_cgroup_v1_backend_and_limits(tmp_path):
    memory, pids = tmp_path / "memory" / "job", tmp_path / "pids"
    memory.mkdir(parents=True)
    pids.mkdir()
    (memory / "memory.memsw.limit_in_bytes").write_text("")
    mounts = [("/", str(tmp_path / "memory"), "cgroup", {"rw", "memory"}),
              ("/", str(pids), "cgroup", {"rw", "pids"})]
    where = cgroup._v1(mounts, {"memory": "/job", "pids": "/"})
    assert where == cgroup.Backend(1, (str(memory), str(pids)), memsw=True)
    group = cgroup.Cgroup(where, "run", 64 << 20, 0)
    assert (memory / "run" / "memory.limit_in_bytes").read_text() == str(64 << 20)
    assert (memory / "run" / "memory.memsw.limit_in_bytes").read_text() == str(64 << 20)
    assert (pids / "run" / "pids.max").read_text() == "max"
    assert len(group.procs) == 2
    assert "no cgroup v1 pids" in cgroup._v1(mounts[:1], {"memory": "/job"})


def test_cgroup_backend_answers_on_this_host():
    where = cgroup.backend()
    assert isinstance(where, (cgroup.Backend, str)) and where  # a backend, or why not


def test_elf_interpreter_of_this_python():
    loader = sandbox_root.elf_interpreter(os.path.realpath(sys.executable))
    if loader is None:
        pytest.skip("this interpreter is static or not a 64-bit ELF")
    assert loader.startswith("/") and "ld" in os.path.basename(loader)


def test_hidden_below_finds_site_packages(tmp_path):
    for sub in ("lib/python3.11/site-packages", "lib/python3/dist-packages/x", "lib/other"):
        (tmp_path / sub).mkdir(parents=True)
    assert sandbox_root._hidden_below([str(tmp_path / "lib")]) == [
        str(tmp_path / "lib/python3.11/site-packages"), str(tmp_path / "lib/python3/dist-packages")]


def test_layout_never_shows_usr_or_site_packages():
    got = sandbox_root.layout(os.path.realpath(sys.executable))
    if isinstance(got, str):
        pytest.skip(got)
    assert "/usr" not in got["expose"] and "/" not in got["expose"]
    assert not any(p.rstrip("/").endswith(("site-packages", "dist-packages"))
                   for p in got["expose"])
    assert os.path.realpath(sys.executable) in got["expose"]
