"""A run's record keeps the facts its method declared (Record.facts), and reports read a run's family there.

harness/core/method_facts.py facts_record writes the data fields of a method's MethodFacts into the record when
the run starts (harness/runner/run.py); record_facts reads them back, and falls back to the method's `_target_`
(or its name among the conf/method options) only for a record made before records kept them. The comparisons,
the outcomes file, the analysis and NOTE-076's claims read the family from there, so a method from outside the
repository keeps its rows when it is reported without its module; a run whose family nothing gives is named.
Roles a plugin declares (MethodFacts.roles) that no claim reads are listed "in no claim"
(harness/reporting/roles.py unclaimed).

    python -m pytest tests/test_record_facts.py -q
"""
import json

import pandas as pd
import pytest

from harness.core import method_facts as mf
from harness.core.records import Record, RecordError, read_record, write_record
from harness.evaluation.metrics import prompt_set_id
from harness.reporting.outcomes import FACTS, outcomes_frame, records_of
from harness.reporting.roles import ROLES, claimed_roles, unclaimed

PLUGIN = {"family": "rl", "update_unit": "one RLOO step", "step_cap": "max_steps", "distributed": True,
          "reference_label": None, "reference_points": None, "stages": None, "split_unit": None,
          "summary_keys": [["global_step"], []], "roles": {"rloo": "RLOO at a group size"}}


def test_every_shipped_method_s_facts_survive_the_record_s_json():
    for name, target in mf.targets_by_name().items():
        declared = mf.declared(target)
        kept = json.loads(json.dumps(mf.facts_record(declared)))
        assert set(kept) == set(mf.DATA) and mf.stored_facts(kept) == declared, name


def test_a_record_keeps_them_and_reads_them_before_any_lookup(tmp_path):
    rec = Record(status="ok", method="rloo", config={"method": {"_target_": "plugin_nowhere.RLOO"}}, facts=PLUGIN,
                 train={"steps": 2, "resumed_from": 0, "flops": 1.0, "samples": 4, "wall_s": 1.0, "global_step": 2})
    write_record(tmp_path / "r", rec)
    back = read_record(tmp_path / "r" / "record.json")
    assert back.facts == PLUGIN and back.train.extra == {"global_step": 2}
    d = json.loads((tmp_path / "r" / "record.json").read_text())
    del d["train"]["global_step"]  # a key its kept facts say it always returns: read strictly against them
    (tmp_path / "r" / "record.json").write_text(json.dumps(d))
    with pytest.raises(RecordError, match="global_step"):
        read_record(tmp_path / "r" / "record.json")
    facts = mf.record_facts(back)
    assert facts.family == "rl" and facts.summary_keys == (("global_step",), ()) and facts.roles == PLUGIN["roles"]
    assert mf.record_family(back) == "rl"  # though plugin_nowhere cannot be imported here


def test_an_older_record_is_looked_up_by_its_target_and_an_unknown_one_is_named():
    es = Record(status="ok", method="es", config={"method": {"_target_": "methods.es.ES"}})
    by_name = Record(status="ok", method="grpo")  # schema 1: no _target_ either; conf/method's option of that name
    lost = Record(status="ok", method="rloo", config={"method": {"_target_": "plugin_nowhere.RLOO"}})
    assert (es.facts, mf.record_family(es), mf.record_family(by_name), mf.record_family(lost)) == ({}, "es", "rl", None)
    assert mf.unknown_family(lost) == (
        "method rloo (plugin_nowhere.RLOO): its family is unknown (the record predates records keeping their "
        "method's facts, and its module is not importable here: put it on PYTHONPATH), so it is in no ES-vs-RL row")


def _run(key, method, target, facts):
    prompts = prompt_set_id(["a", "b"])
    rec = Record(status="ok", method=method, path=key, config={"method": {"_target_": target}}, facts=facts,
                 metrics={"test": {"greedy_acc": {"mean": 0.5, "ci_low": 0, "ci_high": 1, "n": 2, "prompts": prompts,
                                                  "per_prompt": [1, 0]}}})
    row = {"key": key, "model": "zoo-1m", "cell": method, "label": method, "seed": 0, "status": "ok", "path": key}
    return rec, row


def test_the_outcomes_file_carries_them_only_for_records_that_keep_them():
    old = [_run("ES/seed0", "es", "methods.es.ES", {})]
    frame = outcomes_frame([r for r, _ in old], pd.DataFrame([row for _, row in old]))
    assert FACTS not in frame  # the columns older records wrote, byte for byte
    new = [*old, _run("RLOO/seed0", "rloo", "plugin_nowhere.RLOO", PLUGIN)]
    frame = outcomes_frame([r for r, _ in new], pd.DataFrame([row for _, row in new]))
    assert list(frame[FACTS].isna()) == [True, False]
    back = {r.path: r for r in records_of(frame)}
    assert back["RLOO/seed0"].facts == PLUGIN and mf.record_family(back["RLOO/seed0"]) == "rl"
    assert back["ES/seed0"].facts == {} and mf.record_family(back["ES/seed0"]) == "es"


def test_the_analysis_reads_the_family_an_analysed_run_carries():
    from harness.analysis.report import drift_ratios
    from harness.reporting.update_claims import lines

    runs = [{"name": "a", "model": "m", "method": "rloo", "family": "rl", "label": "RLOO", "drift": {"whole": 0.01}},
            {"name": "b", "model": "m", "method": "es", "label": "ES", "drift": {"whole": 0.04}},  # older: by name
            {"name": "c", "model": "m", "method": "mystery", "family": None, "label": "?", "drift": {"whole": 1.0}}]
    assert drift_ratios(runs) == {"m": [{"es": "ES", "es_drift": 0.04, "rl": "RLOO", "rl_drift": 0.01,
                                         "ratio": 4.0}]}
    assert lines([runs[2]]) == ["- not read: c (the family of its method is unknown: neither its record nor a "
                                "conf/method option of its name says it, so whether it is an ES run is not known)"]


def test_a_plugin_s_own_role_is_listed_in_no_claim_and_a_shipped_one_is_not():
    assert {"es", "grpo", "ppo"} <= claimed_roles() and "reinforce_pp" not in ROLES and "rloo" in ROLES
    spec = {"cells": [{"label": "ES", "role": "es"}, {"label": "base", "role": "base"}],
            "grids": [{"name": "RLOO", "role": "rloo"},  # shipped (ROLES), though no claim reads it: not listed
                      {"name": "R++(8)", "role": "reinforce_pp"}, {"name": "R++(16)", "role": "reinforce_pp"}]}
    assert unclaimed(spec) == ("roles in no claim (accepted; conf/claims.yaml reads none of them): "
                               "reinforce_pp (R++(8), R++(16))")
    assert unclaimed({"cells": spec["cells"]}) == ""
