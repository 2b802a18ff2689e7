"""Full-parameter evolution strategies (ES) for LLM post-training (Qiu et al. 2025, arXiv 2509.24372).

Each iteration draws N member seeds, and every member scores the same prompt batch with greedy
decoding while the model is perturbed in place (theta + sigma * eps_n, every parameter tensor).
Rewards are z-scored across the population and the update is
theta <- theta + alpha / N * sum_n z_n * eps_n, with eps_n regenerated from its seed (never stored).

Departures from the paper's reference code (all deliberate):
- Noise: an independent stream per (member seed, tensor index), not one seed for every tensor,
  which gives identical noise to every pair of same-shaped tensors (all q/k/v/o projections of a
  layer, all layers' norms) and so correlates their updates.
- Precision: an fp32 master copy of all parameters. Perturbation is computed in fp32 from the
  master and written into the working weights, restore copies the master back (bit-exact), and
  the update is applied to the master in fp32 then cast into the model (the reference code does
  all three in bf16, so restore is inexact and drifts, and an update below half a bf16 ulp of
  its weight is rounded away: with alpha=5e-4 most updates would vanish).
- Reward is the task's reward on the completion only, never prompt+completion.
- Stopping: the compute ledger (FLOPs or samples) stops training at an iteration boundary;
  `max_iterations` (the paper's 500) is only an upper bound.
- Prompt batch: as in the paper, every iteration scores the same first `prompts_per_iteration`
  train rows (the paper's whole 200-prompt train split). `fixed_batch: false` instead resamples
  the batch each iteration from the train split with a seeded RNG (not in the paper).
- When every member gets the same reward the z-scores are all 0: the update is skipped and logged.
- `alpha_per_sigma` (not in the paper, which fixes alpha=5e-4): when set, alpha = sigma x alpha_per_sigma,
  so a sweep over sigma keeps the step-to-noise ratio fixed (the authors' later code uses 0.5).
  null (default) keeps `alpha` as given; the effective alpha is in the run record's train summary.
- Variants (not in the paper; each a config switch, defaults = the paper's ES, bit-identical to it):
  `params` (which tensors: all | norms | norms+attention | last_layer | a name regex), `noise_rank`
  (EGGROLL low-rank eps = A B^T / sqrt(r) for matrices), `antithetic` (mirrored pairs +eps/-eps on
  one seed), `normalize` (zscore | none | centered_ranks) and `peft: lora` (ES on LoRA adapter
  weights only, merged into the model at the end). See methods/es_core.py and tests/test_es_variants.py.
- Numerics as a variable (not in the paper's text; defaults = the fp32 master above): `numerics: inplace`
  runs the reference code's own arithmetic (no master; perturb, restore and update in place in
  model.dtype, noise drawn in that dtype; methods/es_numerics.py), `noise_seeding` picks the tensors'
  seeds (iid: ours; per_tensor_offset / per_tensor_same: the reference's two versions), and
  `numerics_record` records restore error, changed coordinates and the final |delta| in ulps
  (StepStats extras and the train summary under `numerics`). See tests/test_es_numerics.py.
- Checkpoint/resume (not in the paper): master weights + iteration + ledger state; all randomness
  is a pure function of (seed, iteration), so a resumed run reaches bit-identical weights.
  Checkpoints are swapped in atomically and survive a kill at any point of a save.

    python -m harness method=es                  # train with ES
    python -m pytest tests/test_es.py -q         # tests
    python -m harness.tools.bench_es --model zoo-1m    # where an iteration's time goes
"""
from __future__ import annotations

import dataclasses
import json
import math
import random
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file

from harness.core import gpu_memory as gm
from harness.core.atomic import write_text_atomic
from harness.core.budget import Ledger, StepStats
from harness.core.memory_parts import GB, gpus_needed, kv_cache_bytes
from harness.core.method_facts import ES as ES_FAMILY, MethodFacts
from harness.engines import plain_engine
from harness.core.flops import generation_flops
from harness.core.policy import Policy
from methods.base import ConfiguredMethod, check_resumable, fsync_file, latest_dir, save_dir_atomic
from methods.es_core import (CKPT, FITNESS, LOOSE, NORMALIZE, SEEDINGS, VARIANT_DEFAULTS, VariantError,  # noqa: F401
                             es_update, members, noise, noise_seed, noise_spec, normalize, perturb, placebo, restore,
                             update_terms, wants_population, zscore)
from methods.es_numerics import NUMERICS
from methods.es_lora import adapter_resident, adapter_tensors, wrap_lora
from methods.es_workers import WorkerError, blocks, start_workers
from tasks.base import Task

PAPER_POPULATION = 30  # the paper's N: ESConfig's default and the reference of a population sweep (ES.facts)


@dataclass
class ESConfig:
    """ES hyperparameters; the defaults are the paper's fixed set."""

    population: int = field(default=PAPER_POPULATION, metadata={"help": "members N per iteration"})
    sigma: float = field(default=1e-3, metadata={"help": "noise scale: members are theta + sigma * eps"})
    alpha: float = field(default=5e-4, metadata={"help": "step size; 1/sigma is folded into it"})
    alpha_per_sigma: float | None = field(default=None, metadata={
        "help": "null: use alpha; a number r: alpha = sigma * r (ties the step to the noise in a sigma sweep; "
                "the authors' later default is 0.5)"})
    prompts_per_iteration: int = field(default=200, metadata={"help": "prompts every member scores per iteration"})
    fixed_batch: bool = field(default=True, metadata={"help": "true (the paper): the first prompts_per_iteration "
                                                      "train rows every iteration; false: resample each iteration"})
    max_iterations: int = field(default=500, metadata={"help": "upper bound; the ledger normally stops first"})
    seed: int = field(default=0, metadata={"help": "seeds member seeds and prompt batches"})
    generation_batch_size: int = field(default=200, metadata={"help": "sequences per generate() call"})
    checkpoint_every: int = field(default=50, metadata={"help": "iterations between checkpoints (and at the end); "
                                                        "0 = only at the end"})
    # scale-out (methods/es_workers.py): where members are scored; the result does not depend on it
    engine: dict | str | None = field(default=None, metadata={
        "help": "conf/engine: hf (in place) or vllm, and engine.workers: ES workers, one engine each"})
    use_ray: bool | None = field(default=None, metadata={"help": "null: Ray iff engine.workers > 1"})
    ray_address: str | None = field(default=None, metadata={"help": "null: a local Ray; host:6379 joins a cluster"})
    threads: int = field(default=1, metadata={"help": "torch CPU threads of each worker"})
    # variants (defaults: the paper's ES)
    params: str = field(default="all", metadata={"help": "tensors perturbed and updated: all | norms | "
                                                "norms+attention | last_layer | a parameter-name regex"})
    noise_rank: int | None = field(default=None, metadata={"help": "null: full-rank noise; r: EGGROLL low-rank "
                                                          "(A B^T)/sqrt(r) for every matrix, vectors full"})
    antithetic: bool = field(default=False, metadata={"help": "mirrored pairs: population/2 seeds, each +eps and -eps"})
    normalize: str = field(default="zscore", metadata={
        "help": "reward shaping: zscore (paper) | none | centered_ranks"})
    fitness: str = field(default="real", metadata={
        "help": "real: ES | placebo: rewards permuted across members each iteration (seeded) before "
                "normalisation, the functional null (same seeds, walk and budget; no reward-direction link)"})
    peft: str | None = field(default=None, metadata={"help": "null: ES on the model's weights; lora: on LoRA adapters "
                                                    "(engine=hf only), merged into the model at the end"})
    lora: dict = field(default_factory=lambda: dict(VARIANT_DEFAULTS["lora"]), metadata={
        "help": "peft=lora adapter: r, alpha, target_modules"})
    # numerics (defaults: the fp32 master, bit-identical to ES before them)
    numerics: str = field(default="exact", metadata={
        "help": "exact: fp32 master, exact restore | inplace: the reference code's in-place arithmetic in "
                "model.dtype (engine=hf)"})
    noise_seeding: str = field(default="iid", metadata={
        "help": "tensor seeds: iid (splitmix64 of member seed, index) | per_tensor_offset (seed + index) | "
                "per_tensor_same (the member seed for every tensor)"})
    numerics_record: bool | None = field(default=None, metadata={
        "help": "record restore error, changed share and the final |delta| in ulps; null: true iff numerics=inplace"})

    def __post_init__(self):
        self.engine = plain_engine(self.engine)  # a Hydra node in, a plain dict (JSON for checkpoints) out
        self._check_variants()
        if self.population < 2:  # before the >= 1 rule, so population=0 gets the one message that is true
            raise ValueError(f"method.population={self.population}: z-scores need at least 2 members; set >= 2")
        for name in ("prompts_per_iteration", "max_iterations", "generation_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"method.{name}={getattr(self, name)} must be >= 1")
        if self.alpha_per_sigma is not None:
            if not self.alpha_per_sigma > 0:
                raise ValueError(f"method.alpha_per_sigma={self.alpha_per_sigma} must be > 0, "
                                 "or null to use method.alpha")
            self.alpha = self.sigma * self.alpha_per_sigma  # the effective step; recorded in checkpoints and summaries
        if not self.sigma > 0 or not self.alpha > 0:
            raise ValueError(f"method.sigma={self.sigma} and method.alpha={self.alpha} must both be > 0 "
                             "(paper: sigma=1e-3, alpha=5e-4)")
        if self.checkpoint_every < 0:
            raise ValueError(f"method.checkpoint_every={self.checkpoint_every} must be >= 0 (0 = only at the end)")

    @property
    def workers(self) -> int:
        """ES workers: `engine.workers` (the one place it is set)."""
        return int(self.engine.get("workers", 1))

    @property
    def engine_name(self) -> str:
        return self.engine.get("name") or "hf"

    def _check_variants(self) -> None:
        if hasattr(self.lora, "_metadata"):  # a Hydra node: plain (JSON for checkpoints)
            from omegaconf import OmegaConf
            self.lora = OmegaConf.to_container(self.lora, resolve=True)
        self.lora = {**VARIANT_DEFAULTS["lora"], **dict(self.lora or {})}
        if isinstance(self.lora["target_modules"], tuple):
            self.lora["target_modules"] = list(self.lora["target_modules"])
        if self.normalize not in NORMALIZE:
            raise VariantError(f"method.normalize={self.normalize!r} is unknown; use one of {', '.join(NORMALIZE)}")
        if self.fitness not in FITNESS:
            raise VariantError(f"method.fitness={self.fitness!r} is unknown; use one of {', '.join(FITNESS)}")
        if self.noise_rank is not None and self.noise_rank < 1:
            raise VariantError(f"method.noise_rank={self.noise_rank} must be >= 1, or null for full-rank noise")
        if self.antithetic and self.population % 2:
            raise VariantError(f"method.antithetic=true needs an even population (mirrored pairs); "
                               f"got method.population={self.population}, use {self.population + 1}")
        if self.peft not in (None, "lora"):
            raise VariantError(f"method.peft={self.peft!r} is unknown; use null or lora")
        if self.peft and wants_population(self.engine, self.workers, self.use_ray):
            raise VariantError("method.peft=lora runs only in place (engine=hf, engine.workers=1); "
                               "set engine=hf engine.workers=1 or drop method.peft")
        if self.peft and not (int(self.lora["r"]) >= 1 and float(self.lora["alpha"]) > 0):
            raise VariantError(f"method.lora={self.lora}: r must be >= 1 and alpha > 0")
        self._check_numerics()

    def _check_numerics(self) -> None:
        if self.numerics not in NUMERICS:
            raise VariantError(f"method.numerics={self.numerics!r} is unknown; use one of {', '.join(NUMERICS)}")
        if self.noise_seeding not in SEEDINGS:
            raise VariantError(f"method.noise_seeding={self.noise_seeding!r} is unknown; "
                               f"use one of {', '.join(SEEDINGS)}")
        if self.numerics_record is None:
            self.numerics_record = self.numerics == "inplace"
        if self.numerics == "inplace":
            if self.engine_name != "hf":
                raise VariantError(f"method.numerics=inplace is not supported on engine={self.engine_name}; "
                                   "use engine=hf")
            if self.noise_rank is not None:
                raise VariantError("method.numerics=inplace draws full-rank noise in the weights' dtype, as the "
                                   "reference does; drop method.noise_rank or use numerics=exact")
            if self.peft:
                raise VariantError("method.numerics=inplace perturbs the model's own weights (peft keeps adapters "
                                   "in fp32, no reference to follow); drop method.peft or use numerics=exact")
        if self.numerics_record and self.engine_name != "hf":
            raise VariantError(f"method.numerics_record=true is measured on engine=hf only, not "
                               f"engine={self.engine_name}; set method.numerics_record=false or use engine=hf")


def es_memory(c, shape, tokens: int, *, dtype: str, engine: dict, gpu_gb: float, headroom: float,
              **_) -> tuple[dict[str, float], int, str | None]:
    """ES's bytes per part on one GPU (ES.facts.memory; harness/runner/pricing.py's module docstring);
    `c`: ESConfig's settings as the planner reads them (harness/core/method_facts.py configure).

    engine=hf: weights + the fp32 master, its noise buffer and the update's temporaries (largest tensor),
    + KV cache at generation_batch_size sequences, all on one GPU (no sharding). engine=vllm: per GPU, what
    the code requests (harness/core/gpu_memory.py es_vllm_plan); GPUs = engine.workers / engine.engines_per_gpu.
    """
    b, counts = gm.dtype_bytes(dtype), gm.model_counts(shape)
    if engine.get("name") == "vllm":
        plan = gm.es_vllm_plan(shape, dtype, int(gpu_gb * GB), engine,  # the driver's copy waits on the CPU
                               wanted_sequences=int(c.generation_batch_size), wanted_tokens=tokens)
        engines = max(1, math.ceil(int(engine.get("workers", 1) or 1) / int(engine.get("engines_per_gpu", 1) or 1)))
        return ({k: float(v) for k, v in plan.parts().items()}, engines if plan.fits else 0,
                plan.warning() if plan.fits else plan.error())
    if c.peft == "lora":  # ES on the adapters' tensors only (engine=hf)
        es = adapter_resident(shape, {**VARIANT_DEFAULTS["lora"], **dict(c.lora or {})}, b)
    else:
        es = gm.es_hf_resident(counts, b, str(c.numerics))
    mem = {"weights": float(b * counts.params), **{k: float(v) for k, v in es.items()},
           "kv_cache": kv_cache_bytes(shape, int(c.generation_batch_size), tokens, b)}
    if sum(mem.values()) > headroom * gpu_gb * GB:
        return mem, 0, (f"method=es engine=hf keeps the model, its fp32 master and the KV cache on one GPU: "
                        f"{sum(mem.values()) / GB:.1f} GB > {headroom:.0%} of {gpu_gb:.0f} GB; lower "
                        "method.generation_batch_size, or use engine=vllm")
    return mem, gpus_needed(sum(mem.values()), gpu_gb, headroom), None


# ---- the method: the one ES loop ----
class ES(ConfiguredMethod):
    """Evolution strategies over all parameters; hyperparameters in ESConfig (built by Hydra).

    The loop runs on the driver; members are scored by workers (methods/es_workers.py): one in this
    process (engine=hf on the policy's own model, or a vLLM engine) or K Ray actors. Per iteration the
    driver draws the member seeds and prompt indices (a pure function of (seed, iteration)), assigns
    members to workers in contiguous blocks, gathers one (reward, FLOPs) pair per member in member
    order, normalises the rewards and sends the seeds and their coefficients to *every* worker, which
    updates its own master. After every iteration the workers' master checksums are compared; a
    mismatch raises (never a silent drift). K=1 and K=K' workers, and the HF and vLLM engines on one
    device, reach bit-identical masters (tests/test_es_population.py).
    """

    name = "es"
    label_keys = ("sigma", "alpha")
    label_flags = {"fitness": "real"}  # "es sigma=... alpha=... fitness=placebo"; real ES's label is unchanged
    trains = True
    config_class = ESConfig
    facts = MethodFacts(
        family=ES_FAMILY,
        update_unit="one ES iteration (its update is skipped, and logged, when every member ties)",
        step_cap="max_iterations",
        reference_label=r"(?s)ES|(?i:es full).*",  # "ES" or "ES full ...": the full-ES cell when none is named
        reference_points={"population": PAPER_POPULATION},
        samples_per_step=lambda c: c.population * c.prompts_per_iteration,
        scoring_forwards=lambda c: 0,
        memory=es_memory,
        # False when members are scored on engine workers: the driver's model is stale until the end
        trains_in_driver=lambda c: not wants_population(c.engine, c.workers, c.use_ray))

    @property
    def use_ray(self) -> bool:
        c = self.config
        return c.workers > 1 if c.use_ray is None else bool(c.use_ray)

    def _iteration_rng(self, iteration: int, n_train: int) -> tuple[list[int], list[int]]:
        """Member seeds (antithetic: one per mirrored pair) and prompt indices of one iteration: a pure
        function of (seed, iteration). methods.es_core.members expands seeds into (seed, sign) members."""
        c = self.config
        rng = random.Random(f"es-{c.seed}-{iteration}")
        seeds = [rng.getrandbits(31) for _ in range(c.population // 2 if c.antithetic else c.population)]
        if c.fixed_batch:
            return seeds, list(range(c.prompts_per_iteration))
        return seeds, rng.sample(range(n_train), c.prompts_per_iteration)

    def _check_workers(self) -> None:
        c = self.config
        if c.workers < 1:
            raise ValueError(f"engine.workers={c.workers} must be >= 1")
        if c.workers > 1 and not self.use_ray:
            raise ValueError(f"engine.workers={c.workers} needs Ray (method.use_ray=true or null)")
        if c.workers > c.population:
            raise ValueError(f"engine.workers={c.workers} exceeds method.population={c.population}; "
                             "some workers would have no member to score")

    def train(self, policy: Policy, task: Task, ledger: Ledger, run_dir: Path) -> dict:
        c = self.config
        if not c.peft:
            return self._train(policy, task, ledger, Path(run_dir))
        # LoRA: the same loop on the adapter's tensors; generation runs through the wrapped model
        peft_model = wrap_lora(policy.model, c.lora, seed=c.seed)
        named = adapter_tensors(peft_model)
        try:
            out = self._train(dataclasses.replace(policy, model=peft_model), task, ledger, Path(run_dir), named)
        finally:
            with torch.no_grad():
                policy.model = peft_model.merge_and_unload()  # the base model, adapters folded into its weights
        return out | {"peft": "lora", "adapter_params": sum(p.numel() for _, p in named)}

    def _train(self, policy: Policy, task: Task, ledger: Ledger, run_dir: Path, named: list | None = None) -> dict:
        """The ES loop over `named` ((name, tensor) pairs; None: the model's parameters)."""
        c = self.config
        self._check_workers()
        rows = task.load("train").to_dict()
        n_train = len(rows["prompt"])
        if c.prompts_per_iteration > n_train:
            raise ValueError(f"method.prompts_per_iteration={c.prompts_per_iteration} but the train split has "
                             f"{n_train} rows; lower it to at most {n_train}")
        start, source = self._load_checkpoint(run_dir, ledger)
        self._check_fits(policy, task, ledger, rows)
        names_shapes = named if named is not None else list(policy.model.named_parameters())  # a meta model will do
        spec = noise_spec([n for n, _ in names_shapes], [tuple(p.shape) for _, p in names_shapes], c.params,
                          c.noise_rank, c.noise_seeding)
        pool = self._start_workers(policy, task, c.engine, named)
        k = len(pool.workers)
        try:
            indices = None if spec.indices is None else list(spec.indices)
            checksum = self._agree(pool.call("init_master", [(source, indices, spec.rank, spec.seeding)] * k), start)
            it, skipped, last = start, 0, None
            ledger.start_clock()
            while it < c.max_iterations and not ledger.exhausted:
                last = self._iteration(pool, it, ledger, n_train)
                checksum = last.extras["master_checksum"]
                skipped += last.extras["skipped"]
                it += 1
                if c.checkpoint_every and it % c.checkpoint_every == 0:
                    self._save_checkpoint(pool, run_dir, it, ledger)
            self._save_checkpoint(pool, run_dir, it, ledger)
            numerics = self._numerics(pool, final=True, since=start)
        finally:
            pool.close()
        if not self.weights_in_driver:  # the workers held the weights: the trained master into the driver's model
            self._load_into(policy, run_dir / CKPT / "master.safetensors")
        ledger.close()
        return {"steps": it, "resumed_from": start, "flops": ledger.flops, "samples": ledger.samples,
                "wall_s": ledger.wall_s, "skipped_updates": skipped, "sigma": c.sigma, "alpha": c.alpha,
                "fitness": c.fitness,
                "last_reward_mean": last.reward_mean if last else None, "workers": k,
                "engine": c.engine_name, "master_checksum": checksum, "numerics": numerics}

    def _start_workers(self, policy: Policy, task: Task, engine: dict, named: list | None):
        c = self.config
        numerics = {"numerics": c.numerics, "record": bool(c.numerics_record)}
        return start_workers(c.workers, self.use_ray, engine, policy, task, c.threads, c.ray_address, named,
                             numerics)

    def _agree(self, sums: list[str], it: int) -> str:
        if len(set(sums)) != 1:
            if self.config.numerics == "inplace":
                raise WorkerError(f"ES workers' weights diverged after iteration {it}: checksums {sums}; under "
                                  "numerics=inplace the workers' rounding diverged (in-place arithmetic in the "
                                  "weights' dtype differs across their devices/kernels); use numerics=exact")
            raise WorkerError(f"ES workers' master weights diverged after iteration {it}: checksums {sums}; "
                              "refusing to continue (workers must apply identical updates)")
        return sums[0]

    def _numerics(self, pool, final: bool, since: int = 0) -> dict | None:
        """Worker 0's numerics record (methods/es_numerics.py): this iteration's, or the run's summary
        (|delta| against the weights at iteration `since`: the start, or the checkpoint resumed from)."""
        c = self.config
        if not c.numerics_record:
            return {"numerics": c.numerics, "noise_seeding": c.noise_seeding, "record": False} if final else None
        rec = pool.call("numerics", [(final,)], "recording numerics")[0]
        return {"noise_seeding": c.noise_seeding, **rec, **({"since_iteration": since} if final else {})}

    def _iteration(self, pool, it: int, ledger: Ledger, n_train: int) -> StepStats:
        """One ES iteration; charges the ledger once the update is in every worker's weights."""
        c = self.config
        k = len(pool.workers)
        t0 = time.perf_counter()
        seeds, idx = self._iteration_rng(it, n_train)
        seeds, signs = members(seeds, c.antithetic)
        a = time.perf_counter()
        parts = pool.call("score", [(seeds[lo:hi], idx, c.sigma, c.generation_batch_size, signs[lo:hi])
                                    for lo, hi in blocks(len(seeds), k)],
                          f"scoring the members of iteration {it + 1}")
        scored = [m for part in parts for m in part]  # member order
        t_score = time.perf_counter() - a
        rewards = [m["reward"] for m in scored]  # logged as scored: a permutation leaves their mean and spread
        fitness = rewards if c.fitness == "real" else placebo(rewards, c.antithetic,
                                                              random.Random(f"es-placebo-{c.seed}-{it}"))
        flops, executed = 0.0, 0.0
        for m in scored:  # summed in member order, whatever the number of workers
            flops += m["flops"]
            executed = None if executed is None or m["executed_flops"] is None else executed + m["executed_flops"]
        a = time.perf_counter()
        z = normalize(fitness, c.normalize)
        if z is None:  # every member scored the same: no signal, no update
            norms, sums = [0.0] * k, pool.call("checksum", [()] * k, "checking")
        else:
            terms, coefs = update_terms(seeds, signs, z)
            res = pool.call("update", [(terms, coefs, c.alpha, len(seeds))] * k, f"updating at iteration {it + 1}")
            norms, sums = [r[0] for r in res], [r[1] for r in res]
        checksum = self._agree(sums, it + 1)
        t_update = time.perf_counter() - a
        numerics = self._numerics(pool, final=False)
        extra = {"numerics": numerics} if numerics is not None else {}
        t = {key: sum(m["t"][key] for m in scored) for key in ("generate", "reward", "perturb_restore")}
        # the ledger's listeners (periodic evaluation) see the updated, unperturbed weights
        return ledger.step(flops, c.population * len(idx), statistics.fmean(rewards), statistics.pstdev(rewards),
                           executed_flops=executed,
                           iteration=it + 1, reward_max=max(rewards), reward_min=min(rewards), update_norm=norms[0],
                           skipped=z is None, sigma=c.sigma, alpha=c.alpha, step_s=time.perf_counter() - t0,
                           **{f"time_{key}_s": v for key, v in t.items()}, time_update_s=t_update,
                           time_score_wall_s=t_score, workers=k, engine=c.engine_name,
                           master_checksum=checksum, tokens=sum(m["tokens"] for m in scored), **extra)

    def _check_fits(self, policy, task, ledger, rows) -> None:
        """Fail before any work when one iteration (worst case: every completion at max length) exceeds the budget."""
        c = self.config
        if ledger.kind == "samples":
            cost = c.population * c.prompts_per_iteration
        else:
            prompts = [policy.format(p) for p in rows["prompt"][:c.prompts_per_iteration]]
            lens = [len(ids) for ids in policy.tokenizer(prompts, add_special_tokens=False)["input_ids"]]
            cost = c.population * generation_flops(policy.model.config, lens, [task.max_new_tokens] * len(lens))
        ledger.check_step_fits(cost, "ES iteration")

    # ---- checkpoints: run_dir/es_checkpoint/{master.safetensors,state.json}, swapped in atomically ----
    def _save_checkpoint(self, pool, run_dir: Path, iteration: int, ledger: Ledger) -> None:
        """Worker 0 writes the master (run_dir must be on a filesystem every node sees); state.json last."""
        state = {"iteration": iteration, "config": asdict(self.config), "rng": "a pure function of (seed, iteration)",
                 "ledger": ledger.state_dict(),
                 "population": {"workers": len(pool.workers), "engine": self.config.engine_name}}

        def write(tmp: Path) -> None:
            pool.call("save_master", [(str(tmp / "master.safetensors"),)], "checkpointing")  # worker 0 only
            fsync_file(tmp / "master.safetensors")
            write_text_atomic(tmp / "state.json", json.dumps(state, indent=1) + "\n")  # last: marks it complete

        save_dir_atomic(run_dir / CKPT, write)

    def _load_checkpoint(self, run_dir: Path, ledger: Ledger) -> tuple[int, str | None]:
        """(iteration, master file) of run_dir's ES checkpoint, ledger state restored; (0, None) if none."""
        path = latest_dir(run_dir / CKPT, "state.json")
        if path is None:
            return 0, None
        state = json.loads((path / "state.json").read_text())
        check_resumable(path, asdict(self.config), {**VARIANT_DEFAULTS, **state["config"]}, LOOSE, "ES")
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
