"""Damaged record and plan files are skipped with one line naming the file, never a traceback:
the run shows MISSING in the tables, and a record that is ok but holds no metrics
never counts as ok.

    python -m pytest tests/test_damaged_records.py -q
"""
import json
import logging

import pytest

from harness.core.records import RECORD_NAME, RecordError, read_manifest, read_record, read_records
from harness.reporting.__main__ import main as reporting_main
from test_tables import synthetic_experiment

DAMAGE = {
    "a list": ("[1, 2]", "holds a JSON list, not a record object"),
    "a string metric": ('{"schema_version": 2, "status": "ok", "metrics": {"test": "oops"}}',
                        "metrics.test is 'oops', not a mapping of metrics"),
    "a metric without ci": ('{"schema_version": 2, "status": "ok", "metrics": {"test": {"greedy_acc": {"mean": 1}}}}',
                            "metrics.test.greedy_acc is {'mean': 1}, not {mean, ci_low, ci_high} numbers"),
    "ok without metrics": ('{"schema_version": 2, "status": "ok"}', "status ok but no metrics"),
    "a string budget": ('{"schema_version": 2, "status": "ok", "metrics": {}, "budget": "x"}', "budget is str"),
    "a bad status": ('{"schema_version": 2, "status": "done", "metrics": {}}', "status 'done' is not one of"),
    "truncated": ('{"schema_version": 2, "status": "ok", "metr', "unreadable, not JSON"),
}


@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_a_damaged_record_is_one_error_naming_the_file(tmp_path, name):
    text, problem = DAMAGE[name]
    (tmp_path / RECORD_NAME).write_text(text)
    with pytest.raises(RecordError) as e:
        read_record(tmp_path / RECORD_NAME)
    assert str(e.value).startswith(f"{tmp_path / RECORD_NAME}: ") and problem in str(e.value)
    assert "\n" not in str(e.value)


def test_a_table_rebuild_skips_damaged_records_and_shows_their_runs_missing(tmp_path, caplog):
    """Before: `[1,2]` was an AttributeError, `metrics: {"test": "oops"}` a TypeError deep in aggregation,
    and an ok record with no metrics counted as ok."""
    runs = synthetic_experiment(tmp_path)
    damaged = {0: DAMAGE["a list"][0], 1: DAMAGE["a string metric"][0], 5: DAMAGE["ok without metrics"][0]}
    for i, text in damaged.items():
        (tmp_path / runs[i]["key"] / RECORD_NAME).write_text(text)
    with caplog.at_level(logging.WARNING, logger="esbench"):
        assert reporting_main([str(tmp_path), "--out", str(tmp_path / "out")]) == 0
    skipped = [r.getMessage() for r in caplog.records if r.getMessage().startswith("skipped ")]
    assert len(skipped) == 3 and all("\n" not in m for m in skipped)
    for i in damaged:
        assert any(str(tmp_path / runs[i]["key"] / RECORD_NAME) in m for m in skipped), runs[i]["key"]
    rows = (tmp_path / "out" / "runs.csv").read_text().splitlines()[1:]
    assert sum(",missing," in row for row in rows) == 3 + 3  # the 3 damaged and the 3 never written
    md = (tmp_path / "out" / "table.md").read_text()
    assert "| m1 | base | 0/1, 1 MISSING |" in md and "| m2 | base | 0/1, 1 MISSING |" in md


def test_a_truncated_plan_is_skipped_with_one_line_and_the_records_still_tabulated(tmp_path, caplog):
    """Before: a raw JSONDecodeError naming no file."""
    synthetic_experiment(tmp_path)
    plan = tmp_path / "experiment.json"
    plan.write_text(plan.read_text()[:200])
    with pytest.raises(RecordError, match=f"^{plan}: not JSON"):
        read_manifest(tmp_path)
    with caplog.at_level(logging.WARNING, logger="esbench"):
        assert reporting_main([str(tmp_path), "--out", str(tmp_path / "out")]) == 0
    assert any(r.getMessage().startswith(f"skipped {plan}: not JSON") for r in caplog.records)
    assert "| m1 | ES |" in (tmp_path / "out" / "table.md").read_text()


def test_a_plan_of_the_wrong_shape_names_the_file(tmp_path):
    (tmp_path / "experiment.json").write_text(json.dumps({"runs": [{"index": 0}]}))
    with pytest.raises(RecordError, match="experiment.json: not an experiment plan"):
        read_manifest(tmp_path)
    (tmp_path / "experiment.json").write_text("[1, 2]")
    with pytest.raises(RecordError, match="not an experiment plan"):
        read_manifest(tmp_path)


def test_read_records_warns_once_per_damaged_file(tmp_path):
    for i, (text, _) in enumerate(DAMAGE.values()):
        (tmp_path / str(i)).mkdir()
        (tmp_path / str(i) / RECORD_NAME).write_text(text)
    records, warnings = read_records(tmp_path)
    assert records == [] and len(warnings) == len(DAMAGE)
    assert all(w.startswith(f"skipped {tmp_path}/") for w in warnings)


def test_held_out_metrics_are_one_level_shallower_than_split_metrics(tmp_path):
    """heldout.<task>.metrics is metric -> {mean, ...} (no split level): a real base run's record must read."""
    m = {"mean": 0.0, "ci_low": 0.0, "ci_high": 0.0, "n": 8}
    good = {"schema_version": 2, "status": "ok", "metrics": {"test": {"greedy_acc": m}},
            "heldout": {"conciseness": {"metrics": {"mean_reward": m}, "pass_curve": {}, "examples": []}}}
    (tmp_path / RECORD_NAME).write_text(json.dumps(good))
    assert read_record(tmp_path / RECORD_NAME).heldout["conciseness"]["metrics"]["mean_reward"].n == 8
    good["heldout"]["conciseness"]["metrics"] = {"mean_reward": "oops"}
    (tmp_path / RECORD_NAME).write_text(json.dumps(good))
    with pytest.raises(RecordError, match="heldout.conciseness.metrics.mean_reward is 'oops'"):
        read_record(tmp_path / RECORD_NAME)
