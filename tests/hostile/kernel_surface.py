# Red-team probe: the kernel surface exploits start from. Each attempt prints its
# outcome as NAME=ok or NAME=<errno name>; a nested user namespace is tried in a forked child,
# as a completion would (the MBPP runner has threads). Solves nothing.
import ctypes, errno, os, socket

libc = ctypes.CDLL(None, use_errno=True)


def outcome(rc):
    return "ok" if rc >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")


def sock(family, kind, proto=0):
    try:
        socket.socket(family, kind, proto).close()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, "?")


def clone_newuser():
    """clone(CLONE_NEWUSER | SIGCHLD) as a raw syscall: a child that exits at once."""
    rc = libc.syscall(56 if os.uname().machine == "x86_64" else 220, 0x10000000 | 17, 0, 0, 0, 0)
    if rc == 0:
        os._exit(0)
    if rc > 0:
        os.waitpid(rc, 0)
    return outcome(rc)


r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(w, outcome(libc.unshare(0x10000000)).encode())  # CLONE_NEWUSER
    os._exit(0)
os.waitpid(pid, 0)
results = {"unshare_user": os.read(r, 64).decode(),
           "unshare_mount": outcome(libc.unshare(0x00020000)),
           "clone_newuser": clone_newuser(),
           "setns": outcome(libc.setns(0, 0)),
           "mount": outcome(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)),
           "af_packet": sock(17, socket.SOCK_RAW),
           "af_netlink": sock(16, socket.SOCK_RAW),
           "raw_inet": sock(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
           "io_uring_setup": outcome(libc.syscall(425, 4, ctypes.create_string_buffer(120))),
           "ptrace": outcome(libc.ptrace(0, 0, 0, 0)),
           "keyctl": outcome(libc.syscall(250 if os.uname().machine == "x86_64" else 219, 0,
                                          -3, 0, 0, 0)),
           "bpf": outcome(libc.syscall(321 if os.uname().machine == "x86_64" else 280, 0, 0, 0)),
           "tcp": sock(socket.AF_INET, socket.SOCK_STREAM),
           "unix": sock(socket.AF_UNIX, socket.SOCK_STREAM)}
for name, got in results.items():
    print(f"{name}={got}")
