"""Deprecated alias, kept for one release: `python -m harness.tables` is now `python -m harness.reporting`."""
import sys

from harness.reporting.__main__ import main

if __name__ == "__main__":
    print("esbench: `python -m harness.tables` is now `python -m harness.reporting`", file=sys.stderr)
    sys.exit(main())
