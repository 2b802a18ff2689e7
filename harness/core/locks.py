"""One process per stamp folder and per run folder: an OS advisory lock (flock) held while it works.

Two processes on one stamp used to run the same runs side by side: checkpoints swapped under each
other (FileNotFoundError on es_checkpoint.tmp), step logs got duplicate lines, and an ok record
overwrote a failed one so the failure read "no error in its record". Now

  <stamp folder>/.esbench.lock  an experiment running all its runs holds it exclusively; a job of a
                                fan-out (+run_index=...) holds it shared, so the jobs of one launch
                                run side by side but never beside a whole-experiment process;
  <run folder>/.esbench.lock    the process running that run holds it exclusively (ad-hoc single
                                runs too), so two jobs given the same run index cannot both run it.

flock, not a pid file: the kernel drops the lock when the process ends, however it ends (SIGKILL,
out-of-memory), so a crash never leaves a stale lock to clean by hand. The holder writes its pid,
host and command into the file, which the refusal quotes. The descriptor is not inherited by
children (Python opens files non-inheritable), so a child never keeps its parent's lock alive.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import socket
import sys
from pathlib import Path

from harness.core.errors import UserError

log = logging.getLogger("esbench")
LOCK_NAME = ".esbench.lock"
_HELD: dict[str, int] = {}  # lock path -> descriptor: this process re-entering a lock it holds


class FolderBusy(UserError, RuntimeError):
    """Another live process holds the folder's lock; the message names it and what to do."""


class LockIsLink(UserError, RuntimeError):
    """The folder's lock file is a symbolic link: refused, never followed."""


def _holder(path: Path) -> str:
    try:
        text = path.read_text().strip()
    except OSError:
        text = ""
    return text or "another process (it wrote no pid yet)"


@contextlib.contextmanager
def folder_lock(folder: Path, what: str, shared: bool = False):
    """Hold `folder`/.esbench.lock for the `with` block (and at most for the process's life).

    Raises:
        FolderBusy: another process holds it (exclusively, or shared when this asks exclusive).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_NAME
    key = str(path.resolve())
    if key in _HELD:  # this process holds it already: a second flock of its own would refuse itself
        yield path
        return
    try:  # O_NOFOLLOW: a lock file that is a link would have us truncate and write whatever it points at
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        raise LockIsLink(f"{path} is a symbolic link, not esbench's lock file; remove it (rm {path}) and rerun") from None
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        holder = _holder(path)
        pid = holder.split()[1] if holder.startswith("process ") else "PID"
        raise FolderBusy(f"{what} {folder} is in use by {holder}; wait for it to finish, stop it (kill {pid}), "
                         "or pass another stamp=...") from None
    except OSError as e:  # a filesystem without locks (some network mounts): run, but say it is unguarded
        os.close(fd)
        log.warning("cannot lock %s (%s): nothing stops a second process on this folder", path, e)
        yield path
        return
    try:  # who holds it, for a refusal to quote (of shared holders, the last to arrive)
        os.ftruncate(fd, 0)
        os.write(fd, f"process {os.getpid()} on {socket.gethostname()} ({' '.join(sys.argv)[:300]})\n".encode())
    except OSError:
        pass  # the lock holds without the note; a refusal then says "wrote no pid yet"
    _HELD[key] = fd
    try:
        yield path
    finally:
        os.close(_HELD.pop(key))  # closing drops the flock
