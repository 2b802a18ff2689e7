"""Run records and tables: atomic writes, skipped old records, failed and missing runs marked, grid
selection on validation (mean over seeds), seed intervals, paper comparison, the sigma table.

    python -m pytest tests/test_tables.py -q
"""
import json

import pytest

from harness.core.atomic import write_json_atomic
from harness.core.records import SCHEMA_VERSION, Record, new_record, read_records
from harness.core.records import write_record as _write_record
from harness.reporting.aggregate import aggregate, t975
from harness.reporting.heldout import heldout_paper_markdown
from harness.reporting.report import budget_cell, write_report
from harness.reporting.report import rebuild


def write_record(run_dir, d: dict):
    """Tests describe records as dicts; the harness writes typed Records."""
    return _write_record(run_dir, Record.from_dict({"schema_version": SCHEMA_VERSION, **d}))


def metric(mean):
    return {"mean": mean, "ci_low": mean - 0.05, "ci_high": mean + 0.05, "n": 200}


def record(label, test, val=None, grid=None, status="ok", spent=1e12, method="es"):
    metrics = {"test": {"greedy_acc": metric(test), "pass@16": metric(min(1, test + 0.3))}}
    if val is not None:
        metrics["validation"] = {"greedy_acc": metric(val)}
    return {"label": label, "model": "zoo-1m", "method": method, "trains": method != "base", "seed": 0,
            "status": status, "grid": grid,
            "budget": {"kind": "flops", "limit": 1e12, "spent": spent, "flops_used": spent, "samples_used": 12,
                       "steps": 3, "executed_flops": None},
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
    _write_record(tmp_path, new_record(label="ES", method="es"))
    rec = json.loads((tmp_path / "record.json").read_text())
    assert rec["schema_version"] == SCHEMA_VERSION and rec["git_sha"] and rec["versions"]["torch"]
    assert rec["status"] == "running" and rec["pid"] and rec["host"]


def test_version_1_records_are_still_read(tmp_path):
    (tmp_path / "a").mkdir()
    v1 = {**record("base", 0.2, method="base"), "schema_version": 1, "some_old_key": 1}
    del v1["trains"]
    (tmp_path / "a" / "record.json").write_text(json.dumps(v1))
    (rec,), warnings = read_records(tmp_path)
    assert not warnings and rec.trains is False and rec.metrics["test"]["greedy_acc"].mean == 0.2


def test_a_killed_run_shows_as_interrupted(tmp_path):
    import subprocess
    import sys
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()   # a pid that has exited
    rec = new_record(label="ES", method="es", model="zoo-1m")
    rec.pid = int(dead)
    _write_record(tmp_path / "a", rec)
    write_record(tmp_path / "b", record("base", 0.2, method="base"))
    text = rebuild(tmp_path, tmp_path / "out")
    assert "INTERRUPTED" in text and "interrupted" in (tmp_path / "out" / "runs.csv").read_text()


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
    md = rebuild(tmp_path, tmp_path / "out")
    assert "FAILED" in md and "40.0 [35.0, 45.0]" in md
    assert (tmp_path / "out" / "passk.png").stat().st_size > 1000
    assert (tmp_path / "out" / "table.csv").read_text().count("\n") == 3  # header + 2 rows


def test_grid_selection_uses_validation_not_test(tmp_path):
    recs = [record("base", 0.2, method="base"),
            record("GRPO lr=1", test=0.9, val=0.1, grid="GRPO"),   # best on test, worst on validation
            record("GRPO lr=2", test=0.3, val=0.5, grid="GRPO"),
            record("GRPO lr=3", test=0.0, grid="GRPO", status="failed"),
            record("PPO lr=1", test=0.0, grid="PPO", status="failed")]
    for i, r in enumerate(recs):
        write_record(tmp_path / str(i), r)
    agg = aggregate(tmp_path)
    labels = list(agg["main"]["label"])
    assert labels[1].startswith("GRPO lr=2 (best of 3") and "PPO (no successful grid point)" in labels
    assert len(agg["points"][agg["points"]["grid"].notna()]) == 4
    rebuild(tmp_path, tmp_path / "out", title="t")
    assert "validation greedy_acc" in (tmp_path / "out" / "grid.md").read_text()
    assert "FAILED" in (tmp_path / "out" / "table.md").read_text()


# ---- experiments: models x cells x seeds, from a plan (experiment.json) and records ----
def planned(index, model, label, seed, cell=None, grid=None, point=None, method="es"):
    cell = cell or grid or label
    return {"index": index, "model": model, "seed": seed, "cell": cell, "column": cell, "label": label,
            "grid": grid, "point": point or {}, "overrides": [], "method": method,
            "key": f"{model}/{label.replace(' ', '_')}/seed{seed}"}


def write_run(root, plan_entry, rec):
    rec = {**rec, "model": plan_entry["model"], "model_key": plan_entry["model"], "seed": plan_entry["seed"],
           "run_key": plan_entry["key"], "cell": plan_entry["cell"], "column": plan_entry["column"],
           "point": plan_entry["point"]}
    write_record(root / plan_entry["key"], rec)


def synthetic_experiment(root, paper=None, axis_plot=None):
    """Two models, two seeds; one failed ES seed on m1, one missing GRPO point on m1, m2 has no ES at all."""
    runs = [planned(0, "m1", "base", 0, method="base"),
            planned(1, "m1", "ES", 0), planned(2, "m1", "ES", 1),
            planned(3, "m1", "GRPO lr=1", 0, grid="GRPO", method="grpo"),
            planned(4, "m1", "GRPO lr=2", 0, grid="GRPO", method="grpo"),
            planned(5, "m2", "base", 0, method="base"),
            planned(6, "m2", "ES", 0), planned(7, "m2", "ES", 1)]
    man = {"schema_version": SCHEMA_VERSION, "group": "syn", "stamp": "s", "select_by": "greedy_acc",
           "summary_metric": "greedy_acc", "paper": paper, "paper_note": None, "axis_plot": axis_plot, "runs": runs}
    write_json_atomic(root / "experiment.json", man)
    write_run(root, runs[0], record("base", 0.2, method="base"))
    write_run(root, runs[1], record("ES", 0.40))
    write_run(root, runs[2], record("ES", 0.0, status="failed"))
    write_run(root, runs[3], record("GRPO lr=1", test=0.5, val=0.3, grid="GRPO", method="grpo"))
    # runs[4] (GRPO lr=2 on m1) never wrote a record: MISSING
    write_run(root, runs[5], record("base", 0.1, method="base"))
    # runs[6] and runs[7] (ES on m2): both missing, so the whole cell is MISSING
    return runs


def test_failed_and_missing_runs_are_marked_never_dropped(tmp_path):
    synthetic_experiment(tmp_path)
    agg = write_report(tmp_path, tmp_path / "out")
    runs = agg["runs"]
    assert list(runs["status"]) == ["ok", "ok", "failed", "ok", "missing", "ok", "missing", "missing"]
    md = (tmp_path / "out" / "table.md").read_text()
    assert "| m1 | ES | 1/2, 1 FAILED |" in md and "40.0 [35.0, 45.0]*" in md   # one seed left: its prompt CI
    assert "| m2 | ES | 0/2, 2 MISSING |" in md and "MISSING" in md
    grid = (tmp_path / "out" / "grid.md").read_text()
    assert "GRPO lr=2 | 0/1, 1 MISSING" in grid and "30.0 ←" in grid
    assert "missing" in (tmp_path / "out" / "runs.csv").read_text()
    assert (tmp_path / "out" / "passk.png").stat().st_size > 1000


def test_seed_mean_uses_a_t_interval_over_seeds(tmp_path):
    runs = [planned(0, "m", "ES", 0), planned(1, "m", "ES", 1), planned(2, "m", "ES", 2)]
    write_json_atomic(tmp_path / "experiment.json", {"group": "g", "runs": runs})
    for r, acc in zip(runs, (0.40, 0.50, 0.60)):
        write_run(tmp_path, r, record("ES", acc))
    row = aggregate(tmp_path)["main"].iloc[0]
    half = t975(2) * 0.1 / 3 ** 0.5   # sd of (.4, .5, .6) is 0.1
    assert row["greedy_acc"] == pytest.approx(0.5) and row["interval"] == "seeds"
    assert row["greedy_acc_lo"] == pytest.approx(0.5 - half) and row["greedy_acc_hi"] == pytest.approx(0.5 + half)


def test_grid_choice_is_the_validation_mean_over_seeds(tmp_path):
    # lr=1 wins seed 0 on validation but loses on the mean over seeds
    runs = [planned(i, "m", f"GRPO lr={lr}", s, grid="GRPO", method="grpo")
            for i, (lr, s) in enumerate([(1, 0), (1, 1), (2, 0), (2, 1)])]
    write_json_atomic(tmp_path / "experiment.json", {"group": "g", "runs": runs})
    for r, val in zip(runs, (0.9, 0.1, 0.6, 0.6)):
        write_run(tmp_path, r, record(r["label"], test=0.3, val=val, grid="GRPO", method="grpo"))
    main = aggregate(tmp_path)["main"]
    assert len(main) == 1 and main.iloc[0]["label"].startswith("GRPO lr=2 (best of 2")


def test_summary_prints_paper_numbers_with_the_difference(tmp_path):
    synthetic_experiment(tmp_path, paper={"m1": {"base": 0.1, "ES": 14.4, "GRPO": 30.9}, "m2": {"ES": 60.5}})
    write_report(tmp_path, tmp_path / "out")
    summary = (tmp_path / "out" / "summary.md").read_text()
    # GRPO's second point never ran: its chosen point is starred too (the choice saw half the grid)
    assert "| m1 | 20.0 (0.1, +19.9) | 40.0* (14.4, +25.6) | 50.0* (30.9, +19.1) |" in summary
    assert "MISSING (paper 60.5)" in summary
    assert "## Summary" in (tmp_path / "out" / "table.md").read_text()


def test_axis_table_and_plot(tmp_path):
    runs = [planned(i, m, f"ES sigma={s:g}", 0, cell="ES", point={"method.sigma": s})
            for i, (m, s) in enumerate([(m, s) for m in ("m1", "m2") for s in (0.001, 0.01)])]
    runs.append(planned(4, "m1", "GRPO lr=1", 0, grid="GRPO", method="grpo"))
    write_json_atomic(tmp_path / "experiment.json", {"group": "g", "runs": runs, "axis_plot": {
        "cell": "ES", "key": "method.sigma", "reference": "GRPO", "baseline": "base", "name": "sigma",
        "metrics": ["greedy_acc", "pass@16"]}})
    for r, acc in zip(runs[:3], (0.3, 0.5, 0.2)):   # m2 sigma=0.01 is missing
        write_run(tmp_path, r, record(r["label"], acc))
    write_run(tmp_path, runs[4], record("GRPO lr=1", test=0.45, val=0.4, grid="GRPO", method="grpo"))
    write_report(tmp_path, tmp_path / "out")
    table = (tmp_path / "out" / "sigma.md").read_text()
    assert "| base | sigma=0.001 | sigma=0.01 | GRPO (chosen on validation) |" in table
    assert "| m2 | - | 20.0 [15.0, 25.0] | MISSING | - |" in table   # base and GRPO were never planned for m2
    assert (tmp_path / "out" / "sigma.png").stat().st_size > 1000


def test_budget_flag(tmp_path):
    for name, spent, method in (("ES", 1.05e12, "es"), ("GRPO", 1.2e12, "grpo"), ("base", 0, "base")):
        write_record(tmp_path / name, record(name, 0.4, spent=spent, method=method))
    main = aggregate(tmp_path)["main"]
    assert [budget_cell(r)[-1] for _, r in main.iterrows()] == ["s", "!", "s"]  # "1e+12 flops" vs "...flops!"


def test_summary_prints_published_numbers_per_metric():
    import pandas as pd

    from harness.reporting.report import summary_markdown
    main = pd.DataFrame([{"model": "m", "column": "ES sigma=0.001", "status": "ok", "n_ok": 4, "n_planned": 4,
                          "mean_reward": 0.9, "kl_to_base": 0.3}])
    paper = {"m": {"ES sigma=0.001": {"mean_reward": 0.889, "kl_to_base": 0.274}}}
    reward = summary_markdown(main, "mean_reward", paper, None)
    kl = summary_markdown(main, "kl_to_base", paper, None)
    assert "0.900 (0.889, +0.011)" in reward and "0.300 (0.274, +0.026)" in kl


def test_heldout_numbers_printed_beside_published():
    m = lambda v: {"mean": v, "ci_low": v, "ci_high": v, "n": 10}  # noqa: E731
    recs = [Record(status="ok", model_key="q", column="ES", heldout={"cd": {"metrics": {"pass@1": m(0.10)}}}),
            Record(status="ok", model_key="q", column="ES", heldout={"cd": {"metrics": {"pass@1": m(0.12)}}})]
    md = heldout_paper_markdown(recs, {"cd": {"q": {"ES": [8.8], "GRPO": [8.5]}}}, metrics=("pass@1",))
    assert "| q | ES | 11.0 (8.8, +2.2) |" in md and "| q | GRPO | - (paper 8.5) |" in md


def test_curves_get_a_validation_row_only_when_validation_was_measured(tmp_path):
    import matplotlib.image as mpimg
    import pandas as pd

    from harness.reporting.curves import curves_plot

    train = [[{"flops": 1e9 * i, "reward_mean": 0.1 * i} for i in range(1, 6)]]
    row = {"model": "m", "label": "ES", "status": "ok", "trains": True, "val": 0.2, "train_curves": train}
    heights = {}
    for name, val in (("without", []), ("with", [[{"flops": 2e9, "greedy_acc": 0.2}, {"flops": 5e9, "greedy_acc": 0.3}]])):
        path = tmp_path / f"{name}.png"
        assert curves_plot(pd.DataFrame([{**row, "val_curves": val}]), path)
        heights[name] = mpimg.imread(path).shape[0]
    assert heights["without"] < 0.7 * heights["with"]  # one row of panels, not an empty second one


# ---- tools never overwrite committed work ----
def test_files_are_written_with_the_umask_not_private(tmp_path):
    import os
    import stat
    old = os.umask(0o022)
    try:
        write_json_atomic(tmp_path / "a.json", {"a": 1})
        os.umask(0o027)
        write_json_atomic(tmp_path / "b.json", {"b": 1})
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "b.json").stat().st_mode) == 0o640


def test_tables_of_a_folder_without_records_fail_and_write_nothing(tmp_path, monkeypatch, capsys):
    from harness.reporting.__main__ import main
    curated = tmp_path / "results" / "quickstart"   # a tables folder: tables, no records
    curated.mkdir(parents=True)
    (curated / "table.md").write_text("the committed table\n")
    monkeypatch.chdir(tmp_path)
    assert main([str(curated)]) == 2
    assert main([str(curated), "--out", str(curated)]) == 2
    err = capsys.readouterr().err
    assert err.count("esbench: error: no run records under") == 2 and "Traceback" not in err
    assert (curated / "table.md").read_text() == "the committed table\n"
    assert [p.name for p in curated.iterdir()] == ["table.md"] and not (tmp_path / "outputs").exists()


def test_tables_go_to_outputs_by_default(tmp_path, monkeypatch):
    from harness.reporting.__main__ import main
    root = tmp_path / "runs" / "syn" / "s"
    synthetic_experiment(root)
    monkeypatch.chdir(tmp_path)
    assert main([str(root)]) == 0
    assert (tmp_path / "outputs" / "syn" / "table.md").is_file()   # the plan's group names the folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outputs", "runs"]


def test_versions_json_counts_what_made_the_records(tmp_path):
    from harness.reporting.provenance import mixed_warning, provenance
    for i, (sha, tf) in enumerate((("aaa", "5.24.0"), ("aaa", "5.24.0"), ("bbb", "5.2.0"))):
        write_record(tmp_path / str(i), {**record(f"ES{i}", 0.4), "git_sha": sha,
                                         "versions": {"torch": "2.13.0", "transformers": tf}})
    write_report(tmp_path, tmp_path / "out")
    v = json.loads((tmp_path / "out" / "versions.json").read_text())
    assert v["runs"] == 3 and v["git_sha"] == {"aaa": 2, "bbb": 1}
    assert v["versions"]["torch"] == {"2.13.0": 3} and v["versions"]["transformers"] == {"5.2.0": 1, "5.24.0": 2}
    assert v["mixed"] == ["git_sha", "versions.transformers"]
    assert v["cpu"]["model"] == {"unknown": 3}   # records from before the field: counted, never dropped
    # the CPU and torch's kernel choice, where records carry them
    recs = [Record(git_sha="aaa"), Record(git_sha="aaa")]
    recs[0].cpu = {"model": "AMD EPYC 9R14", "capability": "AVX512"}
    recs[1].cpu = {"model": "AMD EPYC 9R14", "capability": "AVX2"}
    p = provenance(recs)
    assert p["cpu"] == {"model": {"AMD EPYC 9R14": 2}, "capability": {"AVX2": 1, "AVX512": 1}}
    assert p["mixed"] == ["cpu.capability"] and "AVX2 (1 runs)" in mixed_warning(p)


def test_a_partly_interrupted_grid_point_is_marked_in_every_table(tmp_path):
    runs = [planned(0, "m", "base", 0, method="base"),
            *[planned(1 + i, "m", f"GRPO lr={lr}", s, grid="GRPO", method="grpo")
              for i, (lr, s) in enumerate([(1, 0), (1, 1), (2, 0), (2, 1)])]]
    write_json_atomic(tmp_path / "experiment.json", {"group": "g", "runs": runs})
    write_run(tmp_path, runs[0], record("base", 0.2, method="base"))
    for r, val in zip(runs[1:4], (0.6, 0.6, 0.3)):
        write_run(tmp_path, r, record(r["label"], test=0.4, val=val, grid="GRPO", method="grpo"))
    write_run(tmp_path, runs[4], record(runs[4]["label"], 0.0, grid="GRPO", method="grpo", status="interrupted"))
    write_report(tmp_path, tmp_path / "out")
    table = (tmp_path / "out" / "table.md").read_text()
    row = next(line for line in table.splitlines() if "best of 2" in line)
    assert "1 point with fewer seeds than planned" in row and "| 2/2 (grid 3/4*, 1 INTERRUPTED) |" in row
    assert "40.0 [40.0, 40.0]*" in row and "on an RL grid row, runs of any point of its grid" in table
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "| m | 20.0 | 40.0* |" in summary and "of any point of its grid" in summary
    assert "| 1/2, 1 INTERRUPTED |" in (tmp_path / "out" / "grid.md").read_text()


def test_task_notes_are_listed_under_the_tables(tmp_path):
    notes = {"notes": ["4 test rows are degenerate (all tests expect one value): scored separately"]}
    write_record(tmp_path / "a", {**record("base", 0.2, method="base"), "task": "tasks.mbpp.MBPP", "task_info": notes})
    write_record(tmp_path / "b", {**record("ES", 0.4), "task": "tasks.mbpp.MBPP", "task_info": notes})
    write_report(tmp_path, tmp_path / "out")
    line = "- MBPP: 4 test rows are degenerate (all tests expect one value): scored separately"
    for name in ("table.md", "summary.md"):
        text = (tmp_path / "out" / name).read_text()
        assert "## Task notes" in text and text.count(line) == 1   # distinct notes, once


def test_analyze_writes_to_outputs_and_refuses_a_folder_without_records(tmp_path, monkeypatch, capsys):
    from pathlib import Path

    from harness.analysis.report import analyse, resolve
    from harness.analysis.update import UpdateError
    from harness.analysis.__main__ import main
    root = tmp_path / "runs" / "syn" / "s"
    synthetic_experiment(root)
    (tmp_path / "results" / "syn").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert resolve(root) == (root, Path("outputs/syn"))
    # a tables folder: the experiment its versions.json names, and still outputs/, never the folder given
    (tmp_path / "results" / "syn" / "versions.json").write_text('{"records": {"group": "syn", "stamp": "s"}}')
    assert resolve(tmp_path / "results" / "syn", tmp_path / "runs") == (root, Path("outputs/syn"))
    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path / "empty"), "--sparsity-prompts", "0"]) == 2
    assert "esbench: error:" in capsys.readouterr().err
    with pytest.raises(UpdateError, match="no run records under"):
        analyse(tmp_path / "empty", tmp_path / "out")
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "out").exists()


def test_pareto_plot_only_when_kl_to_base_was_measured(tmp_path):
    runs = [planned(0, "m1", "base", 0, method="base"), planned(1, "m1", "ES", 0),
            planned(2, "m1", "GRPO beta=0", 0, cell="GRPO", method="grpo")]
    write_json_atomic(tmp_path / "experiment.json", {"group": "g", "runs": runs})
    for r, (reward, kl) in zip(runs, [(0.8, 0.0), (0.9, 0.3), (0.92, 1.4)]):
        rec = record(r["label"], 0.5, method=r["method"])
        rec["metrics"]["test"].update(mean_reward=metric(reward), kl_to_base=metric(kl))
        write_run(tmp_path, r, rec)
    write_report(tmp_path, tmp_path / "out")
    assert (tmp_path / "out" / "pareto.png").stat().st_size > 1000
    synthetic_experiment(tmp_path / "nokl")
    write_report(tmp_path / "nokl", tmp_path / "nokl_out")
    assert not (tmp_path / "nokl_out" / "pareto.png").exists()


def test_a_missing_run_of_a_single_model_plan_sits_under_that_model(tmp_path):
    """A plan without a models axis names no model (None): its missing runs join the one model the
    records ran, not a '?' row of their own."""
    runs = [{**planned(0, "m1", "base", 0, method="base"), "model": None},
            {**planned(1, "m1", "GRPO lr=1", 0, grid="GRPO", method="grpo"), "model": None}]
    man = {"schema_version": SCHEMA_VERSION, "group": "one", "stamp": "s", "select_by": "greedy_acc",
           "summary_metric": "greedy_acc", "paper": None, "paper_note": None, "axis_plot": None, "runs": runs}
    write_json_atomic(tmp_path / "experiment.json", man)
    write_run(tmp_path, {**runs[0], "model": "m1"}, record("base", 0.2, method="base"))
    agg = write_report(tmp_path, tmp_path / "out")
    assert list(agg["runs"]["model"]) == ["m1", "m1"] and list(agg["runs"]["status"]) == ["ok", "missing"]
    md = (tmp_path / "out" / "table.md").read_text()
    assert "| ? |" not in md and "| m1 | GRPO (no successful grid point) | 0/1, 1 MISSING |" in md
