"""Typed run payloads (harness/core/payloads.py): a record's train summary, budget and metrics are written and
read by the same dataclasses; a key one side renamed fails loudly, naming the key and the file; records of
schemas 1 and 2 still read, as they are.

    python -m pytest tests/test_payloads.py -q
"""
import json

import pytest

from harness.core.budget import Ledger
from harness.core.method_facts import facts_of, light_facts, targets_by_name
from harness.core.payloads import _FIELDS, COMMON, BudgetSummary, Metric, PayloadError, TrainSummary
from harness.core.records import RECORD_NAME, SCHEMA_VERSION, Record, RecordError, read_record, write_record

METRIC = {"mean": 0.5, "ci_low": 0.4, "ci_high": 0.6, "n": 3, "prompts": "d1100ee1592ca364", "per_prompt": [1, 0, 1]}
PASS = {"mean": 0.5, "ci_low": 0.4, "ci_high": 0.6, "n": 3, "prompts": "d1100ee1592ca364", "correct": [4, 1, 7],
        "n_samples": 32}
ES_TRAIN = {"steps": 46, "resumed_from": 0, "flops": 2.52e12, "samples": 88320, "wall_s": 102.1, "skipped_updates": 0,
            "sigma": 0.01, "alpha": 0.005, "fitness": "real", "last_reward_mean": 0.62, "workers": 1, "engine": "hf",
            "master_checksum": "f04aeb882c31f410", "numerics": {"numerics": "exact", "noise_seeding": "iid",
                                                                "record": False}}
BUDGET = {"kind": "flops", "limit": 2.5e12, "spent": 2.52e12, "flops_used": 2.52e12, "samples_used": 88320,
          "steps": 46, "executed_flops": 2.94e12}
# the payload keys of a real schema-2 record (runs/quickstart/<stamp>/ES_sigma=1e-2_zoo_set/seed0/record.json)
V2 = {"schema_version": 2, "status": "ok", "label": "ES sigma=1e-2", "model": "zoo-1m", "method": "es", "trains": True,
      "seed": 0, "config": {"method": {"_target_": "methods.es.ES"}}, "train": ES_TRAIN, "budget": BUDGET,
      "steps": [], "curve": [],
      "metrics": {"test": {"greedy_acc": METRIC, "pass@16": PASS}, "validation": {"greedy_acc": METRIC}},
      "pass_curve": {"test": {"1": 0.4, "16": 0.9}}, "wall_s": {"train": 102.1, "total": 140.0},
      "heldout": {"conciseness": {"metrics": {"mean_reward": METRIC}, "pass_curve": {}, "examples": []}}}


ES_KEYS = light_facts("methods.es.ES").summary_keys


def fresh(**changes) -> dict:
    """V2 with `changes`, every payload a copy of its own (V2 shares METRIC between entries)."""
    return json.loads(json.dumps({**V2, **changes}))


def write(tmp_path, d) -> str:
    path = tmp_path / RECORD_NAME
    path.write_text(json.dumps(d))
    return str(path)


def test_round_trip_writes_the_json_it_read(tmp_path):
    rec = Record.from_dict({**V2, "schema_version": SCHEMA_VERSION})
    assert isinstance(rec.train, TrainSummary) and isinstance(rec.budget, BudgetSummary)
    assert isinstance(rec.metrics["test"]["pass@16"], Metric)
    assert isinstance(rec.heldout["conciseness"]["metrics"]["mean_reward"], Metric)
    write_record(tmp_path, rec)
    written = json.loads((tmp_path / RECORD_NAME).read_text())
    for key in ("train", "budget", "metrics", "heldout"):  # the same JSON as the untyped dicts, key for key
        assert written[key] == V2[key], key
    assert list(written["train"]) == list(ES_TRAIN) and list(written["budget"]) == list(BUDGET)
    again = read_record(tmp_path / RECORD_NAME)
    assert again.to_dict() == written and again.schema_version == SCHEMA_VERSION


def test_a_reader_uses_attributes():
    rec = Record.from_dict({**V2, "schema_version": SCHEMA_VERSION})
    assert (rec.train.steps, rec.train.alpha, rec.train.numerics["numerics"]) == (46, 0.005, "exact")
    assert rec.train.peft is None and rec.train.world_size is None  # other methods' keys: None, never a KeyError
    assert (rec.budget.flops_used, rec.budget.samples_used, rec.budget.executed_flops) == (2.52e12, 88320, 2.94e12)
    assert rec.metrics["test"]["pass@16"].correct == [4, 1, 7] and rec.metrics["test"]["greedy_acc"].correct is None


def test_a_run_that_stopped_early_has_no_payloads(tmp_path):
    rec = Record.from_dict({"schema_version": SCHEMA_VERSION, "status": "failed", "method": "es", "train": {},
                            "budget": {}})
    assert rec.train is None and rec.budget is None
    assert rec.to_dict()["train"] == {} and rec.to_dict()["budget"] == {}  # as before: empty objects


@pytest.mark.parametrize("where, change, key", [
    ("train", lambda d: d["train"].update(antithetic=True), "antithetic"),
    ("budget", lambda d: d["budget"].update(flops=1.0), "flops"),
    ("metrics.test.greedy_acc", lambda d: d["metrics"]["test"]["greedy_acc"].update(std=0.1), "std"),
    ("heldout.conciseness.metrics.mean_reward",
     lambda d: d["heldout"]["conciseness"]["metrics"]["mean_reward"].update(median=0.1), "median"),
])
def test_an_unknown_key_fails_naming_it_and_the_file(tmp_path, where, change, key):
    d = fresh(schema_version=SCHEMA_VERSION)
    change(d)
    path = write(tmp_path, d)
    with pytest.raises(RecordError, match=rf"{path}: {where}.* has unknown key '{key}'"):
        read_record(path)


@pytest.mark.parametrize("where, drop", [("train", "sigma"), ("train", "wall_s"), ("budget", "executed_flops"),
                                         ("budget", "flops_used")])
def test_a_missing_key_fails_naming_it_and_the_file(tmp_path, where, drop):
    d = fresh(schema_version=SCHEMA_VERSION)
    del d[where][drop]
    path = write(tmp_path, d)
    with pytest.raises(RecordError, match=rf"{path}: {where}.* lacks key '{drop}'"):
        read_record(path)


def test_a_wrong_type_fails_too(tmp_path):
    d = fresh(schema_version=SCHEMA_VERSION)
    d["budget"]["flops_used"] = "2.5e12"
    with pytest.raises(RecordError, match="budget.flops_used is '2.5e12', not a number"):
        read_record(write(tmp_path, d))


def test_a_schema_2_record_reads_into_the_typed_objects(tmp_path):
    rec = read_record(write(tmp_path, V2))
    assert rec.schema_version == 2 and rec.train.alpha == 0.005 and rec.budget.flops_used == 2.52e12
    assert rec.metrics["test"]["greedy_acc"].per_prompt == [1, 0, 1]
    assert {k: v for k, v in rec.to_dict().items() if k in V2} == V2  # rewritten unchanged, still schema 2


def test_older_records_read_as_they_are(tmp_path):
    """Schema 2 before executed_flops, and keys an older ES returned: read, never held to schema 3's keys."""
    old = fresh()
    del old["budget"]["executed_flops"], old["train"]["master_checksum"]
    old["train"]["antithetic"] = False
    rec = read_record(write(tmp_path, old))
    assert rec.budget.executed_flops is None and rec.train.master_checksum is None
    assert rec.train.extra == {"antithetic": False} and rec.to_dict()["train"] == old["train"]
    v1 = {k: v for k, v in old.items() if k != "trains"} | {"schema_version": 1, "method": "base"}
    assert read_record(write(tmp_path, v1)).trains is False


def test_a_method_outside_the_repository_keeps_its_own_keys():
    """tests/test_toy_method.py's random search returns steps and best_reward: no key is required of it."""
    s = TrainSummary.from_dict({"steps": 3, "best_reward": 0.4}, "random_scalar")
    assert (s.steps, s.flops, s.extra) == (3, None, {"best_reward": 0.4})
    assert s.to_dict() == {"steps": 3, "best_reward": 0.4}


def test_a_shipped_method_that_renames_a_key_fails_where_the_record_is_written():
    with pytest.raises(PayloadError, match="train \\(es's summary\\) has unknown key 'lr'"):
        TrainSummary.from_dict({**ES_TRAIN, "lr": ES_TRAIN["alpha"]}, "es", declared=ES_KEYS)
    assert TrainSummary.from_dict(dict(ES_TRAIN, peft="lora", adapter_params=10), "es",
                                  declared=ES_KEYS).peft == "lora"  # ES on LoRA


def test_budget_of_a_ledger_names_its_flops_flops_used():
    ledger = Ledger(limit=100, kind="samples")
    ledger.step(1e6, 10, 0.5, 0.1, executed_flops=2e6)
    assert BudgetSummary.of(ledger).to_dict() == {"kind": "samples", "limit": 100, "spent": 10.0, "flops_used": 1e6,
                                                  "samples_used": 10, "steps": 1, "executed_flops": 2e6}


def test_what_shipped_methods_return_fits_their_declaration(tmp_path, tiny_policy, toy_task):
    """The real summaries of every shipped method (one step each) read strictly as their method's."""
    from methods.base import Base
    from methods.grpo import GRPO
    from methods.ppo import PPO
    from tasks.countdown import Countdown
    from tests.test_es import N, P, TASK, make_es
    from tests.test_sequential import toy_sequential

    got = {"base": Base().train(None, None, Ledger(limit=1), tmp_path),
           "es": make_es().train(tiny_policy(), TASK, Ledger(limit=N * P, kind="samples"), tmp_path / "es"),
           "grpo": GRPO(prompts_per_step=4, num_generations=4, max_completion_length=8, learning_rate=1e-3,
                        beta=0.0).train(tiny_policy(eval_mode=False), toy_task("digits", n_train=16),
                                        Ledger(limit=16, kind="samples"), tmp_path / "grpo"),
           "ppo": PPO(prompts_per_step=4, learning_rate=1e-3, num_ppo_epochs=1).train(
               tiny_policy(eval_mode=False), Countdown(n_train=16, max_new_tokens=8), Ledger(limit=4, kind="samples"),
               tmp_path / "ppo"),
           "sequential": toy_sequential(0.5)[0].train(tiny_policy(), None, Ledger(limit=20, kind="samples"),
                                                      tmp_path / "seq")}
    targets = {"base": "methods.base.Base", "es": "methods.es.ES", "grpo": "methods.grpo.GRPO",
               "ppo": "methods.ppo.PPO", "sequential": "methods.sequential.Sequential"}
    for method, summary in got.items():
        keys = light_facts(targets[method]).summary_keys
        assert TrainSummary.from_dict(summary, method, declared=keys).to_dict() == summary, method


def test_the_summary_fields_are_common_and_every_shipped_method_s_declared_keys():
    """TrainSummary's typed fields are COMMON and what each shipped method's facts declare, no more, no less."""
    # each shipped method declares its keys; a method added by the README's recipe may not (its keys are then
    # kept as returned, none required)
    shipped = {"base", "es", "grpo", "ppo", "sequential"}
    facts = {n: facts_of(t) for n, t in targets_by_name().items()}
    assert all(facts[n].summary_keys is not None for n in shipped) and COMMON[0] == "steps"
    declared = [f.summary_keys for f in facts.values() if f is not None and f.summary_keys is not None]
    assert _FIELDS == set(COMMON).union(*(a + s for a, s in declared))
