"""`python -m harness`: with no arguments, the quickstart comparison; otherwise one Hydra run."""
import sys

from harness.cli import main

if len(sys.argv) == 1:
    sys.argv.append("experiment=quickstart")
main()
