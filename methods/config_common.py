"""What the light config modules (methods/<method>_config.py) share, importable without torch.

A method's hyperparameters live in a dataclass of its own light module beside it, as TRL puts
`<algo>_config.py` beside each trainer: methods/es/loop.py's ESConfig in methods/es/config.py, GRPO's in
methods/grpo_config.py, and so on. Such a module imports the standard library, harness.core and other
light modules only (never torch, transformers or TRL: tests/test_light_configs.py), so the config check
(harness/runner/schema.py) builds the config itself, with the constructor's own checks and messages,
before torch loads. Its `METHOD_CONFIGS` maps each method class of the method module to its config
dataclass ({"ES": ESConfig}); the convention module `a.b` -> light module `a.b_config` is how the
harness finds it from a `_target_` (harness/core/method_facts.py light_config).
"""
from __future__ import annotations


from harness.core.engine_kinds import plain_engine  # noqa: F401 - the one definition, torch-free
