"""Each method's config dataclass lives in a light module beside it (methods/<method>_config.py, as TRL puts
`<algo>_config.py` beside its trainer): importable without torch, transformers or TRL, so the config check
(harness/runner/schema.py) reads keys, types and value checks from the class itself before torch loads, and
the planner (`+plan=true`) reads the method's facts and memory model from there too.

    python -m pytest tests/test_light_configs.py -q
"""
import dataclasses
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from harness.core.method_facts import facts_of, light_config, light_facts, method_class, targets_by_name
from harness.core.paths import ROOT

# the shipped methods with a light module; a method added by the README's recipe (one module, one YAML) may have
# none: its config is then read from its source, and a light module, when it adds one, is held to the same checks
SHIPPED_LIGHT = {"base", "es", "grpo", "ppo", "sequential"}
LIGHT = ["methods.config_common", "methods.lora_config", "methods.base_config", "methods.es.config",
         "methods.grpo_config", "methods.ppo_config", "methods.sequential_config"]
HEAVY = ("torch", "transformers", "trl")


@pytest.mark.parametrize("module", [*LIGHT, "harness.runner.schema", "harness.runner.argv_check"])
def test_importing_it_loads_no_heavy_module(module):
    """A fresh interpreter: import it (and find every method's config through it), then nothing heavy is loaded."""
    code = (f"import sys, importlib; importlib.import_module({module!r}); "
            "from harness.core.method_facts import light_config; "
            "from harness.core.method_facts import facts_of; "
            "[(light_config(t), facts_of(t)) for t in ('methods.es.ES', 'methods.grpo.GRPO', 'methods.ppo.PPO', "
            "'methods.sequential.Sequential', 'methods.base.Base')]; "
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "[]", f"importing {module} loaded {r.stdout.strip()}"


def test_the_validation_of_a_method_config_loads_no_heavy_module():
    """The whole check of a composed `method=es` (keys, types, the built ESConfig) runs without torch."""
    code = ("import sys\n"
            "from hydra import compose, initialize_config_dir\n"
            "from harness.core.paths import CONF_DIR\n"
            "from harness.runner.schema import validate, ConfigError\n"
            "for m in ('es', 'grpo', 'ppo', 'sequential'):\n"
            "    with initialize_config_dir(config_dir=str(CONF_DIR), version_base='1.3'):\n"
            "        validate(compose(config_name='config', overrides=[f'method={m}']))\n"
            "with initialize_config_dir(config_dir=str(CONF_DIR), version_base='1.3'):\n"
            "    c = compose(config_name='config', overrides=['method=es', 'method.sigma=-1'])\n"
            "try:\n"
            "    validate(c)\n"
            "except ConfigError as e:\n"
            "    print(e)\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines() == ["method.sigma=-1 and method.alpha=0.005 must both be > 0 (paper: sigma=1e-3, "
                                     "alpha=5e-4)", "[]"], r.stdout


def has_light_module(target: str) -> bool:
    """Whether the method's module has a light module beside it (module `a.b` -> `a.b_config`, or `a.b.config`)."""
    import importlib.util

    module = target.rpartition(".")[0]
    if importlib.util.find_spec(f"{module}_config") is not None:
        return True
    spec = importlib.util.find_spec(module)
    return bool(spec and spec.submodule_search_locations and importlib.util.find_spec(f"{module}.config"))


def test_every_shipped_method_finds_its_class_config_through_the_convention():
    """methods.<m>.<Class> -> methods.<m>_config.METHOD_CONFIGS[Class] is the class's own config_class."""
    found = {}
    for name, target in targets_by_name().items():
        if name not in SHIPPED_LIGHT and not has_light_module(target):
            continue  # the two-file recipe: no light module, nothing to agree with
        cls = method_class(target)
        config = light_config(target)
        assert config is cls.config_class, (name, config, cls.config_class)  # Base: None in both
        found[name] = config
    assert {n for n, c in found.items() if c is not None} >= {"es", "grpo", "ppo", "sequential"}


def test_every_shipped_method_declares_the_facts_of_its_light_module():
    """The planner reads facts_of without importing the method: the very object the class declares."""
    for name, target in targets_by_name().items():
        if name not in SHIPPED_LIGHT and not has_light_module(target):
            continue  # the two-file recipe: its facts are its class's, read from source or by importing it
        cls = method_class(target)
        assert light_facts(target) is cls.facts is facts_of(target), name


def test_old_import_paths_still_work():
    from methods.es import ESConfig
    from methods.es.config import ESConfig as Light
    from methods.es.core import VARIANT_DEFAULTS, VariantError, wants_population
    from methods.es.numerics import NUMERICS
    from methods.grpo import LOSS_TYPES, GRPOMethodConfig
    from methods.lora import PEFT_KINDS, LoraSettings, check_peft
    from methods.ppo import PPOMethodConfig
    from methods.sequential import SequentialConfig, stage_samples
    from methods.es.loop import es_memory
    from methods.es.lora import adapter_resident
    from methods.grpo import grpo_memory, micro_batches
    from methods.ppo import ppo_memory
    import methods.es.config as es
    import methods.grpo_config as grpo
    import methods.lora_config as lora
    import methods.ppo_config as ppo
    import methods.sequential_config as seq

    assert ESConfig is Light and GRPOMethodConfig is grpo.GRPOMethodConfig and PPOMethodConfig is ppo.PPOMethodConfig
    assert SequentialConfig is seq.SequentialConfig and LoraSettings is lora.LoraSettings
    assert check_peft is lora.check_peft and PEFT_KINDS is lora.PEFT_KINDS and LOSS_TYPES is grpo.LOSS_TYPES
    assert VARIANT_DEFAULTS is es.VARIANT_DEFAULTS and VariantError is es.VariantError and NUMERICS is es.NUMERICS
    assert wants_population is es.wants_population
    assert es_memory is es.es_memory and adapter_resident is es.adapter_resident and stage_samples is seq.stage_samples
    assert grpo_memory is grpo.grpo_memory and micro_batches is grpo.micro_batches and ppo_memory is ppo.ppo_memory


def test_the_schema_reads_types_from_the_config_class():
    from harness.runner.schema import accepted_keys, field_types
    from methods.es.config import ESConfig

    assert accepted_keys("methods.es.ES") == {f.name for f in dataclasses.fields(ESConfig)}
    types = field_types("methods.es.ES")
    assert types["population"] == ("int", False) and types["alpha_per_sigma"] == ("float", True)
    assert types["numerics_record"] == ("bool", True) and "engine" not in types and "params" not in types


@pytest.mark.parametrize("engine", [None, "vllm", {"name": "vllm", "workers": 2}, OmegaConf.create({"name": "hf"})])
def test_plain_engine_is_the_engines_own(engine):
    from harness.engines import plain_engine as engines_plain
    from methods.config_common import plain_engine

    assert plain_engine(engine) == engines_plain(engine)


def test_es_params_regex_is_checked_by_the_config():
    from methods.es.config import PARAM_NAMES, PARAM_SETS, ESConfig, VariantError

    assert set(PARAM_NAMES) == {"all", "last_layer", *PARAM_SETS}
    for ok in (*PARAM_NAMES, r"mlp\."):
        ESConfig(params=ok)
    with pytest.raises(VariantError, match=r"method.params='\(\[bad' is not all, norms, norms\+attention, last_layer "
                                           r"or a valid regex \(.*\); write e.g."):
        ESConfig(params="([bad")
