"""A method defined outside the repository gets full support from one module and one YAML, from what it
declares (methods/base.py's protocol, harness/core/method_facts.py's MethodFacts), with no line of harness/
edited: it runs through an experiment under a FLOPs budget (random search over one scalar, a plain class
that spells out the protocol), and under an updates budget, priced by `+plan=true` and compared with ES in
findings.md (REINFORCE with a mean baseline, family "rl", a ConfiguredMethod: the comparisons set ES against
it as against GRPO and PPO). Modules on PYTHONPATH, YAMLs in a folder passed with --config-dir.

    python -m pytest tests/test_toy_method.py -q            # its facts, its budget check and its price
    python -m pytest tests/test_toy_method.py -q -m slow    # the two experiments end to end
"""
import csv
import json
import os
import subprocess
import sys
import textwrap

import pytest
from omegaconf import OmegaConf

from harness.core.budget import method_problem
from harness.core.method_facts import RL, declared, facts_of
from harness.core.paths import ROOT

METHOD = '''
import math
import random
import statistics

from harness.core.flops import generation_flops
from harness.core.method_facts import MethodFacts
from harness.core.policy import generate


class RandomScalar:
    """Random search over one scalar: the scale of the final norm's weight; keep a proposal if the
    mean greedy reward on a fixed train batch does not fall."""

    name = "random_scalar"
    label_keys = ("step_size",)
    label_flags = {}
    trains = True
    config_class = None
    facts = MethodFacts(family="random search", update_unit="one proposal, kept or not")
    weights_in_driver = True

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


MODULE = '''
"""REINFORCE with a mean baseline: a method that lives outside the esbench repository."""
from dataclasses import dataclass

import torch

from harness.core.flops import completion_train_flops, generation_flops
from harness.core.memory_parts import gpus_needed, kv_cache_bytes, trainer_states
from harness.core.method_facts import RL, MethodFacts
from harness.core.policy import generate
from methods.base import ConfiguredMethod


@dataclass
class ReinforceConfig:
    prompts_per_step: int = 2
    samples_per_prompt: int = 2
    learning_rate: float = 1e-3
    max_steps: int = 100
    seed: int = 0


def memory(c, shape, tokens, *, gpu_gb, headroom, **_):
    sequences = c.prompts_per_step * c.samples_per_prompt
    mem = {**trainer_states(shape), "kv_cache": kv_cache_bytes(shape, sequences, tokens)}
    return mem, gpus_needed(sum(mem.values()), gpu_gb, headroom), None


class Reinforce(ConfiguredMethod):
    name = "reinforce"
    label_keys = ("learning_rate",)
    config_class = ReinforceConfig
    facts = MethodFacts(family=RL, update_unit="one SGD step", step_cap="max_steps",
                        roles={"reinforce": "REINFORCE with a mean baseline"},
                        samples_per_step=lambda c: c.prompts_per_step * c.samples_per_prompt,
                        scoring_forwards=lambda c: 3, memory=memory)

    def train(self, policy, task, ledger, run_dir):
        c, model, tok = self.config, policy.model, policy.tokenizer
        rows = task.load("train").to_dict()
        opt = torch.optim.SGD(model.parameters(), lr=c.learning_rate)
        ledger.start_clock()
        step = 0
        while step < c.max_steps and not ledger.exhausted:
            idx = [(step * c.prompts_per_step + i) % len(rows["prompt"]) for i in range(c.prompts_per_step)]
            prompts = [rows["prompt"][i] for i in idx]
            gen = generate(policy, prompts, n=c.samples_per_prompt, greedy=False, seed=c.seed + step,
                           max_new_tokens=task.max_new_tokens)
            texts = [t for group in gen.texts for t in group]
            columns = {k: [v[i] for i in idx for _ in range(c.samples_per_prompt)] for k, v in rows.items()}
            rewards = torch.tensor(task.reward(texts, **columns), dtype=torch.float32)
            advantages = rewards - rewards.mean()
            ids = [x for group in gen.completion_ids for x in group]
            model.train()
            opt.zero_grad()
            for prompt, completion, a in zip(columns["prompt"], ids, advantages.tolist()):
                if completion and a:
                    head = tok(policy.format(prompt), add_special_tokens=False)["input_ids"]
                    x = torch.tensor([head + completion], device=model.device)
                    logp = torch.log_softmax(model(x).logits[0, len(head) - 1:-1].float(), -1)
                    target = torch.tensor(completion, device=model.device)[:, None]
                    (-a * logp.gather(1, target).sum() / len(ids)).backward()
            opt.step()
            model.eval()
            prompt_tokens = [n for n in gen.prompt_tokens for _ in range(c.samples_per_prompt)]
            completion_tokens = [n for group in gen.completion_tokens for n in group]
            flops = (generation_flops(model.config, prompt_tokens, completion_tokens)
                     + completion_train_flops(model.config, prompt_tokens, completion_tokens))
            step += 1
            ledger.step(flops, len(texts), float(rewards.mean()), float(rewards.std(unbiased=False)))
        ledger.close()
        return {"steps": step, "resumed_from": 0, "flops": ledger.flops, "samples": ledger.samples,
                "wall_s": ledger.wall_s}
'''

METHOD_YAML = """\
_target_: toy_reinforce.Reinforce
prompts_per_step: 2
samples_per_prompt: 2
learning_rate: 1.0e-3
max_steps: 100
seed: ${seed}
"""

EXPERIMENT_YAML = """\
# @package _global_
defaults:
  - override /task: countdown
  - override /budget: updates
budget: {updates: 2}
group: toy
models: [zoo-100k]
eval: {n_prompts: 8, n_samples: 2, pass_ks: [1, 2], maj_ks: [2], n_boot: 200, maj_subsets: 10}
cells:
  - {label: base, overrides: [method=base], seeded: false}
  - {label: ES, overrides: [method=es, method.population=4, method.prompts_per_iteration=4]}
  - {label: REINFORCE, overrides: [method=reinforce], role: reinforce}
"""


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """The toy's module (on sys.path and PYTHONPATH) and a config folder with its method YAML and experiment."""
    code, conf = tmp_path / "plugin", tmp_path / "conf"
    code.mkdir()
    (code / "toy_reinforce.py").write_text(textwrap.dedent(MODULE))
    (conf / "method").mkdir(parents=True)
    (conf / "experiment").mkdir()
    (conf / "method" / "reinforce.yaml").write_text(METHOD_YAML)
    (conf / "experiment" / "toy.yaml").write_text(EXPERIMENT_YAML)
    monkeypatch.syspath_prepend(str(code))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code), str(ROOT)]), "HF_HUB_OFFLINE": "1"}
    return code, conf, env


def harness(env, *args, timeout=900):
    r = subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    return r.stdout + r.stderr


def test_its_facts_are_read_from_its_source_and_when_imported(plugin):
    light, full = declared("toy_reinforce.Reinforce"), facts_of("toy_reinforce.Reinforce")
    assert light.family == full.family == RL and light.update_unit == full.update_unit == "one SGD step"
    assert light.memory is None and callable(full.memory)      # the light read keeps to the data fields
    toy = OmegaConf.create({"_target_": "toy_reinforce.Reinforce"})
    assert method_problem("updates", toy) is None
    nothing = OmegaConf.create({"_target_": "toy_missing.Nothing"})
    assert method_problem("updates", nothing).startswith("budget.kind=updates: toy_missing.Nothing has no known")


def test_the_plan_prices_it_from_its_own_facts(plugin):
    _, conf, env = plugin
    out = harness(env, "--config-dir", str(conf), "experiment=toy", "+plan=true", timeout=300)
    row = next(line for line in out.splitlines() if " REINFORCE " in line)
    # 2 updates x 4 completions priced, and its own memory model: trainer states and its KV cache
    assert "adamw=" in row and "kv_cache=" in row and float(row.split()[3]) > 0, out
    assert "reinforce   1 runs" in out, out


@pytest.mark.slow
def test_it_runs_under_an_updates_budget_and_is_compared_with_es(plugin, tmp_path):
    _, conf, env = plugin
    harness(env, "--config-dir", str(conf), "experiment=toy", f"runs_dir={tmp_path / 'runs'}",
            f"results_dir={tmp_path / 'out'}", "stamp=t")
    records = {json.loads(p.read_text())["label"]: json.loads(p.read_text())
               for p in (tmp_path / "runs").rglob("record.json")}
    toy = records["REINFORCE"]
    assert toy["status"] == "ok" and toy["budget"]["kind"] == "updates" and toy["budget"]["steps"] == 2
    assert toy["train"]["steps"] == 2 and toy["budget"]["flops_used"] > 0
    assert toy["facts"]["family"] == RL and toy["facts"]["update_unit"] == "one SGD step"  # what it declared
    assert records["ES"]["facts"]["family"] == "es"
    rows = list(csv.DictReader((tmp_path / "out" / "toy" / "comparisons.csv").open()))
    kinds = {(r["kind"], r["comparison"]) for r in rows}
    assert ("ES vs RL", "ES vs REINFORCE") in kinds and ("trained vs base", "REINFORCE vs base") in kinds, kinds
    assert "ES vs REINFORCE" in (tmp_path / "out" / "toy" / "findings.md").read_text()
    # the tables again from the records, with neither the plugin's module nor its config folder: the same rows
    report(tmp_path / "runs" / "toy" / "t", tmp_path / "again")
    again, first = (tmp_path / "again" / "comparisons.csv"), (tmp_path / "out" / "toy" / "comparisons.csv")
    assert again.read_text() == first.read_text()


def test_its_dry_run_keeps_the_config_dir_and_lists_its_role_in_no_claim(plugin):
    """+dry_run=true: the commands it prints compose the same files (--config-dir kept), and the cell's role, which
    the toy declares (MethodFacts.roles) and no claim reads, is accepted and listed in one line."""
    _, conf, env = plugin
    out = harness(env, "--config-dir", str(conf), "experiment=toy", "+dry_run=true", timeout=300)
    run_one = next(line for line in out.splitlines() if line.startswith("run one:"))
    fan_out = next(line for line in out.splitlines() if line.startswith("fan out:"))
    assert f"--config-dir {conf} experiment=toy" in run_one and f"--config-dir {conf}" in fan_out, out
    assert [line for line in out.splitlines() if "in no claim" in line] == [
        "roles in no claim (accepted; conf/claims.yaml reads none of them): reinforce (REINFORCE)"], out


def test_its_cluster_fan_out_composes_with_the_config_dir(plugin, monkeypatch):
    """harness.runner.launch plans the toy's experiment from its --config-dir (its role accepted) and keeps it."""
    from harness.runner.launch import command

    _, conf, _ = plugin
    argv = ["--config-dir", str(conf), "experiment=toy", "stamp=s"]
    monkeypatch.setattr(sys, "argv", ["launch", *argv])
    assert command(argv)[3:] == ["-m", *argv, "+run_index=range(0,3)"]


def test_an_unknown_option_names_every_config_dir_searched(plugin):
    _, conf, env = plugin
    r = subprocess.run([sys.executable, "-m", "harness", "--config-dir", str(conf), "method=reinforc"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    assert (f"method=reinforc is not an option of {conf}/method/ or conf/method/; did you mean method=reinforce?"
            in r.stderr), r.stderr


def test_a_role_its_method_does_not_declare_is_refused(plugin):
    _, conf, env = plugin
    (conf / "experiment" / "toy.yaml").write_text(EXPERIMENT_YAML.replace("role: reinforce", "role: reinforcer"))
    r = subprocess.run([sys.executable, "-m", "harness", "--config-dir", str(conf), "experiment=toy", "+dry_run=true"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    assert ("cells[2].role='reinforcer' is not a role; use one of base, es," in r.stderr
            and "toy_reinforce.Reinforce declares reinforce, or leave it out" in r.stderr), r.stderr


def report(records, out, env=None):
    """`python -m harness.reporting RECORDS --out OUT` with the repository alone on PYTHONPATH (no plugin)."""
    env = env or {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-m", "harness.reporting", str(records), "--out", str(out)], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    return r.stdout + r.stderr


def test_its_records_keep_its_family_so_reporting_needs_neither_its_module_nor_its_yaml(plugin, tmp_path):
    """A record keeps the facts its method declared (Record.facts): reporting the toy's records without its module
    on PYTHONPATH and without --config-dir still sets ES against REINFORCE. A record older than that (no facts)
    is looked up by its `_target_`, which cannot be found here: the report says so instead of dropping it."""
    from harness.core.method_facts import facts_record
    from harness.core.records import Record, write_record
    from harness.evaluation.metrics import prompt_set_id

    prompts = prompt_set_id([f"p{i}" for i in range(40)])

    def put(root, name, method, target, correct, seed, facts, trains=True):
        v = [int(i < correct) for i in range(40)]
        m = sum(v) / 40
        metrics = {"test": {"greedy_acc": {"mean": m, "ci_low": m, "ci_high": m, "n": 40, "prompts": prompts,
                                           "per_prompt": v}}}
        write_record(root / name / f"seed{seed}", Record(
            status="ok", label=name, cell=name, model="zoo-100k", method=method, trains=trains, seed=seed,
            config={"method": {"_target_": target}}, facts=facts, metrics=metrics, started_at=seed))

    toy = facts_record(facts_of("toy_reinforce.Reinforce"))
    assert toy["family"] == RL and toy["roles"] == {"reinforce": "REINFORCE with a mean baseline"}
    for root, kept in ((tmp_path / "new", toy), (tmp_path / "old", {})):
        for seed in (0, 1):
            put(root, "Original", "base", "methods.base.Base", 10, seed, {}, trains=False)
            put(root, "ES", "es", "methods.es.ES", 20 + seed, seed, {})
            put(root, "REINFORCE", "reinforce", "toy_reinforce.Reinforce", 12 + 3 * seed, seed, kept)
    report(tmp_path / "new", tmp_path / "new_out")
    rows = list(csv.DictReader((tmp_path / "new_out" / "comparisons.csv").open()))
    assert {r["comparison"] for r in rows if r["kind"] == "ES vs RL"} == {"ES vs REINFORCE"}, rows
    out = report(tmp_path / "old", tmp_path / "old_out")
    rows = list(csv.DictReader((tmp_path / "old_out" / "comparisons.csv").open()))
    assert not [r for r in rows if r["kind"] == "ES vs RL"]
    assert "REINFORCE vs Original" in {r["comparison"] for r in rows}  # named below, never dropped
    said = ("method reinforce (toy_reinforce.Reinforce): its family is unknown (the record predates records keeping "
            "their method's facts, and its module is not importable here: put it on PYTHONPATH)")
    assert said in (tmp_path / "old_out" / "findings.md").read_text() and said in out


def test_every_shipped_method_declares_facts_readable_before_torch(monkeypatch):
    """The config check and a report from a runs.csv read facts from source: for every conf/method option the
    light read (no import) gives exactly the data fields the imported class declares."""
    import harness.core.method_facts as mf

    targets = mf.targets_by_name()
    assert set(targets) >= {"base", "es", "grpo", "ppo", "sequential"}
    imported = {name: mf._data_only(mf.facts_of(t)) for name, t in targets.items()}
    mf.declared.cache_clear()

    def no_import(target):
        raise AssertionError(f"declared({target}) imported its module")
    monkeypatch.setattr(mf, "facts_of", no_import)
    try:
        assert {name: mf.declared(t) for name, t in targets.items()} == imported
    finally:
        mf.declared.cache_clear()
