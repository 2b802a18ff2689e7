"""A rerun is not a seed: the latest record of a run replaces the earlier (listed as superseded), an interval
over seeds needs two distinct seeds, and ad-hoc runs of different models or tasks never share a table or plot.

    python -m pytest tests/test_reruns.py -q
"""
import csv

from harness.core.atomic import write_json_atomic
from harness.core.records import SCHEMA_VERSION, Record
from harness.core.records import write_record as _write_record
from harness.reporting.aggregate import aggregate
from harness.reporting.plots import passk_figure
from harness.reporting.report import rebuild


def metric(mean):
    return {"mean": mean, "ci_low": mean - 0.05, "ci_high": mean + 0.05, "n": 200}


def base_run(run_dir, acc, started, stamp, model="zoo-1m", task="tasks.countdown.Countdown", seed=0, plan=None,
             **config):
    rec = {"schema_version": SCHEMA_VERSION, "label": "base", "model": model, "method": "base", "trains": False,
           "task": task, "seed": seed, "status": "ok", "started_at": started,
           "config": {"stamp": stamp, "group": "adhoc", "seed": seed, "method": {"_target_": "methods.base.Base"},
                      **config},
           "metrics": {"test": {"greedy_acc": metric(acc), "pass@16": metric(acc + 0.2)}},
           "pass_curve": {"test": {"1": acc, "16": acc + 0.2}}, "wall_s": {"total": 10.0 * started}, **(plan or {})}
    _write_record(run_dir, Record.from_dict(rec))


def test_two_records_of_one_base_run_are_one_row_without_a_seed_interval(tmp_path):
    base_run(tmp_path / "20250101-000000-base", 0.56, 1.0, "20250101-000000")
    base_run(tmp_path / "20250102-000000-base", 0.56, 2.0, "20250102-000000")  # the same command, run again
    text = rebuild(tmp_path, tmp_path / "out")
    row = next(line for line in text.splitlines() if line.startswith("| zoo-1m | base |"))
    assert "| 1/1 |" in row and "56.0 [51.0, 61.0]" in row  # the run's prompt CI, not a t interval over seeds
    assert "| 20 |" in row  # wall s is the latest run's, not the mean of the two
    assert "1 earlier record replaced" in text
    runs = list(csv.DictReader((tmp_path / "out" / "runs.csv").open()))
    assert sorted(r["status"] for r in runs) == ["ok", "superseded"]
    superseded = next(r for r in runs if r["status"] == "superseded")
    assert superseded["key"] == "20250101-000000-base" and superseded["superseded_by"] == "20250102-000000-base"


def test_runs_of_one_label_with_different_configs_are_never_pooled(tmp_path):
    base_run(tmp_path / "a", 0.40, 1.0, "a", budget={"flops": 4e12})
    base_run(tmp_path / "b", 0.60, 2.0, "b", budget={"flops": 8e12})
    main = aggregate(tmp_path)["main"]
    assert sorted(main["label"]) == ["base (budget.flops=4000000000000.0)", "base (budget.flops=8000000000000.0)"]
    assert list(main["n_ok"]) == [1, 1]


def test_several_runs_of_one_seed_get_no_interval(tmp_path):
    runs = [{"index": i, "model": "m", "seed": 0, "cell": "ES", "column": "ES", "label": "ES", "grid": None,
             "point": {}, "overrides": [], "method": "es", "key": f"m/ES/run{i}"} for i in range(2)]
    write_json_atomic(tmp_path / "experiment.json", {"group": "g", "runs": runs})
    for r, acc in zip(runs, (0.4, 0.6)):
        base_run(tmp_path / r["key"], acc, 1.0 + r["index"], "s", model="m",
                 plan={"run_key": r["key"], "model_key": "m", "cell": "ES", "label": "ES"})
    md = rebuild(tmp_path, tmp_path / "out")
    row = next(line for line in md.splitlines() if line.startswith("| m | ES |"))
    assert "| 2/2 |" in row and "50.0 (one seed)" in row


def test_different_models_and_tasks_get_a_table_each(tmp_path):
    base_run(tmp_path / "a", 0.56, 1.0, "a")
    base_run(tmp_path / "b", 0.13, 2.0, "b", model="HuggingFaceTB/SmolLM2-135M-Instruct",
             task="tasks.arithmetic.Arithmetic")
    base_run(tmp_path / "c", 0.30, 3.0, "c", task="tasks.arithmetic.Arithmetic")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "passk.png").write_bytes(b"an earlier report's figure of one pair")
    text = rebuild(tmp_path, tmp_path / "out")
    assert text.startswith("# ") and "3 models or tasks" in text
    subs = sorted(p.name for p in (tmp_path / "out").iterdir() if p.is_dir())
    assert subs == ["SmolLM2-135M-Instruct-Arithmetic", "zoo-1m-Arithmetic", "zoo-1m-Countdown"]
    for sub in subs:
        table = (tmp_path / "out" / sub / "table.md").read_text()
        assert table.count(" | base | 1/1 |") == 1 and (tmp_path / "out" / sub / "passk.png").stat().st_size > 1000
    assert not (tmp_path / "out" / "passk.png").exists()  # stale: it drew one pair
    assert len(list(csv.DictReader((tmp_path / "out" / "runs.csv").open()))) == 3


def test_a_model_with_nothing_to_draw_gets_no_pass_at_k_panel(tmp_path):
    base_run(tmp_path / "a", 0.56, 1.0, "a")
    base_run(tmp_path / "b", 0.13, 2.0, "b", model="m2")
    main = aggregate(tmp_path)["main"]
    main.loc[main["model"] == "m2", "curve"] = None  # e.g. a real-model run scored greedy only
    fig = passk_figure(main)
    drawn = [ax for ax in fig.axes if ax.axison and ax.lines]
    assert [ax.get_title() for ax in drawn] == ["zoo-1m"]
    assert not [ax for ax in fig.axes if ax.axison and not ax.lines]
