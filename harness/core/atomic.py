"""The one way this project writes a file: temp file in the same folder, fsync, rename.

Readers (and concurrent cluster jobs rebuilding the same tables) see the old file or the new one,
never half of one; a full disk or a kill mid-write leaves the old file and no temp behind.
Every record, checkpoint manifest, table, CSV and plot goes through here. Files get the mode a
plain open() would give (0o666 less the umask: 0644 by default), not mkstemp's private 0600, which
the rename would keep and which hid records and tables from the other users of a shared filesystem.
"""
from __future__ import annotations

import io
import json
import os
import tempfile
import threading
from pathlib import Path

_UMASK_LOCK = threading.Lock()


def current_umask() -> int:
    """The process umask, read without changing it where Linux shows it (/proc/self/status, 4.7+).

    os.umask can only be read by setting it; elsewhere it is set and restored under a lock, so two
    writers here never see the temporary 0 (other threads creating files could, for an instant).
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def write_bytes_atomic(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode())


def write_json_atomic(path: Path, obj) -> None:
    """Serialise first (a failure leaves the old file untouched), then write atomically."""
    write_text_atomic(path, json.dumps(obj, indent=2, default=str) + "\n")


def save_figure_atomic(fig, path: Path, dpi: int = 120) -> None:
    """Render a matplotlib figure to memory, then write it atomically (a plot is an output too)."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, dpi=dpi, format=Path(path).suffix.lstrip(".") or "png")
    plt.close(fig)
    write_bytes_atomic(path, buf.getvalue())
