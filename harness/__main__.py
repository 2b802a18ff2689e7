"""`python -m harness`: with no arguments, the quickstart comparison; otherwise one Hydra run."""
import sys

from harness.cli import main
from harness.distributed import launch_argv

if len(sys.argv) == 1:
    sys.argv.append("experiment=quickstart")
sys.argv = launch_argv(sys.argv)  # under accelerate/torchrun: one stamp for every rank
main()
