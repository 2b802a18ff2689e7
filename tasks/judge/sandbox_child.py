"""The first thing that runs inside the sandbox: confine this process, then run the given script.

Started by tasks/judge/sandbox.py inside fresh namespaces as `python -I -S -B -u -c <boot>`, where boot
reads this file's source from stdin's first line (so no host path shows in argv, /proc/1/cmdline
or a code object), it reads one JSON payload from the rest of stdin and, before any untrusted code
runs:

1. cgroup: joins the run's cgroup(s) (tasks/judge/cgroup.py), so one memory and pids ceiling covers
   every process it will start and every tmpfs page they write;
2. filesystem: in its own mount namespace, builds a minimal root on a small tmpfs and pivots into
   it: only what the interpreter loads (tasks/judge/sandbox_root.py: its binary, stdlib, lib-dynload
   and shared-library directories, /bin/sh and /bin/sleep) bound read-only and nosuid at the same
   paths, every site-packages below them covered by an empty tmpfs, a few /dev nodes, a fresh
   /proc, and one size-capped tmpfs shared by /tmp, /dev/shm and the home dir. The project, its
   data files however installed, /usr as a whole and every home are absent, and whatever the code
   writes vanishes with the run;
3. identity: as real root, switches to the random uid/gid it was given; as root of a user
   namespace, drops every capability (and sets user.max_user_namespaces to 0 in that namespace,
   never in the host's);
4. parent_death: the uid switch cleared the parent-death signal `unshare --kill-child` set, so a
   killed judge left the program running; it is set again (SIGKILL), then the pipe the judge
   passed is checked: EOF means the parent was gone before the signal was armed (getppid() cannot
   say: it reads 0 in a PID namespace), and the child exits;
5. no_new_privs (prctl), so no later execve can gain privileges;
6. rlimits, set after the switch so the code cannot raise them;
7. seccomp: the filter tasks/judge/seccomp.py assembled (no new namespaces, mounts, ptrace, keyrings,
   io_uring, bpf, sockets other than AF_UNIX), installed last because the steps above need some
   of those calls;

then writes a `layers` record saying what it applied, execs the script as `__main__` in a fresh
namespace and writes a `done` record when the script returned. Records go to an inherited fd, one
per line, prefixed by a per-run nonce the parent chose; stdout and stderr are for humans only.
With `strict` a layer that cannot be applied ends the run (exit 125): a sandbox that silently got
weaker would be worse than one that fails. Python without site-packages only; this file comes
on stdin, so it need not exist inside the new root.
"""
import ctypes
import json
import os
import resource
import sys
import traceback

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
PR_SET_PDEATHSIG, SIGKILL = 1, 9
CLONE_NEWCGROUP = 0x02000000
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
INIT_USER_NS_INO = 0xEFFFFFFD  # the kernel's fixed inode number of the host's user namespace
DEV_NODES = ("null", "zero", "full", "random", "urandom")
HOME = "/home/sandbox"

_libc = ctypes.CDLL(None, use_errno=True)


class LayerError(Exception):
    """A confinement step failed; the message names the step."""


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise LayerError(f"{what}: {os.strerror(err)}")


def _mount(src, target, fstype, flags, data=None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    _check(_libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
           f"mount {target}")


def _bind_ro(src: str, target: str) -> None:
    """Bind `src` at `target` read-only and nosuid (a bind ignores flags until remounted)."""
    _mount(src, target, None, MS_BIND | MS_REC)
    _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _bind_file(src: str, target: str) -> None:
    with open(target, "w"):
        pass
    _mount(src, target, None, MS_BIND)


def _expose(root: str, path: str, bound: set, hops: int = 0) -> None:
    """Show host `path` at the same path inside `root`, read-only: each symlink on the way is
    recreated and followed (so /lib64/ld-linux-x86-64.so.2 resolves as on the host), and the
    target, a directory or a file, is bound. Paths below one already bound are left alone."""
    if hops > 16:
        raise LayerError(f"expose {path}: too many symlinks")
    parts, here = [p for p in path.split("/") if p], ""
    for i, part in enumerate(parts):
        here += "/" + part
        if not os.path.lexists(here):
            return  # the host lacks it; nothing to show
        covered = any(here == b or here.startswith(b + "/") for b in bound)
        if os.path.islink(here):
            link = os.readlink(here)
            if not covered and not os.path.lexists(root + here):
                os.symlink(link, root + here)
            target = os.path.join(os.path.dirname(here), link, *parts[i + 1:])
            return _expose(root, os.path.normpath(target), bound, hops + 1)
        if covered:
            continue
        if i < len(parts) - 1 or os.path.isdir(here):
            os.makedirs(root + here, exist_ok=True)
        if i == len(parts) - 1:
            if not os.path.isdir(here):
                with open(root + here, "w"):
                    pass
            _bind_ro(here, root + here)
            bound.add(here)


def _hide(root: str, path: str) -> None:
    """Cover a directory (site-packages) with an empty read-only tmpfs."""
    target = root + path
    if os.path.isdir(target) and not os.path.islink(target):
        _mount("tmpfs", target, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
               "size=4k,nr_inodes=1,mode=555")


def _build_root(root: str, scratch_mb: int, uid: int | None, runtime: dict | None) -> None:
    """Mount the minimal root at `root` (see the module docstring), nothing from the host rw."""
    if not runtime:
        raise LayerError("no runtime layout to build the root from")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing below propagates back to the host
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=4096,mode=755")
    bound = set()
    for path in runtime["expose"]:
        _expose(root, path, bound)
    for path in runtime["hide"]:
        _hide(root, path)
    scratch = f"{root}/.scratch"
    os.makedirs(scratch)
    _mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV,
           f"size={scratch_mb}m,nr_inodes=16384,mode=755")
    os.makedirs(f"{root}/dev")
    for node in DEV_NODES:
        _bind_file(f"/dev/{node}", f"{root}/dev/{node}")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{root}/dev/{name}")
    for sub, inside, mode in (("tmp", "/tmp", 0o1777), ("shm", "/dev/shm", 0o1777),
                              ("home", HOME, 0o700)):
        os.makedirs(f"{scratch}/{sub}")
        os.chmod(f"{scratch}/{sub}", mode)
        if uid is not None and sub == "home":
            os.chown(f"{scratch}/{sub}", uid, uid)
        os.makedirs(root + inside, exist_ok=True)
        _mount(f"{scratch}/{sub}", root + inside, None, MS_BIND)
    os.makedirs(f"{root}/proc")
    try:
        _mount("proc", f"{root}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except LayerError:
        pass  # Python does not need /proc; some containers forbid a fresh one
    _pivot(root)


def _pivot(root: str) -> None:
    """Make `root` the root and detach the old one, so not even a chroot escape can reach it."""
    os.chdir(root)
    number = SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise LayerError(f"pivot_root: unknown syscall number on {os.uname().machine}")
    _check(_libc.syscall(number, b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "detach the old root")
    os.chdir("/")


def _drop_identity(uid: int | None) -> str:
    """Real root: become `uid`. Root of a user namespace: drop every capability."""
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        return "uid_drop"

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    _no_user_namespaces()
    data = (Data * 2)()  # all zero: no capabilities
    _check(_libc.capset(ctypes.byref(Header(0x20080522, 0)), data), "capset")
    return "caps_dropped"


def _no_user_namespaces() -> None:
    """In our own user namespace only, allow no nested ones (seccomp refuses them too). The
    sysctl is per user namespace; in the host's it would change the whole machine, so never
    there."""
    try:
        if os.stat("/proc/self/ns/user").st_ino == INIT_USER_NS_INO:
            return
        with open("/proc/sys/user/max_user_namespaces", "w") as f:
            f.write("0")
    except OSError:
        pass  # no /proc in the new root, or the kernel refuses: seccomp still applies


def _parent_death(alive_fd: int | None) -> None:
    """Die with the parent: arm the signal, then see whether the parent already went."""
    _check(_libc.prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    if alive_fd is None:
        return
    os.set_blocking(alive_fd, False)
    try:
        gone = os.read(alive_fd, 1) == b""  # EOF: every write end closed, so no parent holds one
    except BlockingIOError:
        gone = False
    if gone:
        os._exit(125)  # the judge is gone: nobody would read a result or end this run


def _no_new_privs() -> None:
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


def _join_cgroup(procs: list) -> None:
    """Move this process into the run's cgroup(s) while it is still root and alone, then into
    a cgroup namespace rooted there, so /proc/self/cgroup shows "/" rather than the host's path
    with the judge's pid in it (kernels before 4.6 have none: the path then shows)."""
    for path in procs:
        try:
            with open(path, "w") as f:
                f.write("0")
        except OSError as e:
            raise LayerError(f"join {path}: {e.strerror}") from None
    _libc.unshare(CLONE_NEWCGROUP)


def _seccomp(program_hex: str) -> None:
    """Install the filter (bytes of struct sock_filter) on this, the only, thread."""
    program = bytes.fromhex(program_hex)

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buf = ctypes.create_string_buffer(program, len(program))
    prog = Fprog(len(program) // 8, ctypes.addressof(buf))
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0),
           "prctl(PR_SET_SECCOMP)")


def _set_limits(limits: dict) -> None:
    """Lower each rlimit; a hard limit can only go down, so never ask for more than it is."""
    for name, value in limits.items():
        key = getattr(resource, name)
        hard = resource.getrlimit(key)[1]
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(key, (value, value))


def _confine(p: dict) -> dict:
    """Apply the requested layers; returns which ones took. Raises LayerError when strict."""
    layers = {}
    steps = [("cgroup", p.get("cgroup_procs"), lambda: _join_cgroup(p["cgroup_procs"])),
             ("hidden_fs", p.get("fs"), lambda: _build_root(p["root"], p["scratch_mb"],
                                                           p.get("uid"), p.get("runtime"))),
             ("identity", p.get("uid") is not None or p.get("drop_caps"),
              lambda: _drop_identity(p.get("uid"))),
             ("parent_death", p.get("parent_death"), lambda: _parent_death(p.get("alive_fd"))),
             ("no_new_privs", p.get("no_new_privs"), _no_new_privs),
             ("rlimits", True, lambda: _set_limits(p["limits"])),
             ("seccomp", p.get("seccomp"), lambda: _seccomp(p["seccomp"]))]
    for name, wanted, step in steps:
        if not wanted:
            layers[name] = False
            continue
        try:
            got = step()
            layers[got if isinstance(got, str) else name] = True
        except (OSError, LayerError) as e:
            if p.get("strict"):
                raise LayerError(f"{name}: {e}") from None
            layers[name] = False
    layers["private_tmp"] = layers["hidden_fs"]
    return layers


def _emitter(nonce: str, fd: int):
    write = os.write

    def emit(record) -> None:
        """One line on the result fd, prefixed by the run's nonce."""
        write(fd, f"{nonce} {json.dumps(record)}\n".encode())
    return emit


def main() -> int:
    payload = json.loads(sys.stdin.buffer.read())
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    emit = _emitter(payload.pop("nonce"), payload.pop("result_fd"))
    alive_fd, alive_write = payload.pop("parent_fds", None) or (None, None)
    if alive_write is not None:
        os.close(alive_write)  # our copy of the write end would keep the pipe open forever
    try:
        layers = _confine({**payload, "alive_fd": alive_fd})
    except LayerError as e:
        print(f"sandbox layer failed: {e}", file=sys.stderr)
        return 125
    if alive_fd is not None:
        os.close(alive_fd)  # the code has no use for it
    if layers["hidden_fs"]:
        os.environ["HOME"] = HOME
        os.environ["TMPDIR"] = "/tmp"
        os.chdir(HOME)
    sys.executable = os.path.realpath(sys.executable)  # a path that exists in the new root
    emit({"layers": layers})
    script, args = payload.pop("script"), payload.pop("args", None)
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    if args is not None:  # trusted runner scripts get the channel; plain code never does
        namespace.update(esbench_args=args, esbench_emit=emit)
    del payload
    try:
        exec(compile(script, "main.py", "exec"), namespace)
    except SystemExit:
        raise
    except BaseException:  # noqa: BLE001 - report the code's error as Python would
        traceback.print_exc()
        return 1
    os.fstat(1), os.fstat(2)  # closing stdout or stderr counts as a failed run
    emit({"done": True})
    return 0


if __name__ == "__main__":
    sys.exit(main())
