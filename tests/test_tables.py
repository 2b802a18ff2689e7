"""Run records and tables: atomic writes, skipped old records, failed runs marked, grid selection.

    python -m pytest tests/test_tables.py -q
"""
import json

import pytest

from harness.records import SCHEMA_VERSION, read_records, write_json_atomic, write_record
from harness.tables import budget_flag, records_frame, select_from_grids, write_experiment_tables, write_tables


def metric(mean):
    return {"mean": mean, "ci_low": mean - 0.05, "ci_high": mean + 0.05, "n": 200}


def record(label, test, val=None, grid=None, status="ok", spent=1e12, method="es"):
    metrics = {"test": {"greedy_acc": metric(test), "pass@16": metric(min(1, test + 0.3))}}
    if val is not None:
        metrics["validation"] = {"greedy_acc": metric(val)}
    return {"label": label, "model": "zoo-1m", "method": method, "seed": 0, "status": status, "grid": grid,
            "budget": {"kind": "flops", "limit": 1e12, "spent": spent, "flops_used": spent, "steps": 3},
            "metrics": metrics if status == "ok" else {}, "pass_curve": {"test": {"1": test, "16": test + 0.3}},
            "wall_s": {"total": 10.0}}


def test_atomic_write_leaves_no_temp_and_keeps_old_file_on_error(tmp_path):
    path = tmp_path / "r.json"
    write_json_atomic(path, {"a": 1})

    class Unprintable:
        def __str__(self):
            raise RuntimeError("fails half-way through the dump")

    with pytest.raises(RuntimeError):
        write_json_atomic(path, {"b": 2, "c": Unprintable()})
    assert json.loads(path.read_text()) == {"a": 1}  # the old record survives intact
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_record_is_self_describing(tmp_path):
    write_record(tmp_path, record("ES", 0.4))
    rec = json.loads((tmp_path / "record.json").read_text())
    assert rec["schema_version"] == SCHEMA_VERSION and rec["git_sha"] and rec["versions"]["torch"]


def test_old_schema_and_corrupt_records_are_skipped_with_warning(tmp_path):
    write_record(tmp_path / "good", record("ES", 0.4))
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "record.json").write_text(json.dumps({"schema_version": 0}))
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "record.json").write_text("{half a file")
    records, warnings = read_records(tmp_path)
    assert len(records) == 1 and len(warnings) == 2
    assert any("schema_version" in w for w in warnings) and any("unreadable" in w for w in warnings)


def test_failed_run_is_a_marked_row(tmp_path):
    write_record(tmp_path / "a", record("ES", 0.4))
    write_record(tmp_path / "b", record("GRPO", 0.0, status="failed"))
    df = write_tables(tmp_path, tmp_path / "out")
    md = (tmp_path / "out" / "table.md").read_text()
    assert len(df) == 2 and "FAILED" in md and "40.0 [35.0, 45.0]" in md
    assert (tmp_path / "out" / "passk.png").stat().st_size > 1000
    assert (tmp_path / "out" / "table.csv").read_text().count("\n") == 3


def test_grid_selection_uses_validation_not_test(tmp_path):
    recs = [record("base", 0.2, method="base"),
            record("GRPO lr=1", test=0.9, val=0.1, grid="GRPO"),   # best on test, worst on validation
            record("GRPO lr=2", test=0.3, val=0.5, grid="GRPO"),
            record("GRPO lr=3", test=0.0, grid="GRPO", status="failed"),
            record("PPO lr=1", test=0.0, grid="PPO", status="failed")]
    main, grid = select_from_grids(recs)
    labels = [r["label"] for r in main]
    assert labels[1].startswith("GRPO lr=2 (best of 3") and "PPO (no successful grid point)" in labels
    assert len(grid) == 4
    for i, r in enumerate(recs):
        write_record(tmp_path / str(i), r)
    write_experiment_tables(tmp_path, tmp_path / "out", title="t")
    assert "validation greedy_acc" in (tmp_path / "out" / "grid.md").read_text()
    assert "FAILED" in (tmp_path / "out" / "table.md").read_text()


def test_budget_flag():
    df = records_frame([record("ES", 0.4, spent=1.05e12), record("GRPO", 0.4, spent=1.2e12),
                        record("base", 0.1, spent=0, method="base")])
    assert [budget_flag(r) for _, r in df.iterrows()] == ["", "!", ""]
