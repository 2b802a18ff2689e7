"""Lanes: an experiment's runs side by side on one host, each in its own child process as before.

    python -m harness experiment=X lanes=2     # two runs at a time
    python -m harness experiment=X             # lanes=auto: as many as fit; lanes=1: one after another

How many fit: on CPU, the cores this process may use divided by the runs' `threads` (a 2-core machine,
threads=1: 2 lanes); on GPUs, each run takes the GPU count the planner gives it (harness/runner/pricing.py
memory_plan, priced for the smallest visible GPU) out of the visible devices, and its child sees only those
(CUDA_VISIBLE_DEVICES), so an 8-GPU node runs eight 1-GPU runs or four 2-GPU runs at once. Every run still
takes its own `threads` cores. A lanes=N above what fits is clamped, with one line; a run needing more GPUs
than the node shows is refused before any run starts.

Order: plan order (the run index). A free lane takes the first waiting run whose GPUs and cores are free,
so a 1-GPU run may start before a 4-GPU run ahead of it that is still waiting for four free devices.
Longest-first would shorten the tail a little, but needs a time per run the CPU path does not have, and
plan order keeps the log in index order.

Launcher: one loop in the main thread that starts children (subprocess.Popen) and polls them, not a thread
pool, Hydra's joblib launcher or Ray. The kernel's parent-death signal that kills an orphaned child
(harness/core/lifeline.py) follows the thread that started it, and Ctrl-C reaches only the main thread, so
starting and stopping every child from the main thread keeps both working as with one lane; joblib and
Ray add workers between the experiment and its runs and know neither GPU ids nor the record's rules.

Results do not depend on the lane count: each child fixes its own torch threads and seeds from its run
index (tests/test_lanes.py compares every metric of the smoke experiment at lanes=1 and lanes=2). The
parent holds the stamp folder's lock; the children, +child_run=true, take only their run's lock.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field

from harness.core.errors import UserError
from harness.core.child_runs import _failure, exit_status, mark_killed, start_child, stop_children
from harness.core.records import PlannedRun

POLL_S = 0.5  # how often the loop looks for a finished child: nothing next to a run's minutes


class LanesError(UserError, ValueError):
    """lanes= or the node cannot run the plan side by side; the message names the fix."""


@dataclass(frozen=True)
class Need:
    """What one run holds while it runs: `threads` cores and `gpus` devices (0: a CPU run)."""
    threads: int = 1
    gpus: int = 0


@dataclass
class Plan:
    lanes: int                      # runs side by side (1: one after another, as without lanes)
    needs: dict[int, Need]          # run index -> what it holds
    cores: int
    gpus: list[str] = field(default_factory=list)  # visible device ids, as CUDA_VISIBLE_DEVICES names them
    why: str = ""                   # what bounds the lane count, for the start line


def cores() -> int:
    """The cores this process may run on (a Slurm or taskset mask counts, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _device_count() -> int:
    try:
        import torch
        return torch.cuda.device_count() if torch.cuda.is_available() else 0  # neither makes a CUDA context
    except ImportError:
        return 0


def visible_gpus() -> list[str]:
    """The device ids a child may be given: CUDA_VISIBLE_DEVICES's (up to its first invalid one, as CUDA
    reads it), else 0..count-1; none where torch sees no CUDA device."""
    count = _device_count()
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not count or env is None:
        return [str(i) for i in range(count)]
    ids = []
    for d in (d.strip() for d in env.split(",")):
        if not d or d.startswith("-"):
            break
        ids.append(d)
    return ids[:count]


def gpu_gb() -> float:
    """The smallest visible GPU's memory in GB (nvidia-smi), for the planner; its default GPU's without it."""
    from harness.core.memory_parts import GB
    from harness.runner.run_memory import DEFAULTS, GPUS

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30).stdout
        return min(float(x) for x in out.split()) * 2**20 / GB
    except (OSError, ValueError, subprocess.SubprocessError):
        return GPUS[DEFAULTS["gpu"]][1]


def planned_gpus(child, memory_gb: float) -> tuple[int, str | None]:
    """The GPUs one run needs, as +plan=true prices it (0: none fits), and a note when it could not be priced."""
    from omegaconf import OmegaConf

    from harness.core.memory_parts import PricingError
    from harness.core.model_shapes import ShapeError, flops_shape
    from harness.runner.run_memory import DEFAULTS, memory_plan, model_dtype

    try:
        shape = flops_shape(str(child.model.name_or_path))
        prompt = int(DEFAULTS["prompt_tokens"])
        engine = OmegaConf.to_container(child.engine, resolve=True) if child.get("engine") is not None else None
        _, need, note = memory_plan(child.method, shape, prompt + int(child.task.max_new_tokens),
                                    int(DEFAULTS["eval_batch"]), dtype=model_dtype(child.get("model"), shape),
                                    engine=engine, gpu_gb=memory_gb, headroom=float(DEFAULTS["headroom"]),
                                    prompt_tokens=prompt)
    except (ShapeError, PricingError) as e:  # the planner cannot price it: one GPU, as a lane of one would give
        return 1, f"not priced ({e}); given 1 GPU"
    return int(need), note


def parse_lanes(value) -> int | None:
    """lanes= as a count (None: auto). Raises LanesError in one line for anything else."""
    if value is None or str(value) == "auto":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LanesError(f"lanes={value!r} must be auto or an int >= 1 (lanes=1 runs one run at a time)")
    return value


def lanes_that_fit(needs: list[Need], n_cores: int, n_gpus: int) -> tuple[int, str]:
    """The most runs that can go side by side, and what bounds it: cores / threads, and GPUs / the smallest
    GPU count when runs use GPUs."""
    threads = min(n.threads for n in needs)
    fit, why = max(1, n_cores // threads), f"{n_cores} cores / threads={threads}"
    on_gpu = [n.gpus for n in needs if n.gpus]
    if on_gpu and n_gpus // min(on_gpu) < fit:
        fit, why = max(1, n_gpus // min(on_gpu)), f"{n_gpus} GPUs / {min(on_gpu)} per run"
    return fit, why


def plan(requested, pending: list[PlannedRun], children: dict, *, n_cores: int | None = None,
         gpus: list[str] | None = None, memory_gb: float | None = None) -> Plan:
    """How the runs still to do go side by side (lanes=auto or N).

    Raises:
        LanesError: a bad lanes=, or a run that needs more GPUs than are visible (lanes=1 runs it anyway,
            one run at a time with every GPU, as before lanes).
    """
    count = parse_lanes(requested)
    n_cores = cores() if n_cores is None else n_cores
    if count == 1 or len(pending) < 2:  # one after another: nothing to pack, nothing to refuse
        return Plan(1, {r.index: Need(int(children[r.index].threads)) for r in pending}, n_cores)
    gpus = visible_gpus() if gpus is None else gpus
    if gpus and memory_gb is None:
        memory_gb = gpu_gb()  # once: nvidia-smi per run would be 98 processes for qiu2025_table1
    needs = {}
    for r in pending:
        child = children[r.index]
        uses_gpu = bool(gpus) and str(child.get("device", "auto")) != "cpu"
        need, note = planned_gpus(child, memory_gb) if uses_gpu else (0, None)
        if uses_gpu and not 0 < need <= len(gpus):
            count_text = f"needs {need} GPUs" if need else f"fits no number of GPUs ({note})"
            raise LanesError(f"run {r.index} ({r.label}) {count_text} by the planner (+plan=true); this node shows "
                             f"{len(gpus)}: run it on a bigger node, or pass lanes=1 to run one run at a time on all "
                             f"{len(gpus)}")
        needs[r.index] = Need(int(child.threads), need)
    fit, why = lanes_that_fit(list(needs.values()), n_cores, len(gpus))
    if count is not None and count > fit:
        print(f"lanes: lanes={count} is more than this machine fits ({why}); running {fit} side by side", flush=True)
    lanes = min(fit if count is None else min(count, fit), len(pending))
    return Plan(lanes, needs, n_cores, list(gpus), why)


class Slots:
    """The free cores and GPUs; a run takes its Need when it starts and gives it back when it ends."""

    def __init__(self, n_cores: int, gpus: list[str]):
        self.cores, self.order = n_cores, {g: i for i, g in enumerate(gpus)}
        self.free = list(gpus)

    def take(self, need: Need, alone: bool) -> list[str] | None:
        """The GPU ids given to the run, or None when it does not fit now. A run alone always gets the
        cores (threads above the machine's cores ran that way before lanes)."""
        if need.gpus > len(self.free) or (need.threads > self.cores and not alone):
            return None
        ids, self.free = self.free[:need.gpus], self.free[need.gpus:]
        self.cores -= need.threads
        return ids

    def give(self, need: Need, ids: list[str]) -> None:
        self.cores += need.threads
        self.free = sorted([*self.free, *ids], key=self.order.__getitem__)  # lowest ids first, as before


def schedule(pending: list[PlannedRun], p: Plan, start, end, poll_s: float = POLL_S) -> None:
    """Start runs in plan order as lanes and slots allow, `start(run, gpu_ids) -> Popen`; call `end(run, rc)` as
    each child exits. Any exception (Ctrl-C, SIGTERM, a child interrupted from outside) stops every child,
    each writing its record as interrupted, and propagates: a rerun with the stamp resumes."""
    slots, waiting, running = Slots(p.cores, p.gpus), list(pending), {}
    try:
        while waiting or running:
            while len(running) < p.lanes:
                pick = next(((r, ids) for r in waiting
                             if (ids := slots.take(p.needs[r.index], alone=not running)) is not None), None)
                if pick is None:
                    break
                waiting.remove(pick[0])
                running[pick[0].index] = (pick[0], pick[1], start(*pick))
            if not running:  # cannot happen after plan()'s checks; a loop that never ends would be worse
                raise LanesError(f"runs {[r.index for r in waiting]} fit no free lane; pass lanes=1")
            ended = [k for k, (_, _, proc) in running.items() if proc.poll() is not None]
            for k in ended:
                r, ids, proc = running.pop(k)
                slots.give(p.needs[k], ids)
                end(r, proc.returncode)
            if not ended:
                time.sleep(poll_s)
    except BaseException:
        stop_children([proc for _, _, proc in running.values()])
        raise


def run_in_lanes(p: Plan, pending: list[PlannedRun], cli: list[str], root, n_runs: int, done: int,
                 todo: int) -> list[tuple[PlannedRun, str]]:
    """The experiment's pending runs in `p.lanes` lanes, with a progress line as each starts and ends:
    runs finished of `todo` (`done` before this process) and an ETA from this process's finished runs.
    Returns (run, why) per failed run; their records say why too."""
    from harness.core.progress import experiment_progress  # tqdm: loaded when runs start, not at --help

    failed, t0, started, ended = [], time.time(), {}, [0]
    print(f"lanes: {p.lanes} runs side by side ({p.why}), in plan order", flush=True)

    def head(r: PlannedRun) -> str:
        return f"[{r.index + 1}/{n_runs}] {r.model or ''} seed={r.seed} {r.label}"

    def overall() -> str:
        return experiment_progress(done + ended[0], todo, ended[0], time.time() - t0)

    def start(r: PlannedRun, ids: list[str]):
        on = f" on GPU {','.join(ids)}" if ids else ""
        print(f"{head(r)}: starting in its own process{on}{overall()}", flush=True)
        started[r.index] = time.time()
        return start_child([*cli, f"+run_index={r.index}", "+child_run=true"],
                           {"CUDA_VISIBLE_DEVICES": ",".join(ids)} if ids else None)

    def end(r: PlannedRun, rc: int) -> None:
        exit_status(rc, f"run {r.index} ({r.label})")  # interrupted from outside: every lane stops
        ended[0] += 1
        if rc:
            failed.append((r, _failure(root / r.key, rc)))
            if rc < 0:
                mark_killed(root / r.key, failed[-1][1])
        state = f"FAILED (exit status {rc})" if rc else "ok"
        print(f"{head(r)}: {state} after {time.time() - started[r.index]:.0f} s{overall()}", flush=True)

    schedule(pending, p, start, end)
    sys.stdout.flush()
    return failed
