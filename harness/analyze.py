"""Deprecated alias, kept for one release: `python -m harness.analyze` is now `python -m harness.analysis`."""
import sys

from harness.analysis.__main__ import main

if __name__ == "__main__":
    print("esbench: `python -m harness.analyze` is now `python -m harness.analysis`", file=sys.stderr)
    sys.exit(main())
