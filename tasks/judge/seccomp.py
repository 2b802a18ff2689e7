"""The sandbox's seccomp filter: a classic BPF program, assembled here, that closes the kernel
surface untrusted code has no use for.

`program()` returns the filter as bytes (an array of `struct sock_filter`) for this machine's
architecture, or None where no syscall table is known; tasks/judge/sandbox_child.py installs it with
prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER) after its own setup (mounts, pivot, uid switch,
no_new_privs) and before the untrusted code runs. No third-party binding is needed: the program is
a few dozen 8-byte instructions.

What it does, in order:
- a syscall made with another ABI than the one the filter was built for (i386 or x32 on x86_64,
  arm32 on aarch64) kills the process: its numbers differ, so the rules below would not apply;
- new namespaces are refused with EPERM: unshare, setns, and clone with any CLONE_NEW* flag
  (flags are clone's first argument on both architectures). clone3 passes its flags in memory,
  which a classic filter cannot read, so it returns ENOSYS and glibc falls back to clone;
- mounts, ptrace, keyrings, io_uring, bpf, perf events and userfaultfd (the usual start of a
  kernel exploit, none needed by a Python program) are refused with EPERM;
- socket() and socketpair() are allowed for AF_UNIX only, every other family gets EPERM. An
  allow-list, because a deny-list misses families nobody thought of: AF_VSOCK was neither denied
  here nor separated by the network namespace (in a VM it may reach the host's services). MBPP
  and HumanEval code needs no network, and the stdlib's own plumbing (multiprocessing, asyncio's
  self-pipe, socketpair()) is AF_UNIX on Linux; AF_INET/AF_INET6 would only reach the namespace's
  loopback.

Refusals are EPERM rather than a kill, so a program that tries them fails cleanly with an OSError.

    python -m pytest tests/test_sandbox_hostile.py -q -k kernel_surface
"""
from __future__ import annotations

import os
import struct

# seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6] (little-endian on both).
_NR, _ARCH, _ARG0 = 0, 4, 16
_LD_ABS, _JEQ, _JSET, _RET = 0x20, 0x15, 0x45, 0x06
RET_KILL_PROCESS, RET_ALLOW, RET_ERRNO = 0x80000000, 0x7FFF0000, 0x00050000
EPERM, ENOSYS = 1, 38
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2

CLONE_NEW = (0x00000080 | 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000
             | 0x20000000 | 0x40000000)  # TIME, NS, CGROUP, UTS, IPC, USER, PID, NET
AF_UNIX = 1  # the one socket family allowed

# Per architecture: audit arch, syscall numbers, and the bit that marks another ABI (x32).
_COMMON = {"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
           "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
           "fspick": 433, "mount_setattr": 442, "clone3": 435}
ARCHES = {
    "x86_64": (0xC000003E, 0x40000000, {
        "clone": 56, "socket": 41, "socketpair": 53, "unshare": 272, "setns": 308, "mount": 165,
        "umount2": 166, "pivot_root": 155, "ptrace": 101, "process_vm_readv": 310,
        "process_vm_writev": 311, "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321,
        "perf_event_open": 298, "userfaultfd": 323, **_COMMON}),
    "aarch64": (0xC00000B7, None, {
        "clone": 220, "socket": 198, "socketpair": 199, "unshare": 97, "setns": 268, "mount": 40,
        "umount2": 39, "pivot_root": 41, "ptrace": 117, "process_vm_readv": 270,
        "process_vm_writev": 271, "keyctl": 219, "add_key": 217, "request_key": 218, "bpf": 280,
        "perf_event_open": 241, "userfaultfd": 282, **_COMMON}),
}
DENIED = ("unshare", "setns", "mount", "umount2", "pivot_root", "open_tree", "move_mount",
          "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "ptrace",
          "process_vm_readv", "process_vm_writev", "keyctl", "add_key", "request_key",
          "io_uring_setup", "io_uring_enter", "io_uring_register", "bpf", "perf_event_open",
          "userfaultfd")


def supported(machine: str | None = None) -> bool:
    """Whether a filter exists for this machine's architecture (os.uname().machine)."""
    return (machine or os.uname().machine) in ARCHES


def _assemble(code: list) -> bytes:
    """(opcode, jt, jf, k) tuples to bytes; jt/jf may name a label ("@name"), resolved to the
    relative jump BPF wants. A label is a ("@name",) entry of its own."""
    labels, body = {}, []
    for ins in code:
        if len(ins) == 1:
            labels[ins[0]] = len(body)
        else:
            body.append(ins)
    out = b""
    for i, (op, jt, jf, k) in enumerate(body):
        jt, jf = (labels[j] - i - 1 if isinstance(j, str) else j for j in (jt, jf))
        assert 0 <= jt < 256 and 0 <= jf < 256, "jump out of range"
        out += struct.pack("<HBBI", op, jt, jf, k)
    return out


def program(machine: str | None = None) -> bytes | None:
    """The filter for `machine` (default: this one) as sock_filter bytes; None if unknown."""
    arch = ARCHES.get(machine or os.uname().machine)
    if arch is None:
        return None
    audit, foreign_bit, nr = arch
    code = [(_LD_ABS, 0, 0, _ARCH), (_JEQ, 1, 0, audit), (_RET, 0, 0, RET_KILL_PROCESS),
            (_LD_ABS, 0, 0, _NR)]
    if foreign_bit:  # x32 syscalls carry this bit and their own numbers
        code.append((_JSET, "@kill", 0, foreign_bit))
    code += [(_JEQ, "@eperm", 0, nr[name]) for name in DENIED]
    code += [(_JEQ, "@enosys", 0, nr["clone3"]), (_JEQ, "@clone", 0, nr["clone"]),
             (_JEQ, "@socket", 0, nr["socket"]), (_JEQ, "@socket", 0, nr["socketpair"]),
             (_RET, 0, 0, RET_ALLOW),
             ("@clone",), (_LD_ABS, 0, 0, _ARG0), (_JSET, "@eperm", "@allow", CLONE_NEW),
             # the family is an int: the kernel reads the low 32 bits, as this load does
             ("@socket",), (_LD_ABS, 0, 0, _ARG0), (_JEQ, "@allow", "@eperm", AF_UNIX),
             ("@eperm",), (_RET, 0, 0, RET_ERRNO | EPERM),
             ("@enosys",), (_RET, 0, 0, RET_ERRNO | ENOSYS),
             ("@kill",), (_RET, 0, 0, RET_KILL_PROCESS),
             ("@allow",), (_RET, 0, 0, RET_ALLOW)]
    return _assemble(code)
