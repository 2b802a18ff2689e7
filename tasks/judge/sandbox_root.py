"""What the sandbox's minimal root shows: the interpreter and nothing a program could copy answers
from.

`layout(python)` asks the sandbox interpreter itself (run once, `-I -S`, outside the sandbox)
what it loads: its binary, its stdlib and lib-dynload directories (sys.path without site), and the
shared libraries mapped after importing every lib-dynload module. tasks/judge/sandbox_child.py binds
exactly these read-only at the same paths in the new root, recreating every symlink on the way
(/lib -> usr/lib, the ELF interpreter's /lib64/ld-linux-*.so), plus /bin/sh and /bin/sleep for
os.system and subprocess. A library is exposed as its whole directory (glibc dlopens siblings
such as libgcc_s on thread exit), never as /usr or a Python prefix as a whole, and every
site-packages or dist-packages directory below what is exposed is covered by an empty read-only
tmpfs: the project's data, however installed (a wheel puts it in .../dist-packages/tasks/data),
is never visible.

    python -m pytest tests/test_sandbox_hostile.py -q -k visible_tree
"""
from __future__ import annotations

import functools
import json
import os
import struct
import subprocess

TOOLS = ("/bin/sh", "/bin/sleep")  # what os.system and the tests' detached children exec
_HIDDEN = ("site-packages", "dist-packages")
_SCAN_DEPTH = 3  # how deep below an exposed dir site-packages is searched for

_PROBE = r"""
import importlib, json, os, sys
dyn = [p for p in sys.path if p.endswith("lib-dynload") and os.path.isdir(p)]
for d in dyn:
    for name in sorted(os.listdir(d)):
        if name.endswith(".so"):
            try:
                importlib.import_module(name.split(".")[0])
            except BaseException:
                pass
with open("/proc/self/maps") as f:
    libs = {l.split(None, 5)[5].strip() for l in f if len(l.split(None, 5)) == 6}
libs = sorted(p for p in libs if p.startswith("/") and ".so" in os.path.basename(p))
print("\n" + json.dumps({"executable": os.path.realpath(sys.executable),
                         "path": [p for p in sys.path if os.path.isdir(p)], "libs": libs}))
"""


def elf_interpreter(path: str) -> str | None:
    """The dynamic loader a 64-bit ELF binary names (PT_INTERP), or None."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF" or head[4] != 2:
                return None
            end = "<" if head[5] == 1 else ">"
            (phoff,), (entsize, count) = (struct.unpack_from(end + "Q", head, 0x20),
                                          struct.unpack_from(end + "HH", head, 0x36))
            f.seek(phoff)
            table = f.read(entsize * count)
            for i in range(count):
                if struct.unpack_from(end + "I", table, i * entsize)[0] == 3:  # PT_INTERP
                    offset, = struct.unpack_from(end + "Q", table, i * entsize + 8)
                    size, = struct.unpack_from(end + "Q", table, i * entsize + 32)
                    f.seek(offset)
                    return f.read(size).rstrip(b"\0").decode()
    except (OSError, struct.error, UnicodeDecodeError):
        return None
    return None


def _hidden_below(dirs: list[str]) -> list[str]:
    """site-packages / dist-packages directories at most _SCAN_DEPTH below any of `dirs`."""
    found = []
    for top in dirs:
        if not os.path.isdir(top) or os.path.islink(top):
            continue
        base = top.rstrip("/").count("/")
        for here, subdirs, _ in os.walk(top):
            if os.path.basename(here) in _HIDDEN:
                found.append(here)
                subdirs[:] = []
            elif here.count("/") - base >= _SCAN_DEPTH:
                subdirs[:] = []
    return sorted(set(found))


@functools.lru_cache(maxsize=None)
def layout(python: str) -> dict | str:
    """{"expose": host paths to show read-only, "hide": dirs to cover} for `python`, or a
    one-line reason why the interpreter could not say what it needs."""
    try:
        done = subprocess.run([python, "-I", "-S", "-c", _PROBE], capture_output=True, text=True,
                              timeout=60, env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                              stdin=subprocess.DEVNULL, cwd="/")
        found = json.loads(done.stdout.rstrip().rsplit("\n", 1)[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as e:
        return f"{python} could not list what it loads: {e}"
    binaries = [python, found["executable"], *(t for t in TOOLS if os.path.exists(t))]
    loaders = {elf_interpreter(os.path.realpath(b)) for b in binaries} - {None}
    lib_dirs = {os.path.dirname(p) for p in found["libs"]}
    expose = sorted({*binaries, *found["path"], *lib_dirs, *loaders})
    if any(os.path.realpath(p) in ("/", "/usr") for p in expose):
        return f"{python} loads from / or /usr itself; refusing to show all of it"
    if os.path.isfile("/etc/ld.so.cache"):  # programs the code runs find their libraries
        expose.append("/etc/ld.so.cache")
    dirs = [os.path.realpath(p) for p in expose if os.path.isdir(p)]
    return {"expose": expose, "hide": _hidden_below(dirs)}
