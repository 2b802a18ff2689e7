"""The `analysis:` block of conf/config.yaml: what a run keeps for analysis and how deep the analysis goes.

    analysis.store_update                   auto | true | false: store theta_final - theta_0 (auto: zoo models)
    analysis.entropy_every_flops_fraction   token entropy of the policy's samples every this share of the
                                            budget (null: off); recorded in record.entropy, never charged
    analysis.entropy_prompts / entropy_samples  the fixed held-out prompt set (first N validation prompts)
                                            and samples per prompt
    analysis.sparsity_prompts               test prompts per sparsity re-evaluation (0: skip that part)
    analysis.sparsity_samples               sampled completions per prompt for pass@1 (0: greedy only)
    analysis.sparsity_multiples             the threshold ladder, in units of one step (plus 0 and inf)
    analysis.top_k / top_fraction           localisation: the top-k and top-fraction largest |delta|
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

from harness.core.errors import ConfigError, check_keys


@dataclass
class AnalysisConfig:
    store_update: str | bool = "auto"
    entropy_every_flops_fraction: float | None = 0.1
    entropy_prompts: int = 32
    entropy_samples: int = 2
    entropy_task: str | None = None
    sparsity_prompts: int = 100
    sparsity_samples: int = 4
    sparsity_multiples: list[float] = field(default_factory=lambda: [1, 2, 4, 8, 16, 64])
    top_k: int = 100
    top_fraction: float = 0.001

    def __post_init__(self):
        if self.store_update not in ("auto", True, False):
            raise ConfigError(f"analysis.store_update={self.store_update!r}; use auto, true or false")
        f = self.entropy_every_flops_fraction
        if f is not None and not (isinstance(f, (int, float)) and 0 < f <= 1):
            raise ConfigError(f"analysis.entropy_every_flops_fraction={f!r} must be in (0, 1] (e.g. 0.1) or null (off)")
        for k in ("entropy_prompts", "entropy_samples", "sparsity_prompts", "sparsity_samples", "top_k"):
            v = getattr(self, k)
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
                raise ConfigError(f"analysis.{k}={v!r} must be an int >= 0")
        if self.entropy_task is not None and not (isinstance(self.entropy_task, str) and self.entropy_task):
            raise ConfigError(f"analysis.entropy_task={self.entropy_task!r} must be a conf/task name (e.g. gpqa) "
                              "or null (the training task)")
        if not 0 < self.top_fraction <= 1:
            raise ConfigError(f"analysis.top_fraction={self.top_fraction!r} must be in (0, 1], e.g. 0.001")
        if not all(isinstance(m, (int, float)) and m > 0 for m in self.sparsity_multiples):
            raise ConfigError(f"analysis.sparsity_multiples={self.sparsity_multiples!r} must be positive numbers, "
                              "e.g. [1, 2, 4, 8]")


# The keys of the `analysis:` block; harness/runner/schema.py checks a composed config against these.
ANALYSIS_KEYS = frozenset(f.name for f in fields(AnalysisConfig))


def analysis_config(node) -> AnalysisConfig:
    """AnalysisConfig from a config's `analysis:` mapping (a dict, a DictConfig or None: the defaults)."""
    from omegaconf import DictConfig, OmegaConf

    d = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node or {})
    check_keys(d, ANALYSIS_KEYS, "analysis")
    return AnalysisConfig(**d)
