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
  `max_iterations` (the paper's 500) is only an upper bound. The iteration that spends the budget is charged
  pro rata (harness/core/budget.py): its update is applied with step size alpha x f, f = the share of its cost
  the budget had left (known once its members are scored, before the update), and f x its FLOPs are charged.
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
  weights only, merged into the model at the end). See methods/es/core.py and tests/test_es_variants.py.
- Numerics as a variable (not in the paper's text; defaults = the fp32 master above): `numerics: inplace`
  runs the reference code's own arithmetic (no master; perturb, restore and update in place in
  model.dtype, noise drawn in that dtype; methods/es/numerics.py), `noise_seeding` picks the tensors'
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
import random
import statistics
import time
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors.torch import load_file

from harness.core.atomic import write_text_atomic
from harness.core.budget import Ledger, StepStats
from harness.core.flops import generation_flops
from harness.core.policy import Policy
from methods.base import ConfiguredMethod, check_resumable, fsync_file, latest_dir, save_dir_atomic
from methods.es.core import (CKPT, LOOSE, VARIANT_DEFAULTS, VariantError,  # noqa: F401
                             es_update, members, noise, noise_seed, noise_spec, normalize, perturb, placebo, restore,
                             update_terms, zscore)
from methods.es.config import ES_FACTS, PAPER_POPULATION, ESConfig, es_memory  # noqa: F401 - light (no torch)
from methods.es.lora import adapter_tensors, wrap_lora
from methods.es.workers import WorkerError, start_workers
from tasks.base import Task


# ---- the method: the one ES loop ----
class ES(ConfiguredMethod):
    """Evolution strategies over all parameters; hyperparameters in ESConfig (built by Hydra).

    The loop runs on the driver; members are scored by a pool of workers (methods/es/workers.py): one in
    this process (engine=hf on the policy's own model, or a vLLM engine) or K Ray actors. Per iteration the
    driver draws the member seeds and prompt indices (a pure function of (seed, iteration)), has the pool
    hand members to whichever worker is free, gathers one MemberScore per member in member
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
    facts = ES_FACTS  # methods/es/config.py: read there without torch (harness/core/method_facts.py light_facts)

    @property
    def use_ray(self) -> bool:
        c = self.config
        return c.workers > 1 if c.use_ray is None else bool(c.use_ray)

    def _iteration_rng(self, iteration: int, n_train: int) -> tuple[list[int], list[int]]:
        """Member seeds (antithetic: one per mirrored pair) and prompt indices of one iteration: a pure
        function of (seed, iteration). methods.es.core.members expands seeds into (seed, sign) members."""
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
        k = pool.size
        try:
            checksum = self._agree(pool.init_master(source, spec), start)
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
        """Worker 0's numerics record (methods/es/numerics.py): this iteration's, or the run's summary
        (|delta| against the weights at iteration `since`: the start, or the checkpoint resumed from)."""
        c = self.config
        if not c.numerics_record:
            return {"numerics": c.numerics, "noise_seeding": c.noise_seeding, "record": False} if final else None
        rec = pool.numerics(final)
        return {"noise_seeding": c.noise_seeding, **rec, **({"since_iteration": since} if final else {})}

    def _iteration(self, pool, it: int, ledger: Ledger, n_train: int) -> StepStats:
        """One ES iteration; charges the ledger once the update is in every worker's weights."""
        c = self.config
        k = pool.size
        t0 = time.perf_counter()
        seeds, idx = self._iteration_rng(it, n_train)
        seeds, signs = members(seeds, c.antithetic)
        a = time.perf_counter()
        scored = pool.score(seeds, signs, idx, c.sigma, c.generation_batch_size,
                            f"scoring the members of iteration {it + 1}")  # member order
        t_score = time.perf_counter() - a
        rewards = [m.reward for m in scored]  # logged as scored: a permutation leaves their mean and spread
        fitness = rewards if c.fitness == "real" else placebo(rewards, c.antithetic,
                                                              random.Random(f"es-placebo-{c.seed}-{it}"))
        flops, executed = 0.0, 0.0
        for m in scored:  # summed in member order, whatever the number of workers
            flops += m.flops
            executed = None if executed is None or m.executed_flops is None else executed + m.executed_flops
        samples = c.population * len(idx)
        # the stop rule (harness/core/budget.py): the iteration that spends the budget steps alpha x f
        fraction = ledger.fraction_of(flops, samples)
        a = time.perf_counter()
        z = normalize(fitness, c.normalize)
        if z is None:  # every member scored the same: no signal, no update
            norms, sums = [0.0] * k, pool.checksum()
        else:
            terms, coefs = update_terms(seeds, signs, z)
            alpha = c.alpha if fraction == 1.0 else c.alpha * fraction  # whole steps: bit-identical to before
            res = pool.update(terms, coefs, alpha, len(seeds), f"updating at iteration {it + 1}")
            norms, sums = [r[0] for r in res], [r[1] for r in res]
        checksum = self._agree(sums, it + 1)
        t_update = time.perf_counter() - a
        numerics = self._numerics(pool, final=False)
        extra = {"numerics": numerics} if numerics is not None else {}
        t = {key: sum(m.t[key] for m in scored) for key in ("generate", "reward", "perturb_restore")}
        # the ledger's listeners (periodic evaluation) see the updated, unperturbed weights
        return ledger.step(flops, samples, statistics.fmean(rewards), statistics.pstdev(rewards),
                           executed_flops=executed, fraction=fraction,
                           iteration=it + 1, reward_max=max(rewards), reward_min=min(rewards), update_norm=norms[0],
                           skipped=z is None, sigma=c.sigma, alpha=c.alpha, step_s=time.perf_counter() - t0,
                           **{f"time_{key}_s": v for key, v in t.items()}, time_update_s=t_update,
                           time_score_wall_s=t_score, workers=k, engine=c.engine_name,
                           master_checksum=checksum, tokens=sum(m.tokens for m in scored), **extra)

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
                 "population": {"workers": pool.size, "engine": self.config.engine_name}}

        def write(tmp: Path) -> None:
            pool.save_master(str(tmp / "master.safetensors"))  # worker 0 only
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
