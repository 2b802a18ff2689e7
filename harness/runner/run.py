"""One run: compose model x task x method x budget x eval, train until the ledger says stop, evaluate, record.

Build the task, the policy and the method from the config; train until the ledger says the budget
is spent; evaluate on `eval_splits`; write <run_dir>/record.json atomically. Entry point:
harness/runner/cli.py; experiments (harness/runner/experiment.py) call `run_one` once per planned run.
"""
from __future__ import annotations

import contextlib
import logging
import random
import time
import traceback
from pathlib import Path

import numpy as np
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from harness.analysis.entropy import NoPrompts, entropy_fn
from harness.analysis.settings import AnalysisConfig, analysis_config
from harness.analysis.update import base_hash, save_update, wants_update
from harness.core.distributed import check_launch, is_main_process, local_device, refuse_single_process
from harness.engines import evaluation_engine
from harness.evaluation.evaluate import EvalConfig, evaluate
from harness.core.model_shapes import load_shape
from harness.core.policy import driver_place, load_policy, load_prompter, resolve_device, resolve_model_path
from harness.core.quiet import drop_banners, quiet_known_warnings
from harness.core import records
from harness.core.errors import Terminated  # noqa: F401 - re-exported: callers import it from here
from harness.core.locks import folder_lock
from harness.core.payloads import BudgetSummary, read_metrics, read_train
from harness.core.method_facts import facts_record
from harness.core.records import Record, new_record
from harness.core.paths import CONF_DIR
from harness.core.steplog import EvalEvery, make_ledger
from tasks.base import TaskDataError

log = logging.getLogger("esbench")


def quiet_libraries() -> None:
    """Progress bars from weight loading and datasets would drown the one line per step we print;
    known library notices go too (harness/core/quiet.py)."""
    import datasets
    import transformers

    transformers.utils.logging.disable_progress_bar()
    datasets.disable_progress_bars()
    quiet_known_warnings()
    drop_banners()


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def default_label(method, cfg: DictConfig) -> str:
    """"es sigma=0.01 alpha=0.005": the method's name and the hyperparameters it declares as label keys."""
    keys = [k for k in method.label_keys if k in cfg.method]
    flags = [f"{k}={cfg.method[k]}" for k, default in method.label_flags.items()
             if k in cfg.method and cfg.method[k] != default]  # e.g. fitness=placebo
    return " ".join([method.name, *(f"{k}={cfg.method[k]:g}" for k in keys), *flags])


def curve_evaluation(eval_cfg: EvalConfig, policy, task, method) -> dict:
    """make_ledger's learning-curve arguments: validation greedy accuracy every `every_flops_fraction`
    of the budget, on a fixed prompt subset (recorded, never charged), or nothing when it is off.

    Off too for a method that says its weights live elsewhere while it trains (`weights_in_driver`
    False: ES scoring its members on engine workers), so a curve point would measure stale weights.
    """
    if not eval_cfg.every_flops_fraction:
        return {}
    if not method.weights_in_driver:
        log.warning("eval.every_flops_fraction is ignored: %s trains on engine workers and hands the weights "
                    "back only at the end", method.name)
        return {}
    curve_cfg = eval_cfg.for_curve()

    def fn() -> dict:
        res = evaluate(policy, task, "validation", curve_cfg)
        point = {k: res.metrics[k]["mean"] for k in ("greedy_acc", "greedy_reward") if k in res.metrics}
        # the prompt count rides along: curves.png draws each point's 95% Wilson interval over it
        return {**point, "prompts": res.metrics["greedy_acc"]["n"]} if "greedy_acc" in res.metrics else point
    return {"eval_fn": fn, "eval_every_fraction": eval_cfg.every_flops_fraction, "model": policy.model}


def track_entropy(ledger, analysis: AnalysisConfig, policy, task, method, rows: list,
                  task_overrides: dict | None = None) -> str | None:
    """Add the token-entropy listener (harness/analysis/entropy.py) writing into `rows` (record.entropy).

    Off, like learning curves, when the method's weights are not in the driver while it trains, and when
    it does not train (nothing to track). Returns a note when it is skipped for want of prompts: a task
    with no validation split (MATH-500, HumanEval: evaluation-only) or an empty one is a run that works,
    not a failure, so the run goes on without entropy and its record says why.
    """
    if not analysis.entropy_every_flops_fraction or not analysis.entropy_prompts or not analysis.entropy_samples:
        return None
    if not method.trains:
        return None
    if not method.weights_in_driver:
        log.warning("analysis.entropy_every_flops_fraction is ignored: %s trains on engine workers", method.name)
        return None
    try:
        if analysis.entropy_task:  # a held-out task (NOTE-076: GPQA during GSM8K training): its test prompts
            held_out = build_task(analysis.entropy_task, (task_overrides or {}).get(analysis.entropy_task))
            fn = entropy_fn(policy, held_out, analysis.entropy_prompts, analysis.entropy_samples, split="test")
        else:  # the training task: validation prompts, never test
            fn = entropy_fn(policy, task, analysis.entropy_prompts, analysis.entropy_samples)
    except NoPrompts as e:
        note = (f"entropy tracking skipped: {e} (analysis.entropy_task=NAME measures it on another task's "
                "test prompts; analysis.entropy_every_flops_fraction=null turns it off)")
        log.warning(note)
        return note
    ledger.listeners.append(EvalEvery(analysis.entropy_every_flops_fraction, fn, policy.model, rows=rows))
    return None


def run_one(cfg: DictConfig, run_dir: Path, meta: dict | None = None) -> Record:
    """Train and evaluate one configuration; always leaves a record.

    The record is written `running` before any work, so a run killed with SIGKILL still shows (as
    INTERRUPTED once its process is gone), and rewritten `ok`, `failed` or `interrupted` at the end.

    Args:
        cfg: the composed run config.
        run_dir: where record.json (and method checkpoints) go.
        meta: identity keys an experiment adds to the record (label, cell, grid, point, model_key,
            run_index, run_key), so tables can be rebuilt from records alone.
    """
    torch.set_num_threads(cfg.threads)
    quiet_libraries()
    seed_everything(cfg.seed)
    method = instantiate(cfg.method)  # first: its name and label keys name the run
    if not method.facts.distributed:  # rl: ES and base refuse a multi-process launch
        refuse_single_process(method.name)
    else:  # rl: a multi-process layout that cannot work fails now; each rank pins its own GPU
        check_launch("cuda" if cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available()) else "cpu",
                     cfg.engine.name, curves=bool(cfg.eval.get("every_flops_fraction")))
        local_device()
    identity = {"model": cfg.model.name_or_path, "method": method.name, "trains": method.trains,
                "task": cfg.task._target_, "seed": cfg.seed, "torch_threads": cfg.threads, "grid": cfg.get("grid"),
                **(meta or {})}
    identity["label"] = identity.get("label") or cfg.label or default_label(method, cfg)
    # the method's facts ride with the record: a report reads its family there, plugin on PYTHONPATH or not
    record = new_record(started_at=time.time(), config=OmegaConf.to_container(cfg, resolve=True),
                        facts=facts_record(method.facts), **identity)
    # rl: rank 0 holds the run's lock (harness/core/locks.py); the other ranks of its launch write nothing
    with folder_lock(run_dir, "the run folder") if is_main_process() else contextlib.nullcontext():
        replaced = _replaces(run_dir)
        if replaced:  # a rerun replaces what is there; say so, in the log and in the record, never silently
            log.warning("%s", replaced)
            record.notes.append(replaced)
        write_record(run_dir, record)
        return _run(cfg, run_dir, method, record)


def _replaces(run_dir: Path) -> str | None:
    """The line a rerun logs about the record it is replacing (failed, interrupted or ok), or None."""
    try:
        old = records.read_record(run_dir / records.RECORD_NAME)
    except (OSError, ValueError):
        return None
    why = f": {old.error}" if old.error else ""
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(old.started_at)) if old.started_at else "?"
    return f"replaces the {old.effective_status} record of {run_dir} (started {when} by process {old.pid}{why})"


def _run(cfg: DictConfig, run_dir: Path, method, record: Record) -> Record:
    """run_one's body, with the run folder locked and the `running` record written."""
    start = time.time()
    try:
        eval_cfg = EvalConfig(**OmegaConf.to_container(cfg.eval, resolve=True))
        analysis = analysis_config(cfg.get("analysis"))
        task = instantiate_task(cfg.task)
        log.info("built task %s and method %s", cfg.task._target_, method.name)
        # held-out tasks are built (and their rows checked) now, before the model loads and training starts:
        # a malformed held-out file must not cost a training run
        held_out_tasks = {name: build_task(name, eval_cfg.task_overrides.get(name))
                          for name in (eval_cfg.tasks if is_main_process() else [])}
        if method.trains and hasattr(task, "check_trainable"):
            task.check_trainable()  # e.g. MBPP refuses to train behind a sandbox with missing layers
        record.task_info = task.run_info() if hasattr(task, "run_info") else {}
        if method.trains:
            warn_unreachable_budget(cfg, task)
        preflight(cfg, method, task)
        policy = policy_from(cfg, method)  # on the CPU when engines hold the weights (driver_place)
        keep_update = method.trains and (wants_update(analysis.store_update, cfg.model.name_or_path)
                                         or bool(cfg.get("save_model"))) and is_main_process()  # the export reads it
        if keep_update:  # analyses compare the stored theta_final with this theta_0 (harness/analysis/update.py)
            record.update = {"base_sha256": base_hash(policy.model), "path": None}
        ledger = make_ledger(cfg.budget.kind, cfg.budget.get(cfg.budget.kind), run_dir, cfg.logger,
                             **curve_evaluation(eval_cfg, policy, task, method))
        note = track_entropy(ledger, analysis, policy, task, method, record.entropy, eval_cfg.task_overrides)
        record.notes += [note] if note else []
        if not is_main_process():  # rl: ranks > 0 train (same ledger totals) but log, evaluate and write nothing
            ledger.listeners = []
        # typed here, by the code that reads it back: a summary key a shipped method renamed fails now, loudly
        record.train = read_train(method.train(policy, task, ledger, run_dir) or {}, method.name,
                                  declared=method.facts.summary_keys)
        if keep_update:
            record.update.update(save_update(run_dir, policy.model))
            print(f"stored theta_final for analysis ({record.update['bytes'] / 1e6:.1f} MB, {record.update['dtype']}) "
                  f"in {run_dir / record.update['path']}", flush=True)
        record.budget = BudgetSummary.of(ledger)
        record.steps = [s.to_dict() for s in ledger.history]
        record.curve = list(ledger.evals)
        train_s = ledger.wall_s  # summed over every process of a resumed run
        reference = policy_from(cfg, method).model if eval_cfg.kl_to_base else None  # the untrained model
        # rank 0 evaluates with the configured engine on the trained weights (None: HF generate on the policy);
        # it also puts the HF copies where evaluation needs them
        engine = evaluation_engine(policy, cfg.engine, reference, method.trains) if is_main_process() else None
        for split in cfg.eval_splits if is_main_process() else []:  # rl: rank 0 evaluates
            # a phase of seconds to an hour: say it started (the bar, where there is one, follows)
            print(f"evaluating {record.label} on {split}", flush=True)
            res = evaluate(policy, task, split, eval_cfg.for_split(split), reference, engine)
            record.metrics[split] = read_metrics(res.metrics, f"metrics.{split}")
            record.pass_curve[split] = res.pass_curve
            record.examples[split], record.eval_flops[split] = res.examples, res.flops
            log.info("%s %s: %s", record.label, split, _brief(res.metrics))
        for name, held_out in held_out_tasks.items():  # forgetting: the trained policy on other tasks' test splits
            res = evaluate(policy, held_out, "test", eval_cfg, reference, engine)
            record.heldout[name] = {"metrics": read_metrics(res.metrics, f"heldout.{name}.metrics"),
                                    "pass_curve": res.pass_curve, "examples": res.examples,
                                    # e.g. "FIXTURE DATA, not GPQA": the tables carry a held-out task's notes too
                                    "task_info": held_out.run_info() if hasattr(held_out, "run_info") else {}}
            log.info("%s held-out %s: %s", record.label, name, _brief(res.metrics))
        if engine is not None:
            engine.close()
        record.wall_s = {"train": round(train_s, 1), "total": round(time.time() - start, 1),
                         "curve_eval": round(sum(e.get("eval_s", 0) for e in record.curve), 1)}
        if hasattr(task, "run_info"):  # again at the end: the judge's counts (e.g. MBPP limits hit) are known now
            record.task_info = task.run_info()
        record.status = "ok"
    except BaseException as e:  # keep a record of every failure, then let it propagate
        interrupted = isinstance(e, (KeyboardInterrupt, Terminated))
        record.status, record.error = ("interrupted" if interrupted else "failed"), f"{type(e).__name__}: {e}"
        record.traceback = traceback.format_exc()
        record.wall_s = {"total": round(time.time() - start, 1)}
        write_record(run_dir, record)
        raise
    write_record(run_dir, record)
    if cfg.get("save_model") and is_main_process():  # +save_model=true: <run_dir>/model, an HF folder
        save_model(run_dir, cfg.threads)
    return record


def save_model(run_dir: Path, threads: int) -> None:
    """Export the finished run with harness/tools/export.py, in a child process: the runner never imports
    the tools (they import it), and the export reads only what the run wrote (record, master, update)."""
    import subprocess
    import sys

    from harness.core.errors import UserError
    from harness.core.paths import ROOT

    out = Path(run_dir) / "model"
    r = subprocess.run([sys.executable, "-m", "harness.tools.export", str(run_dir), str(out), "--force",
                        "--threads", str(threads)], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        lines = (r.stderr or r.stdout).strip().splitlines() or ["no output"]
        raise UserError(f"+save_model=true: the run finished ok but its export failed: {lines[-1]}")
    print(r.stdout.strip(), flush=True)


def warn_unreachable_budget(cfg: DictConfig, task) -> None:
    """One warning line, before the model loads, when the method's step cap cannot spend the budget.

    The method's facts say which setting caps its steps (step_cap), the completions one step scores
    (samples_per_step) and how many completion-scoring forwards one step may run per completion beyond
    generating it (scoring_forwards); a method that declares no cap is not checked. A step's charge is
    bounded with every sequence as long as the model's context allows (the completion at the task's
    max_new_tokens), so the bound is loose but the warning never false.
    """
    from harness.core.budget import unreachable
    from harness.core.flops import generation_flops, scoring_flops
    from harness.core.method_facts import configure, facts_of
    from harness.core.model_shapes import ShapeError, load_shape

    target = str(cfg.method.get("_target_") or "")
    facts = facts_of(target)
    if facts is None or not facts.step_cap or facts.samples_per_step is None:
        return
    m, kind = configure(target, cfg.method), cfg.budget.kind
    cap = facts.step_cap
    per_sample = 1.0
    if kind == "flops":
        try:
            shape = load_shape(str(cfg.model.name_or_path))
        except ShapeError:
            return  # no shape offline: nothing to bound with
        ctx = int(getattr(shape, "max_position_embeddings", 0) or 0)
        c = min(int(getattr(task, "max_new_tokens", 0) or 1), ctx - 1) if ctx > 1 else 0
        if c < 1:
            return
        forwards = facts.scoring_forwards(m) if facts.scoring_forwards else 0
        per_sample = generation_flops(shape, [ctx - c], [c]) + forwards * scoring_flops(shape, [ctx - c], [c])
    line = unreachable(kind, float(cfg.budget[kind]), int(getattr(m, cap)), f"method.{cap}",
                       facts.samples_per_step(m) * per_sample)
    if line:
        log.warning(line)


def write_record(run_dir: Path, record: Record) -> None:
    """rl: only rank 0 writes the record (harness/core/distributed.py)."""
    if is_main_process():
        records.write_record(run_dir, record)


def build_task(name: str, overrides: dict | None = None):
    """Instantiate conf/task/<name>.yaml (a held-out evaluation task), with `overrides` on top of it."""
    path = CONF_DIR / "task" / f"{name}.yaml"
    if not path.is_file():
        options = ", ".join(sorted(p.stem for p in (CONF_DIR / "task").glob("*.yaml")))
        raise TaskDataError(f"a held-out task names unknown task {name!r} (eval.tasks, eval.task_overrides or "
                            f"analysis.entropy_task); choose from: {options}")
    return instantiate_task(OmegaConf.merge(OmegaConf.load(path), OmegaConf.create(dict(overrides or {}))))


def instantiate_task(conf: DictConfig):
    """Build a task from its config; a TaskDataError raised by its constructor comes out as itself (one
    line naming file, row and fix), not inside Hydra's multi-line InstantiationException."""
    try:
        return instantiate(conf)
    except InstantiationException as e:
        cause = e.__cause__
        while cause is not None and not isinstance(cause, TaskDataError):
            cause = cause.__cause__
        if cause is None:
            raise
        raise cause from None


def preflight(cfg: DictConfig, method, task) -> None:
    """On a GPU, let a training method refuse a launch too small for it before the weights load (a 7B model in
    one process fails in seconds, not after a multi-GB load): its check reads the model's config and the
    tokenizer's prompt lengths only (Method.preflight)."""
    if not (method.trains and resolve_device(cfg.device) == "cuda"):
        return
    dtype = cfg.model.dtype
    if dtype == "auto":  # the checkpoint's own dtype, as from_pretrained(dtype="auto") reads it
        dtype = str(getattr(load_shape(resolve_model_path(cfg.model.name_or_path)), "dtype", None) or "float32")
    method.preflight(load_prompter(cfg.model.name_or_path, cfg.model.chat_template, cfg.model.system_prompt,
                                   cfg.device), task, dtype.removeprefix("torch."))


def policy_from(cfg: DictConfig, method=None):
    """Load the configured model (called again after training for an untrained reference); with `method`, on
    the CPU where its engines hold the weights (harness/core/policy.py driver_place)."""
    place = None if method is None else driver_place(cfg.device, cfg.engine.name, method.trains,
                                                      method.weights_in_driver)
    return load_policy(cfg.model.name_or_path, cfg.model.dtype, cfg.model.chat_template,
                       cfg.model.system_prompt, cfg.device, place=place)


def _brief(metrics: dict) -> str:
    return ", ".join(f"{k}={v['mean']:.3f}" for k, v in metrics.items())
