"""The GRPO family as config (conf/method/dr_grpo.yaml, dapo.yaml, gspo.yaml): GRPO's trainer with GRPOConfig's own
options set as each paper defines them, each a method of its own name, each training on the zoo.

    python -m pytest tests/test_grpo_family.py -q
"""
import json
import math

import pytest

from harness.core.budget import Ledger
from harness.core.steplog import make_ledger
from methods.grpo import GRPO, TRLOptionError, family_options

# what each paper sets, as GRPOConfig receives it (methods/grpo.py _trl_args)
PAPERS = {
    "grpo": dict(beta=1e-3, loss_type="grpo", scale_rewards="group", epsilon=0.2, epsilon_high=0.2,
                 importance_sampling_level="token", mask_truncated_completions=False),
    "dr_grpo": dict(beta=0.0, loss_type="dr_grpo", scale_rewards="none", epsilon=0.2, epsilon_high=0.2,
                    importance_sampling_level="token", mask_truncated_completions=False),
    "dapo": dict(beta=0.0, loss_type="dapo", scale_rewards="group", epsilon=0.2, epsilon_high=0.28,
                 importance_sampling_level="token", mask_truncated_completions=True),
    "gspo": dict(beta=0.0, loss_type="grpo", scale_rewards="group", epsilon=3e-4, epsilon_high=4e-4,
                 importance_sampling_level="sequence", mask_truncated_completions=False),
}
SMALL = dict(prompts_per_step=2, num_generations=4, max_completion_length=8, learning_rate=1e-3, checkpoint_every=0)


def method_from_yaml(compose, name, **overrides):
    from hydra.utils import instantiate

    from harness.runner.schema import validate
    cfg = compose(f"method={name}", *(f"method.{k}={v}" for k, v in overrides.items()))
    validate(cfg)  # what `python -m harness method=<name>` checks before anything loads
    return instantiate(cfg.method, _convert_="all")


@pytest.mark.parametrize("name", sorted(PAPERS))
def test_each_yaml_hands_trl_its_papers_options(name, compose, tiny_policy, tmp_path):
    method = method_from_yaml(compose, name)
    assert method.name == name and isinstance(method, GRPO)
    args = method._trl_args(tiny_policy(), Ledger(limit=1e18), tmp_path, 8, 16)
    got = {k: getattr(args, k) for k in PAPERS[name]}
    got["epsilon_high"] = args.epsilon_high if args.epsilon_high is not None else args.epsilon  # TRL's reading
    assert got == PAPERS[name]


@pytest.mark.parametrize("name", ["dr_grpo", "dapo", "gspo"])
def test_each_trains_on_the_zoo(name, compose, tiny_policy, toy_task, tmp_path):
    """Two optimizer steps of the shipped YAML's settings on the zoo (small batch): the ledger charges both,
    the loss is finite and the weights move."""
    import torch
    method = method_from_yaml(compose, name, **SMALL, max_steps=2)
    policy = tiny_policy(eval_mode=False)
    before = [p.detach().clone() for p in policy.model.parameters()]
    ledger = Ledger(limit=1e18)
    ledger.listeners = make_ledger(ledger.kind, ledger.limit, tmp_path, progress=False).listeners
    summary = method.train(policy, toy_task("digits", n_train=32), ledger, tmp_path)
    rows = [json.loads(line)["extras"] for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert summary["steps"] == ledger.steps == 2 and ledger.samples == 16
    assert all(math.isfinite(r["loss"]) for r in rows) and all(r["flops_step"]["reference"] == 0 for r in rows)
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.model.parameters()))


def test_an_option_the_installed_trl_lacks_is_refused_in_one_line():
    from methods.grpo import DAPOMethodConfig, GRPOMethodConfig
    older = {"epsilon_high", "scale_rewards", "mask_truncated_completions"}  # a TRL before GSPO's option
    assert "importance_sampling_level" not in family_options(GRPOMethodConfig(), older, "0.19.0")  # default: left out
    with pytest.raises(TRLOptionError, match=r"method.importance_sampling_level='sequence' needs GRPOConfig."
                                             r"importance_sampling_level, which TRL 0.19.0 lacks") as err:
        family_options(GRPOMethodConfig(importance_sampling_level="sequence"), older, "0.19.0")
    assert "\n" not in str(err.value)
    assert family_options(DAPOMethodConfig())["epsilon_high"] == 0.28  # the installed TRL has them all


@pytest.mark.parametrize("bad, message", [
    (dict(importance_sampling_level="sentence"), "use one of token, sequence"),
    (dict(scale_rewards="std"), "use one of group, batch, none"),
    (dict(epsilon_high=0.0), "must be > 0"),
])
def test_bad_family_options_name_the_fix(bad, message):
    from methods.grpo import GRPOMethodConfig
    with pytest.raises(ValueError, match=message):
        GRPOMethodConfig(**bad)
