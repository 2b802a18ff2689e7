"""Socket families by allow-list: inside the sandbox socket() and socketpair()
work for AF_UNIX only; every other family, known to this kernel or not, fails with EPERM (the
seccomp filter's answer: the kernel itself says EAFNOSUPPORT for a family it lacks, and before
the allow-list AF_VSOCK stream and seqpacket sockets opened, a way out of the VM's network namespace).

MBPP and HumanEval code needs no network; the stdlib's own plumbing (socketpair(), asyncio's
self-pipe, multiprocessing) is AF_UNIX on Linux, and still works.

    python -m pytest tests/test_sandbox_sockets.py -x -q
"""
import errno

import pytest

from tasks.judge.sandbox import layers, run_python

AF_MAX = 46  # the kernel's families run 0..45 (AF_MCTP) today; a few beyond, for the future
NAMED = {"AF_UNSPEC": 0, "AF_UNIX": 1, "AF_INET": 2, "AF_AX25": 3, "AF_IPX": 4,
         "AF_APPLETALK": 5, "AF_INET6": 10, "AF_KEY": 15, "AF_NETLINK": 16, "AF_PACKET": 17,
         "AF_RDS": 21, "AF_LLC": 26, "AF_CAN": 29, "AF_TIPC": 30, "AF_BLUETOOTH": 31,
         "AF_NFC": 39, "AF_ALG": 38, "AF_VSOCK": 40, "AF_KCM": 41, "AF_QIPCRTR": 42,
         "AF_SMC": 43, "AF_XDP": 44, "AF_MCTP": 45}
KINDS = {"stream": 1, "dgram": 2, "raw": 3, "seqpacket": 5}

# One line per family: its number, then for stream dgram raw seqpacket socketpair "ok" or the
# errno number (stdout_tail keeps only 2,000 characters, so compact).
PROBE = f"""
import socket
def attempt(make):
    try:
        for s in make():
            s.close()
        return "ok"
    except OSError as e:
        return e.errno
for family in range({AF_MAX + 4}):
    got = [attempt(lambda: [socket.socket(family, n)]) for n in {list(KINDS.values())!r}]
    got.append(attempt(lambda: socket.socketpair(family, socket.SOCK_STREAM)))
    print(family, *got)
import asyncio
asyncio.new_event_loop().close()  # its self-pipe is a socketpair
print("asyncio ok")
"""


@pytest.fixture(scope="module")
def outcomes() -> dict:
    if not layers()["seccomp"]:
        pytest.skip("no seccomp layer on this host: no filter for this architecture, or prctl "
                    "refused")
    result = run_python(PROBE, timeout_s=30)
    assert result.ok, result.stderr_tail
    lines = [line.split() for line in result.stdout_tail.splitlines()]
    assert len(lines) == AF_MAX + 5, result.stdout_tail  # every family, and asyncio
    return {f"{line[0]} {kind}": got if got == "ok" else errno.errorcode.get(int(got), got)
            for line in lines for kind, got in zip((*KINDS, "pair"), line[1:])}


@pytest.mark.parametrize("name", sorted(set(NAMED) - {"AF_UNIX"}))
def test_family_is_refused(outcomes, name):
    family = NAMED[name]
    got = {k: outcomes[f"{family} {k}"] for k in (*KINDS, "pair")}
    assert got == dict.fromkeys(got, "EPERM"), f"{name}: {got}"


def test_every_other_family_number_is_refused(outcomes):
    """Families nobody named here (and ones the kernel does not have yet) are refused too."""
    wrong = {k: v for k, v in outcomes.items()
             if not k.startswith(("1 ", "asyncio")) and v != "EPERM"}
    assert not wrong, wrong


def test_unix_sockets_still_work(outcomes):
    assert {k: outcomes[f"1 {k}"] for k in ("stream", "dgram", "seqpacket", "pair")} == \
        dict.fromkeys(("stream", "dgram", "seqpacket", "pair"), "ok")
    assert outcomes["asyncio stream"] == "ok"
