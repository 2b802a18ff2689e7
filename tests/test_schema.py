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
    # nested keys, checked against the signatures of what they configure (issue 20)
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
    """The case of issue 20: `eval: {n_prompt: 20}` in a file used to start every run, each failing."""
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "typo.yaml").write_text(
        "# @package _global_\ngroup: typo\neval: {n_prompt: 20}\ncells:\n  - {label: base, overrides: [method=base]}\n")
    c = compose("experiment=typo", f"hydra.searchpath=[file://{tmp_path}]")
    assert c.eval.n_prompt == 20   # Hydra merged it without a word
    with pytest.raises(ConfigError, match="unknown key 'n_prompt' in eval .*did you mean 'n_prompts'"):
        validate(c)


def test_signatures_read_from_source_match_the_real_ones():
    """harness/runner/signatures.py parses source to stay import-free; it must agree with inspect on every target."""
    import inspect

    from hydra.utils import get_method
    from omegaconf import OmegaConf

    from harness.runner.schema import EVAL_TARGET
    from harness.runner.signatures import accepted_keys
    targets = {EVAL_TARGET} | {OmegaConf.load(p).get("_target_") for group in ("method", "task")
                               for p in (CONF_DIR / group).glob("*.yaml")}
    for t in sorted(targets):
        assert accepted_keys(t) == set(inspect.signature(get_method(t)).parameters), t


def test_param_names_match_es_core():
    from harness.runner.schema import PARAM_NAMES
    from methods.es_core import PARAM_SETS
    assert set(PARAM_NAMES) == {"all", "last_layer", *PARAM_SETS}


@pytest.mark.parametrize("override, message", [
    ("eval.tasks=[gpqa,hotpotq]", "eval.tasks names unknown task 'hotpotq'; did you mean 'hotpotqa'"),
    ("+analysis.entropy_task=gpq", "analysis.entropy_task names unknown task 'gpq'; did you mean 'gpqa'"),
    ("+eval.task_overrides.nosuch.source=hub", "eval.task_overrides names unknown task 'nosuch'; choose from"),
])
def test_held_out_task_names_are_checked_at_load(compose, override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate(compose(override))
