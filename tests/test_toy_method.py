"""Adding a method touches one module and one YAML: a toy method (random search over one scalar, the
scale of the final norm) lives in a temporary package outside the repo and runs through an
experiment end to end, with no edit to the harness.

    python -m pytest tests/test_toy_method.py -q -m slow
"""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

METHOD = '''
import math
import random
import statistics

from harness.core.flops import generation_flops
from harness.core.policy import generate


class RandomScalar:
    """Random search over one scalar: the scale of the final norm's weight; keep a proposal if the
    mean greedy reward on a fixed train batch does not fall."""

    name = "random_scalar"
    label_keys = ("step_size",)
    label_flags = {}
    trains = True

    def __init__(self, step_size: float = 0.1, prompts: int = 8, seed: int = 0):
        self.step_size, self.prompts, self.seed = step_size, prompts, seed

    def _score(self, policy, task, batch):
        gen = generate(policy, batch["prompt"], max_new_tokens=task.max_new_tokens)
        cols = {k: batch[k] for k in batch.column_names if k != "prompt"}
        rewards = task.reward([t[0] for t in gen.texts], **cols)
        flops = generation_flops(policy.model.config, gen.prompt_tokens, [c[0] for c in gen.completion_tokens])
        return statistics.fmean(rewards), flops

    def train(self, policy, task, ledger, run_dir):
        rng = random.Random(self.seed)
        batch = task.load("train").select(range(self.prompts))
        weight = policy.model.model.norm.weight
        best, flops = self._score(policy, task, batch)
        ledger.start_clock()
        ledger.step(flops, self.prompts, reward_mean=best, accepted=True)
        while not ledger.exhausted:
            old = weight.data.clone()
            weight.data.mul_(math.exp(self.step_size * rng.gauss(0, 1)))
            reward, flops = self._score(policy, task, batch)
            accepted = reward >= best
            if accepted:
                best = reward
            else:
                weight.data.copy_(old)
            ledger.step(flops, self.prompts, reward_mean=reward, accepted=accepted)
        ledger.close()
        return {"steps": ledger.steps, "best_reward": best}
'''

EXPERIMENT = '''
# @package _global_
# Runs: 3
defaults:
  - override /model: zoo-100k
group: toy
eval: {n_prompts: 20, n_samples: 4, pass_ks: [1, 4], maj_ks: [4], every_flops_fraction: 0.5, curve_prompts: 10}
budget: {flops: 2.0e9}
cells:
  - {label: base, overrides: [method=base], seeded: false}
  - {label: random scalar, overrides: [method=random_scalar], axes: {method.step_size: [0.05, 0.2]}}
eval_splits: [test]
'''


@pytest.mark.slow
def test_a_method_from_outside_the_repo_runs_through_an_experiment(tmp_path):
    pkg = tmp_path / "plugins" / "toy_methods"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "random_scalar.py").write_text(METHOD)
    conf = tmp_path / "plugins" / "conf"
    (conf / "method").mkdir(parents=True)
    (conf / "experiment").mkdir()
    (conf / "method" / "random_scalar.yaml").write_text(
        "_target_: toy_methods.random_scalar.RandomScalar\nstep_size: 0.1\nprompts: 8\nseed: ${seed}\n")
    (conf / "experiment" / "toy.yaml").write_text(textwrap.dedent(EXPERIMENT))
    env = {**os.environ, "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "plugins"), str(ROOT)])}
    r = subprocess.run([sys.executable, "-m", "harness", "--config-dir", str(conf), "experiment=toy",
                        "stamp=t"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    records = [json.loads(p.read_text()) for p in (tmp_path / "runs" / "toy" / "t").rglob("record.json")]
    toy = [rec for rec in records if rec["method"] == "random_scalar"]
    assert len(records) == 3 and all(rec["status"] == "ok" for rec in records)
    assert all(rec["budget"]["flops_used"] >= 2.0e9 and rec["steps"] and rec["curve"] for rec in toy)
    assert {rec["label"] for rec in toy} == {"random scalar step_size=0.05", "random scalar step_size=0.2"}
    table = (tmp_path / "outputs" / "toy" / "table.md").read_text()
    assert "| zoo-100k | random scalar step_size=0.2 | 1/1 |" in table
    assert (tmp_path / "outputs" / "toy" / "curves.png").stat().st_size > 1000
