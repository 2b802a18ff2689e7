"""`python -m harness`: with no arguments, the quickstart comparison; otherwise one Hydra run.

Before Hydra sees the arguments: `model=<hub id or folder>` becomes a generic model config
(harness/runner/model_arg.py), and under accelerate/torchrun every rank gets one stamp. Nothing heavy is
imported until the config has been checked (harness/runner/cli.py): on this 2-core machine
`python -m harness task=nosuch` answers in 1.1 s (9.0 s before), and `model=./no/such/model` in 0.4 s.
Every `key=value` is read against conf/ before Hydra sees it (harness/runner/argv_check.py), so a typo
is one line, not Hydra's 7-21; `--help` is the project's page (harness/runner/usage.py), built from conf/.
`+dry_run=true` and `+plan=true` write nothing: Hydra is told to make no run folder, .hydra copy or log file.
"""
import os
import sys

from harness.core.lifeline import die_with_parent

die_with_parent()  # a run's child process (harness/runner/experiment.py): SIGTERM when its experiment dies

from harness.core.paths import CONF_DIR  # noqa: E402

if any(a in ("--help", "-h") for a in sys.argv[1:]):  # before anything else loads: answers in well under 2 s
    from harness.runner.usage import usage

    print(usage(sys.argv[1:], CONF_DIR))
    sys.exit(0)

from harness.runner.model_arg import ModelArgError, rewrite_argv  # noqa: E402

if len(sys.argv) == 1:
    sys.argv.append("experiment=quickstart")
if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # under accelerate/torchrun: one stamp for every rank (imports torch)
    from harness.core.distributed import launch_argv

    sys.argv = launch_argv(sys.argv)
try:
    sys.argv = rewrite_argv(sys.argv)
except ModelArgError as e:
    print(f"esbench: error: {e}", file=sys.stderr)
    sys.exit(2)
from harness.core.yamlcheck import first_yaml_problem  # noqa: E402
from harness.runner.argv_check import argv_problem, planning_overrides  # noqa: E402

# file:line:col, not Hydra's 95-line traceback; then every key and option of the command line
problem = first_yaml_problem(sys.argv[1:], CONF_DIR) or argv_problem(sys.argv[1:], CONF_DIR)
if problem:
    print(f"esbench: error: {problem}", file=sys.stderr)
    sys.exit(2)
sys.argv += planning_overrides(sys.argv[1:])  # +dry_run / +plan: no run folder, no log file

from harness.core.records import git_sha  # noqa: E402

git_sha()  # read once, at start: every record names the code this process imported, not a later commit
from harness.runner.cli import main  # noqa: E402 - after the arguments are settled

main()
