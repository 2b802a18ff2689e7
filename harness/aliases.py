"""The old command names, kept for one release: `python -m harness.tables` runs `python -m harness.reporting`.

    harness/tables.py, analyze.py, launch.py, gpu_check.py, zoo.py: each a two-line module calling forward().
"""
from __future__ import annotations

import runpy
import sys


def forward(new: str, old: str) -> None:
    """Run module `new` as `python -m new` would, after one line saying the command's new name."""
    print(f"esbench: `python -m {old}` is now `python -m {new}` (the old name goes in the next release)",
          file=sys.stderr)
    sys.argv[0] = new
    runpy.run_module(new, run_name="__main__", alter_sys=True)
