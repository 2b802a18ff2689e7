"""Fan an experiment out as one cluster job per run, with the run count taken from the plan itself.

    python -m harness.runner.launch experiment=sigma_sweep stamp=s1 launcher=submitit_slurm \\
        hydra.launcher.partition=gpu

composes the experiment, counts its runs (the same plan `+dry_run=true` prints), and starts
`python -m harness -m <the same arguments> +run_index='range(0,N)'`. A hand-written range that
falls behind the plan (a file says 32 runs, the plan has 36) leaves runs MISSING; this cannot.
"""
from __future__ import annotations

import os
import sys

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException

from harness.core.child_runs import _HYDRA_FLAGS, _hydra_flags
from harness.core.errors import ConfigError
from harness.core.yamlcheck import config_dirs, first_yaml_problem
from harness.runner.experiment import _one_line, list_runs
from harness.runner.model_arg import rewrite_argv
from harness.runner.schema import validate
from harness.core.paths import CONF_DIR


def command(argv: list[str]) -> list[str]:
    """The multirun command for these arguments, with +run_index covering every planned run."""
    if any(a.lstrip("+").startswith("run_index=") for a in argv):
        raise SystemExit("esbench: error: harness.runner.launch sets +run_index itself; drop it (or run "
                         "`python -m harness ... +run_index=I` for one run)")
    if not any(a.startswith("stamp=") for a in argv):
        raise SystemExit("esbench: error: pass stamp=NAME so every job writes into one folder (and reruns resume)")
    flags = _hydra_flags(argv)  # --config-dir DIR (a plugin's YAML): composed here too, and passed on to the jobs
    plan_args = rewrite_argv(["launch", *(a for a in _without_flags(argv)
                                          if not a.startswith(("hydra.", "launcher=")))])[1:]
    problem = first_yaml_problem([*flags, *plan_args], CONF_DIR)  # file:line:col, not a YAML traceback
    if problem:
        raise SystemExit(f"esbench: error: {problem}")
    extra = [d for d in config_dirs(flags, CONF_DIR) if d.resolve() != CONF_DIR.resolve()]
    search = [f"hydra.searchpath=[{','.join(f'file://{d.resolve()}' for d in extra)}]"] if extra else []
    try:  # the checks `python -m harness` makes, so a bad file is one line here too, not N failing jobs
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=[*plan_args, *search])
        validate(cfg)
    except HydraException as e:
        raise SystemExit(f"esbench: error: {_one_line(e)}") from None
    except ConfigError as e:
        raise SystemExit(f"esbench: error: {e}") from None
    n = len(list_runs(cfg))
    if n == 0:
        raise SystemExit("esbench: error: this config plans no runs; pass experiment=NAME")
    return [sys.executable, "-m", "harness", "-m", *argv, f"+run_index=range(0,{n})"]


def _without_flags(argv: list[str]) -> list[str]:
    """argv less its config-choosing flags (_hydra_flags: `--config-dir DIR` as two words or one)."""
    out, skip = [], False
    for i, a in enumerate(argv):
        if skip:
            skip = False
        elif a in _HYDRA_FLAGS and i + 1 < len(argv):
            skip = True
        elif not a.startswith(tuple(f + "=" for f in _HYDRA_FLAGS)):
            out.append(a)
    return out


def main() -> None:
    if any(a in ("-h", "--help") for a in sys.argv[1:]):
        print(f"usage: python -m harness.runner.launch experiment=NAME stamp=NAME [key=value ...]\n{__doc__}")
        return
    cmd = command(sys.argv[1:])
    print("launching:", " ".join(cmd), flush=True)
    os.execv(cmd[0], cmd)


if __name__ == "__main__":
    main()
