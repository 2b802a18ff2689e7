"""Progress bars for long generation (evaluation, sampling): done/total, rate and ETA on stderr.

On a terminal this is tqdm's bar, redrawn in place. In a log file (nohup, a cluster job's output) a
bar redrawn with carriage returns is one unreadable line, so there every update is its own line, at
most one every 30 s. TQDM_DISABLE=1 turns them off, as for every tqdm bar.
"""
from __future__ import annotations

import sys

from tqdm.auto import tqdm

LOG_INTERVAL_S = 30.0


class _Lines:
    """A file for tqdm that turns each in-place redraw into a line of its own."""

    def __init__(self, f):
        self.f = f

    def write(self, s: str) -> None:
        s = s.replace("\r", "").strip()
        if s:
            self.f.write(s + "\n")

    def flush(self) -> None:
        self.f.flush()


def progress_bar(label: str, total: int, unit: str = "seq") -> tqdm:
    """A bar over `total` units, labelled; the caller calls update(n) and close()."""
    err = sys.stderr
    tty = hasattr(err, "isatty") and err.isatty()
    return tqdm(total=total, desc=label, unit=unit, file=err if tty else _Lines(err), dynamic_ncols=tty,
                mininterval=0.5 if tty else LOG_INTERVAL_S)
