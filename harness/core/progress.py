"""Progress bars for long generation (evaluation, sampling): done/total, rate and ETA on stderr; and an
experiment's overall progress line (experiment_progress).

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


def _minutes(s: float) -> str:
    return f"{s / 60:.0f} min" if s >= 90 else f"{s:.0f} s"


def experiment_progress(finished: int, total: int, ran: int, elapsed_s: float) -> str:
    """' | experiment: 3 of 11 runs finished, 12 min in, ETA 30 min' for a run's [i/n] line.

    `finished` counts every run with a record (done before this process included), `ran` those this process
    ran in `elapsed_s`; the ETA is their mean time per run times the runs left, so it is rough (a base run
    takes seconds, a trained one minutes) and absent until one run has finished here."""
    left = total - finished
    eta = f", ETA {_minutes(elapsed_s / ran * left)}" if ran and left else ""
    return f" | experiment: {finished} of {total} runs finished, {_minutes(elapsed_s)} in{eta}"
