"""Experiment files and command lines are validated at load: an unknown key or a wrong type is one
line naming the key and the nearest valid one, never a silent drop or a library traceback.

    python -m pytest tests/test_schema.py -q
"""
import re

import pytest

from harness.runner.experiment import list_runs
from harness.core.paths import CONF_DIR
from harness.runner.schema import ConfigError, validate


@pytest.mark.parametrize("name", sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml")))
def test_every_shipped_experiment_is_valid(compose, name):
    c = compose(f"experiment={name}")
    validate(c)
    assert list_runs(c)


@pytest.mark.parametrize("overrides, message", [
    (["experiment=smoke", "+cels=[{label: x}]"], "unknown key 'cels'.*did you mean 'cells'"),
    (["experiment=smoke", "+cells.0.overides=['method=es']"], "unknown key 'overides' in cells\\[0\\].*'overrides'"),
    (["experiment=smoke", "seed=[0,1,2]"], "seed=.*must be an int; did you mean seeds:"),
    (["budget.flops=abc"], "budget.flops='abc' is not a positive number"),
    (["budget.flops=[1,2]"], "budget.flops=.* is not a positive number"),
    (["budget.kind=tokens"], "budget.kind='tokens' is unknown"),
    (["threads=[1]"], "threads=.* must be an int"),
    (["experiment=smoke", "+seeds=[a]"], "seeds=.* list of ints"),
    (["experiment=smoke", "+grids.0.axes.method.beta=0.1"], "axes"),
    (["eval_splits=[tset]"], "eval_splits has 'tset'"),
    # nested keys, checked against the signatures of what they configure
    (["experiment=smoke", "+eval.n_prompt=20"], "unknown key 'n_prompt' in eval .*did you mean 'n_prompts'"),
    (["method=grpo", "+method.nosuch=1"], "unknown key 'nosuch' in method \\(methods.grpo.GRPO\\)"),
    (["+task.n_evl=5"], "unknown key 'n_evl' in task \\(tasks.countdown.Countdown\\).*'n_eval'"),
    (["method=es", "method.params='([bad'"], "method.params='\\(\\[bad' is not all, .* or a valid regex"),
    (["model=generic"], "model.name_or_path is empty"),
])
def test_bad_keys_and_values_fail_with_the_fix(compose, overrides, message):
    """Each override composes (it is what a user can type) and validate() names the fix. An override
    Hydra refuses never reaches validate(), so it checks nothing here: write it as Hydra parses it."""
    try:
        c = compose(*overrides)
    except Exception as e:  # noqa: BLE001 - any Hydra refusal, shown with the override that caused it
        pytest.fail(f"Hydra rejects {overrides} before validate() sees it, so this case tests nothing: "
                    f"{type(e).__name__}: {e}")
    with pytest.raises(ConfigError, match=message):
        validate(c)


def test_run_counts_quoted_in_files_and_readme_match_the_plan(compose):
    """A hand-written count that falls behind the plan leaves runs MISSING in a cluster fan-out."""
    import re
    readme = (CONF_DIR.parent / "README.md").read_text()
    for path in sorted((CONF_DIR / "experiment").glob("*.yaml")):
        n = len(list_runs(compose(f"experiment={path.stem}")))
        quoted = re.search(r"Runs: (\d+)", path.read_text())
        assert quoted and int(quoted.group(1)) == n, f"{path.name} says {quoted and quoted.group(1)} runs, plan has {n}"
        row = re.search(rf"^\| `{path.stem}` \|.*?\| (\d+) \|", readme, re.M)
        assert row and int(row.group(1)) == n, f"README's table says {row and row.group(1)} runs for {path.stem}, plan has {n}"


def test_a_nested_typo_in_an_experiment_file_fails_at_load(compose, tmp_path):
    """The case this check exists for: `eval: {n_prompt: 20}` in a file used to start every run, each failing."""
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "typo.yaml").write_text(
        "# @package _global_\ngroup: typo\neval: {n_prompt: 20}\ncells:\n  - {label: base, overrides: [method=base]}\n")
    c = compose("experiment=typo", f"hydra.searchpath=[file://{tmp_path}]")
    assert c.eval.n_prompt == 20   # Hydra merged it without a word
    with pytest.raises(ConfigError, match="unknown key 'n_prompt' in eval .*did you mean 'n_prompts'"):
        validate(c)


def test_accepted_keys_match_the_real_signatures():
    """The keys the checks accept, read without torch (a method's light config class, else the target's source:
    harness/runner/signatures.py), agree with inspect on every target."""
    import inspect

    from hydra.utils import get_method
    from omegaconf import OmegaConf

    from harness.runner.schema import EVAL_TARGET, accepted_keys
    targets = {EVAL_TARGET} | {OmegaConf.load(p).get("_target_") for group in ("method", "task")
                               for p in (CONF_DIR / group).glob("*.yaml")}
    for t in sorted(targets):
        assert accepted_keys(t) == set(inspect.signature(get_method(t)).parameters), t


@pytest.mark.parametrize("override, message", [
    ("eval.tasks=[gpqa,hotpotq]", "eval.tasks names unknown task 'hotpotq'; did you mean 'hotpotqa'"),
    ("+analysis.entropy_task=gpq", "analysis.entropy_task names unknown task 'gpq'; did you mean 'gpqa'"),
    ("+eval.task_overrides.nosuch.source=hub", "eval.task_overrides names unknown task 'nosuch'; choose from"),
])
def test_held_out_task_names_are_checked_at_load(compose, override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate(compose(override))


# Method values are checked at load, torch-free, by building the method's light config (methods/*_config.py):
# the constructors' own checks and messages.
VALUE_CASES = [
    (["method=es", "method.sigma=0"], "method.sigma=0 and method.alpha=0.005 must both be > 0"),
    (["method=es", "method.alpha=0"], "method.sigma=0.01 and method.alpha=0 must both be > 0"),
    (["method=es", "method.population=1"], "method.population=1: z-scores need at least 2 members; set >= 2"),
    (["method=es", "method.alpha_per_sigma=-1"], "method.alpha_per_sigma=-1 must be > 0"),
    (["method=es", "method.prompts_per_iteration=0"], "method.prompts_per_iteration=0 must be >= 1"),
    (["method=es", "method.antithetic=true", "method.population=5"], "method.antithetic=true needs an even population"),
    (["method=grpo", "method.num_generations=1"], "method.num_generations=1: GRPO needs a group of at least 2"),
    (["method=grpo", "method.learning_rate=-1e-5"], "method.learning_rate=-1e-05 must be > 0 (paper grid"),
    (["method=grpo", "method.beta=-1"], "method.beta=-1 must be >= 0"),
    (["method=grpo", "method.prompts_per_step=0"], "method.prompts_per_step=0 must be >= 1"),
    (["method=ppo", "method.learning_rate=0"], "need method.kl_coef >= 0, learning_rate > 0 and temperature > 0"),
    (["method=ppo", "method.num_ppo_epochs=0"], "method.num_ppo_epochs=0 must be >= 1"),
    # checks that used to wait for the constructor (schema.py had no copy of them)
    (["method=es", "method.params='([bad'"], "method.params='([bad' is not all, norms, norms+attention, last_layer "
                                              "or a valid regex"),
    (["method=es", "method.normalize=ranks"], "method.normalize='ranks' is unknown; use one of zscore"),
    (["method=es", "method.numerics=inplace", "engine=vllm"], "method.numerics=inplace is not supported on engine=vllm"),
    (["method=grpo", "method.gradient_accumulation_steps=3"], "method.gradient_accumulation_steps=3 must divide"),
    (["method=grpo", "method.peft=lora", "method.lora.r=0"], "method.lora.r=0 must be >= 1"),
    (["method=ppo", "method.num_mini_batches=3"], "method.prompts_per_step=64 is not a multiple of"),
    (["method=sequential", "method.split=1.5"], "method.split=1.5 must be in (0, 1)"),
]


@pytest.mark.parametrize("overrides, message", VALUE_CASES)
def test_method_values_fail_at_load_as_the_constructor_says(compose, overrides, message):
    """The same line the constructor gives after torch loads, now before: both build the same config class."""
    from hydra.utils import instantiate

    c = compose("model=zoo-100k", *overrides)
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate(c)
    with pytest.raises(Exception, match=re.escape(message)):
        instantiate(c.method)


@pytest.mark.parametrize("overrides, message", [
    (["method=es", "method.population=0"], "method.population=0: z-scores need at least 2 members; set >= 2"),
    (["method=es", "method.population=2.5"], "method.population=2.5 must be a whole number"),
    (["method=es", "method.sigma=abc"], "method.sigma='abc' must be a finite number"),
    (["method=es", "method.sigma=.nan"], "method.sigma='.nan' must be a finite number"),
    (["method=es", "method.sigma=nan"], "method.sigma=nan must be a finite number"),
    (["method=es", "method.antithetic=3"], "method.antithetic=3 must be true or false"),
    (["method=grpo", "method.max_completion_length=abc"], "method.max_completion_length='abc' must be a whole number"),
    (["task.n_eval=1.5"], "task.n_eval=1.5 must be a whole number"),
    (["eval.temperature=hot"], "eval.temperature='hot' must be a finite number"),
])
def test_wrong_types_name_the_key(compose, overrides, message):
    """Before: population=2.5 crashed inside ES after training started; sigma=abc was
    `'>' not supported between instances of 'str' and 'int'`, naming no key; population=0 said >= 1."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate(compose("model=zoo-100k", *overrides))


def _experiment(tmp_path, name: str, body: str):
    (tmp_path / "experiment").mkdir(exist_ok=True)
    (tmp_path / "experiment" / f"{name}.yaml").write_text(f"# @package _global_\ngroup: {name}\n{body}")
    return f"hydra.searchpath=[file://{tmp_path}]"


@pytest.mark.parametrize("body, message", [
    ("cells:\n  - {label: base, overrides: [method=base]}\n  - {label: base, overrides: [method=es]}\n",
     "cells[1] is named 'base' like cells[0]; give every cell and grid its own label"),
    ("cells:\n  - {label: GRPO, overrides: [method=base]}\ngrids:\n  - {name: GRPO, overrides: [method=grpo], "
     "axes: {method.beta: [0.1]}}\n", "grids[0] is named 'GRPO' like cells[0]"),
    ("cells:\n  - {label: ES a, overrides: [method=base]}\n  - {label: ES_a, overrides: [method=es]}\n",
     "cells[1] is named 'ES_a' like cells[0]"),  # one run folder: the labels' slugs collide
    ("cells:\n  - {label: ES, overrides: [method=es], axes: {method.sigma: [1.0e-3, 0.001]}}\n",
     "cells[0]: the run 'ES sigma=0.001' comes twice"),
])
def test_duplicate_labels_are_refused_at_load(compose, tmp_path, body, message):
    """Before: they passed +dry_run, the second run failed with "pass a new stamp" and the table said 2/2."""
    c = compose("experiment=dup", _experiment(tmp_path, "dup", body))
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate(c)


def test_an_unknown_model_in_the_models_axis_is_one_line(compose, tmp_path):
    """Before: Hydra's 27-line listing after 32 s, from the first run's composition."""
    c = compose("experiment=m", _experiment(tmp_path, "m", "models: [zoo-100k, zoo-1mm]\n"
                                            "cells:\n  - {label: base, overrides: [method=base]}\n"))
    with pytest.raises(ConfigError, match=r"models\[1\]='zoo-1mm' is not a conf/model option; did you mean "
                                          r"'zoo-1m'\?; choose from: .*zoo-100k.*zoo-4m") as e:
        validate(c)
    assert "\n" not in str(e.value)


def test_a_role_outside_the_vocabulary_is_refused_at_load(compose, tmp_path):
    body = "cells:\n  - {label: base, role: base, overrides: [method=base]}\n  - {label: ES, role: ES, overrides: [method=es]}\n"
    c = compose("experiment=roles", _experiment(tmp_path, "roles", body))
    with pytest.raises(ConfigError, match=re.escape("cells[1].role='ES' is not a role; use one of base, es,")):
        validate(c)
