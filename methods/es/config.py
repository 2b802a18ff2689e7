"""ES's hyperparameters (ESConfig) with every check its constructor runs, and the constants those checks
need, importable without torch: methods/es/loop.py re-exports ESConfig, methods/es/core.py and
methods/es/numerics.py these constants (methods/config_common.py says why; tests/test_light_configs.py
checks that no heavy module loads).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from harness.core import gpu_memory as gm
from harness.core.engine_kinds import capabilities
from harness.core.errors import UserError
from harness.core.memory_parts import GB, gpus_needed, kv_cache_bytes, lora_param_count
from harness.core.method_facts import ES as ES_FAMILY, MethodFacts
from methods.config_common import plain_engine

PAPER_POPULATION = 30  # the paper's N: ESConfig's default and the reference of a population sweep (ES.facts)

# the variant settings' defaults: what a checkpoint written before they existed was trained with
VARIANT_DEFAULTS = {"params": "all", "noise_rank": None, "antithetic": False, "normalize": "zscore",
                    "peft": None, "lora": {"r": 8, "alpha": 16, "target_modules": "all-linear"},
                    "numerics": "exact", "noise_seeding": "iid", "fitness": "real"}
NORMALIZE = ("zscore", "none", "centered_ranks")
# method.fitness: real (ES) | placebo (the functional null: the same walk with the reward-direction link cut)
FITNESS = ("real", "placebo")
# how a member's seed becomes each tensor's torch seed (method.noise_seeding):
#   iid                esbench: splitmix64 of (member seed, tensor index), an independent stream per tensor
#   per_tensor_offset  the reference code's later version (--seed_shift): member seed + tensor index
#   per_tensor_same    the reference code's first version: the member seed for every tensor, so every two
#                      tensors of one shape get identical noise
SEEDINGS = ("iid", "per_tensor_offset", "per_tensor_same")
PARAM_SETS = {  # method.params names -> name regex ("last_layer" is computed from the names)
    "norms": r"(norm|(^|\.)ln_)",
    "norms+attention": r"(norm|(^|\.)ln_|self_attn\.|attention\.|attn\.)",
}


# method.params besides a regex: PARAM_SETS' names, "all" and "last_layer" (methods/es/core.py select_params)
PARAM_NAMES = ("all", *PARAM_SETS, "last_layer")
# method.numerics (methods/es/numerics.py): exact (the fp32 master) | inplace (the reference code's arithmetic)
NUMERICS = ("exact", "inplace")


class VariantError(UserError, ValueError):
    """An ES variant setting that does not fit the model (one line: the problem and the fix)."""


def wants_population(engine=None, workers: int = 1, use_ray: bool | None = None) -> bool:
    """True when ES's members are not scored on the driver's own model (a vLLM engine, or Ray workers):
    the driver's weights are then stale until the end of training."""
    return not capabilities(engine).in_place or workers > 1 or bool(use_ray)


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
    # scale-out (methods/es/workers.py): where members are scored; the result does not depend on it
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
        self._check_params()

    def _check_params(self) -> None:
        """method.params: a named set or a parameter-name regex; a bad regex fails now, not after the model loads
        (which tensors it matches is known only then: methods/es/core.py select_params)."""
        if not isinstance(self.params, str) or self.params in PARAM_NAMES:
            return
        try:
            re.compile(self.params)
        except re.error as e:
            raise VariantError(f"method.params={self.params!r} is not {', '.join(PARAM_NAMES)} or a valid regex "
                               f"({e}); write e.g. method.params='mlp\\.' or quote it") from None

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
            if not capabilities(self.engine).in_place:
                raise VariantError(f"method.numerics=inplace is not supported on engine={self.engine_name}; "
                                   "use engine=hf")
            if self.noise_rank is not None:
                raise VariantError("method.numerics=inplace draws full-rank noise in the weights' dtype, as the "
                                   "reference does; drop method.noise_rank or use numerics=exact")
            if self.peft:
                raise VariantError("method.numerics=inplace perturbs the model's own weights (peft keeps adapters "
                                   "in fp32, no reference to follow); drop method.peft or use numerics=exact")
        if self.numerics_record and not capabilities(self.engine).in_place:
            raise VariantError(f"method.numerics_record=true is measured on engine=hf only, not "
                               f"engine={self.engine_name}; set method.numerics_record=false or use engine=hf")


# ---- what ES says about itself (ES.facts), priced without torch ----
def adapter_resident(shape, lora: dict, dtype_bytes: int) -> dict[str, int]:
    """ES's resident parts on engine=hf when it perturbs the adapter (rank r on lora["target_modules"]):
    its master and buffers hold adapter tensors, the largest an r x max(hidden, MLP, attention) matrix."""
    d, i, _, q, _ = gm._dims(shape)
    n = lora_param_count(shape, int(lora["r"]), lora["target_modules"])
    return gm.es_hf_resident(gm.ModelCounts(n, int(lora["r"]) * max(d, i, q), 0), dtype_bytes)


def es_memory(c, shape, tokens: int, *, dtype: str, engine: dict, gpu_gb: float, headroom: float,
              **_) -> tuple[dict[str, float], int, str | None]:
    """ES's bytes per part on one GPU (ES.facts.memory; harness/runner/pricing.py's module docstring);
    `c`: ESConfig's settings as the planner reads them (harness/core/method_facts.py configure).

    engine=hf: weights + the fp32 master, its noise buffer and the update's temporaries (largest tensor),
    + KV cache at generation_batch_size sequences, all on one GPU (no sharding). engine=vllm: per GPU, what
    the code requests (harness/core/gpu_memory.py es_vllm_plan); GPUs = engine.workers / engine.engines_per_gpu.
    """
    b, counts = gm.dtype_bytes(dtype), gm.model_counts(shape)
    if capabilities(engine).own_memory_share:
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


# ES.facts (methods/es/loop.py), read here by the planner and the budget check (harness/core/method_facts.py)
ES_FACTS = MethodFacts(
    family=ES_FAMILY,
    update_unit="one ES iteration (its update is skipped, and logged, when every member ties)",
    step_cap="max_iterations",
    reference_label=r"(?s)ES|(?i:es full).*",  # "ES" or "ES full ...": the full-ES cell when none is named
    reference_points={"population": PAPER_POPULATION},
    summary_keys=(("skipped_updates", "sigma", "alpha", "fitness", "last_reward_mean", "workers", "engine",
                   "master_checksum", "numerics"),
                  ("peft", "adapter_params")),  # ES on LoRA adapters
    samples_per_step=lambda c: c.population * c.prompts_per_iteration,
    scoring_forwards=lambda c: 0,
    memory=es_memory,
    # False when members are scored on engine workers: the driver's model is stale until the end
    trains_in_driver=lambda c: not wants_population(c.engine, c.workers, c.use_ray))


# methods/es/loop.py's method classes -> their config and facts (methods/config_common.py)
METHOD_CONFIGS = {"ES": ESConfig}
METHOD_FACTS = {"ES": ES_FACTS}
