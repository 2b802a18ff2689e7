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
- Checkpoint/resume (not in the paper): master weights + iteration + ledger state; all randomness
  is a pure function of (seed, iteration), so a resumed run reaches bit-identical weights.
  Checkpoints are swapped in atomically and survive a kill at any point of a save.

    python -m harness method=es                  # train with ES
    python -m pytest tests/test_es.py -q         # tests
    python -m harness.bench_es --model zoo-1m    # where an iteration's time goes
"""
from __future__ import annotations

import json
import random
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from harness.atomic import write_text_atomic
from harness.budget import Ledger, StepStats
from harness.engines import plain_engine
from harness.flops import generation_flops, padded_generation_flops
from harness.policy import Policy, generate
from methods.base import ConfiguredMethod, check_resumable, fsync_file, latest_dir, save_dir_atomic
from methods.es_core import (CKPT, LOOSE, NORMALIZE, VARIANT_DEFAULTS, VariantError, es_update,  # noqa: F401
                             members, noise, noise_seed, noise_spec, normalize, perturb, restore, update_terms,
                             wants_population, zscore)
from tasks.base import Task



@dataclass
class ESConfig:
    """ES hyperparameters; the defaults are the paper's fixed set."""

    population: int = field(default=30, metadata={"help": "members N per iteration"})
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
    # scale-out (methods/es_population.py): where members are scored; the result does not depend on it
    engine: dict | str | None = field(default=None, metadata={"help": "conf/engine: hf (in place) or vllm"})
    workers: int = field(default=1, metadata={"help": "ES workers, one engine each (Ray actors when > 1)"})
    use_ray: bool | None = field(default=None, metadata={"help": "null: Ray iff workers > 1"})
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
    peft: str | None = field(default=None, metadata={"help": "null: ES on the model's weights; lora: on LoRA adapters "
                                                    "(engine=hf only), merged into the model at the end"})
    lora: dict = field(default_factory=lambda: dict(VARIANT_DEFAULTS["lora"]), metadata={
        "help": "peft=lora adapter: r, alpha, target_modules"})

    def __post_init__(self):
        self.engine = plain_engine(self.engine)  # a Hydra node in, a plain dict (JSON for checkpoints) out
        self._check_variants()
        for name in ("population", "prompts_per_iteration", "max_iterations", "generation_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"method.{name}={getattr(self, name)} must be >= 1")
        if self.population < 2:
            raise ValueError(f"method.population={self.population}: z-scores need at least 2 members; set >= 2")
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

    def _check_variants(self) -> None:
        if hasattr(self.lora, "_metadata"):  # a Hydra node: plain (JSON for checkpoints)
            from omegaconf import OmegaConf
            self.lora = OmegaConf.to_container(self.lora, resolve=True)
        self.lora = {**VARIANT_DEFAULTS["lora"], **dict(self.lora or {})}
        if isinstance(self.lora["target_modules"], tuple):
            self.lora["target_modules"] = list(self.lora["target_modules"])
        if self.normalize not in NORMALIZE:
            raise VariantError(f"method.normalize={self.normalize!r} is unknown; use one of {', '.join(NORMALIZE)}")
        if self.noise_rank is not None and self.noise_rank < 1:
            raise VariantError(f"method.noise_rank={self.noise_rank} must be >= 1, or null for full-rank noise")
        if self.antithetic and self.population % 2:
            raise VariantError(f"method.antithetic=true needs an even population (mirrored pairs); "
                               f"got method.population={self.population}, use {self.population + 1}")
        if self.peft not in (None, "lora"):
            raise VariantError(f"method.peft={self.peft!r} is unknown; use null or lora")
        if self.peft and wants_population(self.engine, self.workers, self.use_ray):
            raise VariantError("method.peft=lora runs only in place (engine=hf, workers=1); "
                               "set engine=hf method.workers=1 or drop method.peft")
        if self.peft and not (int(self.lora["r"]) >= 1 and float(self.lora["alpha"]) > 0):
            raise VariantError(f"method.lora={self.lora}: r must be >= 1 and alpha > 0")


# ---- the method ----
class ES(ConfiguredMethod):
    """Evolution strategies over all parameters; hyperparameters in ESConfig (built by Hydra)."""

    name = "es"
    label_keys = ("sigma", "alpha")
    trains = True
    config_class = ESConfig

    @property
    def weights_in_driver(self) -> bool:
        """False when members are scored on engine workers: the driver's model is stale until the end."""
        return not wants_population(self.config.engine, self.config.workers, self.config.use_ray)

    def _iteration_rng(self, iteration: int, n_train: int) -> tuple[list[int], list[int]]:
        """Member seeds (antithetic: one per mirrored pair) and prompt indices of one iteration: a pure
        function of (seed, iteration). methods.es_core.members expands seeds into (seed, sign) members."""
        c = self.config
        rng = random.Random(f"es-{c.seed}-{iteration}")
        seeds = [rng.getrandbits(31) for _ in range(c.population // 2 if c.antithetic else c.population)]
        if c.fixed_batch:
            return seeds, list(range(c.prompts_per_iteration))
        return seeds, rng.sample(range(n_train), c.prompts_per_iteration)

    def train(self, policy: Policy, task: Task, ledger: Ledger, run_dir: Path) -> dict:
        if wants_population(self.config.engine, self.config.workers, self.config.use_ray):
            from methods import es_population  # Ray and vLLM only load when they are used
            return es_population.train(self, policy, task, ledger, run_dir)
        c, run_dir = self.config, Path(run_dir)
        if c.peft:
            from methods.es_lora import train_lora
            return train_lora(self, policy, task, ledger, run_dir)
        return self._train(policy, task, ledger, run_dir, list(policy.model.named_parameters()))

    def _train(self, policy: Policy, task: Task, ledger: Ledger, run_dir: Path, named: list) -> dict:
        """The ES loop over the tensors `named` ((name, parameter) pairs: the model's, or its LoRA adapters)."""
        c = self.config
        names, params = zip(*named)  # tied weights appear once in named_parameters()
        params, master = list(params), [p.detach().float().clone() for p in params]
        self.spec = noise_spec(list(names), [tuple(p.shape) for p in params], c.params, c.noise_rank)
        buf = torch.empty(max(p.numel() for p in params), dtype=torch.float32, device=params[0].device)
        rows = task.load("train").to_dict()
        n_train = len(rows["prompt"])
        if c.prompts_per_iteration > n_train:
            raise ValueError(f"method.prompts_per_iteration={c.prompts_per_iteration} but the train split has "
                             f"{n_train} rows; lower it to at most {n_train}")
        start = self._load_checkpoint(run_dir, names, master, ledger)
        restore(params, master)
        self._check_fits(policy, task, ledger, rows)
        it, skipped, last = start, 0, None
        ledger.start_clock()
        with torch.no_grad():
            while it < c.max_iterations and not ledger.exhausted:
                last = self._iteration(it, policy, task, ledger, params, master, buf, rows, n_train)
                skipped += last.extras["skipped"]
                it += 1
                if c.checkpoint_every and it % c.checkpoint_every == 0:
                    self._save_checkpoint(run_dir, it, names, master, ledger)
        self._save_checkpoint(run_dir, it, names, master, ledger)
        ledger.close()
        return {"steps": it, "resumed_from": start, "flops": ledger.flops, "samples": ledger.samples,
                "wall_s": ledger.wall_s, "skipped_updates": skipped, "sigma": c.sigma, "alpha": c.alpha,
                "last_reward_mean": last.reward_mean if last else None}

    def _iteration(self, it, policy, task, ledger, params, master, buf, rows, n_train) -> StepStats:
        """One ES iteration; charges the ledger once the update is in the working weights."""
        c, t = self.config, {"generate": 0.0, "reward": 0.0, "perturb_restore": 0.0, "update": 0.0}
        spec = self.spec
        t0 = time.perf_counter()
        seeds, idx = self._iteration_rng(it, n_train)
        seeds, signs = members(seeds, c.antithetic)
        batch = {k: [v[i] for i in idx] for k, v in rows.items()}
        columns = {k: v for k, v in batch.items() if k != "prompt"}
        rewards, flops, executed = [], 0.0, 0.0
        for s, sign in zip(seeds, signs):
            a = time.perf_counter()
            perturb(params, master, s, sign * c.sigma, buf, spec)
            b = time.perf_counter()
            gen = generate(policy, batch["prompt"], greedy=True, max_new_tokens=task.max_new_tokens,
                           batch_size=c.generation_batch_size)
            d = time.perf_counter()
            restore(params, master, spec)
            e = time.perf_counter()
            scores = task.reward([x[0] for x in gen.texts], **columns)
            f = time.perf_counter()
            rewards.append(statistics.fmean(scores))
            flops += generation_flops(policy.model.config, gen.prompt_tokens, [x[0] for x in gen.completion_tokens])
            executed += padded_generation_flops(policy.model.config, gen.batches)
            t["perturb_restore"] += (b - a) + (e - d)
            t["generate"] += d - b
            t["reward"] += f - e
        a = time.perf_counter()
        z = normalize(rewards, c.normalize)
        norm = 0.0
        if z is not None:
            terms, coefs = update_terms(seeds, signs, z)
            norm = es_update(master, terms, coefs, c.alpha, buf, spec, n=len(seeds))
            restore(params, master, spec)  # cast the updated master into the working weights
        t["update"] = time.perf_counter() - a
        # the ledger's listeners (periodic evaluation) see the updated, unperturbed weights
        return ledger.step(flops, c.population * len(idx), statistics.fmean(rewards), statistics.pstdev(rewards),
                           executed_flops=executed,
                           iteration=it + 1, reward_max=max(rewards), reward_min=min(rewards), update_norm=norm,
                           skipped=z is None, sigma=c.sigma, alpha=c.alpha, step_s=time.perf_counter() - t0,
                           **{f"time_{k}_s": v for k, v in t.items()})

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
    def _save_checkpoint(self, run_dir: Path, iteration: int, names, master, ledger: Ledger) -> None:
        state = {"iteration": iteration, "config": asdict(self.config), "rng": "a pure function of (seed, iteration)",
                 "ledger": ledger.state_dict()}

        def write(tmp: Path) -> None:
            save_file({n: m.detach().cpu().contiguous() for n, m in zip(names, master)}, str(tmp / "master.safetensors"))
            fsync_file(tmp / "master.safetensors")
            write_text_atomic(tmp / "state.json", json.dumps(state, indent=1) + "\n")  # last: marks it complete

        save_dir_atomic(run_dir / CKPT, write)

    def _load_checkpoint(self, run_dir: Path, names, master, ledger: Ledger) -> int:
        """Load master weights and ledger state if run_dir holds a checkpoint; return the iteration."""
        path = latest_dir(run_dir / CKPT, "state.json")
        if path is None:
            return 0
        state = json.loads((path / "state.json").read_text())
        check_resumable(path, asdict(self.config), {**VARIANT_DEFAULTS, **state["config"]}, LOOSE, "ES")
        weights = load_file(str(path / "master.safetensors"))
        if set(weights) != set(names):
            raise ValueError(f"{path} holds weights for a different model; use a fresh run_dir")
        for n, m in zip(names, master):
            m.copy_(weights[n])
        ledger.load_state_dict(state["ledger"])
        print(f"es: resumed from {path} at iteration {state['iteration']}", flush=True)
        return state["iteration"]
