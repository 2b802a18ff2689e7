"""`python -m harness --help`: what the bare command runs, the config groups and their options, the switches.

Hydra's stock page showed the single-run defaults (`method: base`), not the quickstart the bare
command runs, and named neither `+dry_run` nor `+plan`. This page is built from conf/ (and any
`--config-dir`) each time, so a new option or experiment appears without editing it; it reads YAML
only, so it answers before torch or Hydra load. Hydra's own page stays at `--hydra-help`.
"""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf

from harness.core.yamlcheck import config_dirs

BARE = "quickstart"  # what `python -m harness` with no arguments runs (harness/__main__.py)


def _load(path: Path) -> DictConfig:
    try:
        node = OmegaConf.load(path)
    except Exception:  # noqa: BLE001 - a broken file: the page lists its name, the run reports the YAML error
        return OmegaConf.create({})
    return node if isinstance(node, DictConfig) else OmegaConf.create({})


def _option_file(dirs: list[Path], group: str, option: str) -> Path | None:
    return next((d / group / f"{option}.yaml" for d in dirs if (d / group / f"{option}.yaml").is_file()), None)


def _bare_run(dirs: list[Path]) -> str:
    """The quickstart's models, task, budget and runs, read from its experiment file."""
    path = _option_file(dirs, "experiment", BARE)
    if path is None:
        return f"experiment={BARE} (no conf/experiment/{BARE}.yaml found)"
    exp = _load(path)
    picks = {}
    for d in exp.get("defaults") or []:
        if isinstance(d, DictConfig):
            picks.update({str(k).replace("override", "").strip().lstrip("/"): v for k, v in d.items()})
    runs = []
    for c in exp.get("cells") or []:
        runs.append(str(c.get("label")))
    for g in exp.get("grids") or []:
        axes = g.get("axes") or {}
        size = 1
        for v in axes.values():
            size *= len(v) if isinstance(v, (list, ListConfig)) else 1
        runs.append(f"{g.get('name')} (grid of {size}, chosen on validation)")
    parts = [f"model={picks['model']}" if picks.get("model") else "", f"task={picks['task']}" if picks.get("task") else "",
             f"budget={picks['budget']}" if picks.get("budget") else ""]
    return (f"experiment={BARE}: {'; '.join(runs)}\n    on {' '.join(p for p in parts if p)}, "
            f"records in runs/{exp.get('group', BARE)}/<stamp>/, tables in outputs/{exp.get('group', BARE)}/")


def _groups(dirs: list[Path]) -> list[tuple[str, str | None, list[str]]]:
    """(group, its default, its options) for every folder of conf/ Hydra composes from."""
    primary = _load(next((d / "config.yaml" for d in dirs if (d / "config.yaml").is_file()), dirs[-1] / "config.yaml"))
    defaults = {}
    for d in primary.get("defaults") or []:
        if isinstance(d, DictConfig):
            defaults.update({str(k).replace("optional ", "").strip(): v for k, v in d.items()})
    names = sorted({p.name for d in dirs if d.is_dir() for p in d.iterdir() if p.is_dir() and p.name in defaults})
    return [(g, None if defaults.get(g) is None else str(defaults[g]),
             sorted({p.stem for d in dirs for p in (d / g).glob("*.yaml")})) for g in names]


def usage(argv: list[str], conf_dir: Path) -> str:
    dirs = config_dirs(argv, conf_dir)
    lines = ["usage: python -m harness [key=value ...] [+switch=value ...] [-m] [--config-dir DIR]",
             "",
             "With no arguments it runs the CPU quickstart comparison,",
             f"    {_bare_run(dirs)}",
             "With arguments it runs one run (default: evaluate the default model, method=base), or an experiment.",
             "",
             "examples:",
             "  python -m harness method=es budget.flops=4e12          # train one run with ES, then evaluate",
             "  python -m harness model=Qwen/Qwen2.5-1.5B-Instruct method=base   # any hub id or folder",
             "  python -m harness experiment=qiu2025_table1 +dry_run=true        # list an experiment's runs",
             "  python -m harness -m method=es seed=0,1,2              # a Hydra multirun",
             "",
             "config groups (group=option; * = default):"]
    for group, default, options in _groups(dirs):
        shown = [f"{o}*" if o == default else o for o in options]
        lines.append(f"  {group + ':':12s}{', '.join(shown)}")
    lines += ["",
              "experiments and their records:",
              "  experiment=NAME         run every run of conf/experiment/NAME.yaml, then write its tables",
              "  stamp=NAME              the records folder runs/<group>/NAME/; the same stamp resumes (done runs skipped)",
              "  lanes=N                 runs side by side, each in its own process (default auto: cores / threads on CPU,",
              "                          each run's planned GPUs of the visible ones on GPUs); lanes=1: one after another",
              "  results_dir=DIR         where tables and plots go (default outputs/); a folder git tracks files in",
              "                          (results/) is refused unless +overwrite_results=true",
              "  +overwrite_results=true curate: rewrite committed tables, e.g. an experiment's with its stamp",
              "                          (done runs are skipped): experiment=X stamp=S results_dir=results +overwrite_results=true",
              "  +run_index=I            run only run I of the experiment (e.g. one cluster job; pair with stamp=)",
              "  +include=[GRID]         add an experiment's optional grid (e.g. GRPO-LoRA)",
              "  +dry_run=true           list every run with its index and overrides; runs nothing, writes nothing",
              "  +plan=true              price every run (FLOPs, GPU-hours, memory per GPU); runs nothing, writes nothing",
              "  +save_model=true        export each run's trained policy as an HF folder (<run dir>/model)",
              "",
              "other entry points (each answers --help):",
              "  python -m harness.reporting RECORDS   rebuild tables from records",
              "  python -m harness.analysis OUTDIR     analyse what training did to the weights",
              "  python -m harness.runner.launch ...   one cluster job per run (Slurm through submitit)",
              "  python -m harness.tools.export RUN OUT   a finished run as an HF model folder",
              "  python -m harness.reporting.outcomes RESULTS   check and rebuild comparisons from committed outcomes",
              "",
              "Hydra's own options: python -m harness --hydra-help; the composed config: --cfg job"]
    return "\n".join(lines)
