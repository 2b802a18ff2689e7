"""Runs that did not update: an ES run whose every iteration tied (all members the
same reward) skipped every update, so its weights are the base model's; the tables must say so
instead of showing its numbers as a result. More than half skipped shows the share; a seed mean says
how many of its seeds had no update.

    python -m pytest tests/test_no_update.py -q
"""
import pandas as pd
from test_tables import planned, record, write_run

from harness.core.atomic import write_json_atomic
from harness.reporting.aggregate import NO_UPDATE, aggregate, update_note
from harness.reporting.report import write_report


def es_record(label, test, skipped, steps=10, val=None, grid=None, resumed_from=0):
    """An ES record whose train summary counts `skipped` of `steps` iterations as skipped updates."""
    train = {"steps": steps, "resumed_from": resumed_from, "flops": 1e12, "samples": 12, "wall_s": 1.0,
             "skipped_updates": skipped, "sigma": 0.03, "alpha": 0.015, "fitness": "real", "last_reward_mean": 0.5,
             "workers": 1, "engine": "hf", "master_checksum": "0", "numerics": None}  # every key ES returns
    return {**record(label, test, val=val, grid=grid), "train": train}


def sweep(root, skips: dict, seeds=1, axis_plot=True):
    """One model, base + ES at three sigmas (skips: sigma -> skipped updates per seed, of 10 iterations)."""
    runs = [planned(0, "m", "base", 0, method="base")]
    for s in skips:
        runs += [planned(len(runs), "m", f"ES sigma={s:g}", seed, cell="ES", point={"method.sigma": s})
                 for seed in range(seeds)]
    spec = {"cell": "ES", "key": "method.sigma", "baseline": "base", "name": "sigma",
            "metrics": ["greedy_acc", "pass@16"]}
    write_json_atomic(root / "experiment.json", {"group": "g", "runs": runs, "axis_plot": spec if axis_plot else None})
    write_run(root, runs[0], record("base", 0.4, method="base"))
    i = 1
    for s, per_seed in skips.items():
        for seed in range(seeds):
            skipped = per_seed[seed] if isinstance(per_seed, list) else per_seed
            write_run(root, runs[i], es_record(runs[i]["label"], 0.4 if skipped == 10 else 0.5 + seed / 100, skipped))
            i += 1
    return runs


def test_update_note():
    assert update_note(10, 10) == "NO UPDATE"
    assert update_note(6, 10) == "60% skipped"
    assert update_note(5, 10) == "" and update_note(0, 10) == ""
    assert update_note(0, 0) == "" and update_note(None, None) == ""


def test_no_update_share_and_nothing_in_every_table(tmp_path):
    sweep(tmp_path, {0.03: 10, 0.01: 6, 0.003: 0})
    agg = write_report(tmp_path, tmp_path / "out")
    runs = agg["runs"].set_index("label")
    # the run itself succeeded; its note says what it did
    assert runs.loc["ES sigma=0.03", "status"] == "ok" and runs.loc["ES sigma=0.03", "update"] == "NO UPDATE"
    assert runs.loc["ES sigma=0.01", "update"] == "60% skipped" and runs.loc["ES sigma=0.003", "update"] == ""
    assert runs.loc["base", "update"] == ""   # an untrained method counts nothing
    main = agg["main"].set_index("label")
    assert main.loc["ES sigma=0.03 [NO UPDATE]", "status"] == NO_UPDATE
    assert main.loc["ES sigma=0.01 [60% skipped]", "status"] == "ok"
    assert main.loc["ES sigma=0.003", "status"] == "ok"

    table = (tmp_path / "out" / "table.md").read_text()
    row = next(line for line in table.splitlines() if "ES sigma=0.03" in line)
    assert "[NO UPDATE]" in row and "40.0" not in row     # its (base-identical) numbers are not shown
    assert row.count("NO UPDATE") >= 3                     # label + every metric cell
    row = next(line for line in table.splitlines() if "ES sigma=0.01" in line)
    assert "[60% skipped]" in row and "50.0 [45.0, 55.0]" in row
    row = next(line for line in table.splitlines() if "ES sigma=0.003" in line)
    assert "skipped" not in row and "NO UPDATE" not in row and "50.0 [45.0, 55.0]" in row

    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "| NO UPDATE |" in summary and "40.0 | 40.0" not in summary
    sigma = (tmp_path / "out" / "sigma.md").read_text()
    line = next(x for x in sigma.splitlines() if x.startswith("| m |"))
    assert line.split(" | ")[1:4] == ["40.0 [35.0, 45.0]", "50.0 [45.0, 55.0]", "50.0 [45.0, 55.0]"]
    assert line.rstrip(" |").endswith("NO UPDATE")          # sigma=0.03, the last column
    assert (tmp_path / "out" / "sigma.png").stat().st_size > 1000
    assert "no update" not in (tmp_path / "out" / "runs.csv").read_text().split("\n")[1]  # runs stay ok
    findings = (tmp_path / "out" / "findings.md").read_text()   # left out of the comparisons, and said so
    assert "Not compared, because no update was ever applied" in findings and "m ES sigma=0.03 [NO UPDATE]" in findings
    assert "ES sigma=0.03" not in (tmp_path / "out" / "comparisons.csv").read_text()


def test_plots_leave_no_update_points_out(tmp_path, monkeypatch):
    sweep(tmp_path, {0.03: 10, 0.01: 6, 0.003: 0})
    import harness.reporting.plots as plots
    drawn, notes = [], []
    real_plot, real_text = plots.plt.Axes.plot, plots.plt.Figure.text

    def plot(self, x, *a, **kw):
        drawn.append(list(x) if not isinstance(x, (int, float)) else [x])
        return real_plot(self, x, *a, **kw)

    def text(self, *a, **kw):
        notes.append(a[2])
        return real_text(self, *a, **kw)

    monkeypatch.setattr(plots.plt.Axes, "plot", plot)
    monkeypatch.setattr(plots.plt.Figure, "text", text)
    agg = aggregate(tmp_path)
    plots.axis_plot(agg["points"], agg["main"], {"cell": "ES", "key": "method.sigma"}, ["greedy_acc"],
                    tmp_path / "sigma.png")
    assert drawn and all(0.03 not in xs for xs in drawn)
    assert any("NO UPDATE" in n and "sigma=0.03" in n for n in notes)
    drawn.clear()
    plots.passk_panels(agg["main"], tmp_path / "passk.png")
    assert len(drawn) == 3  # base, sigma=0.01, sigma=0.003: not the run that never updated


def test_seed_mean_says_how_many_seeds_had_no_update(tmp_path):
    sweep(tmp_path, {0.03: [10, 10, 10], 0.01: [10, 2, 0], 0.003: [7, 0, 0]}, seeds=3)
    agg = write_report(tmp_path, tmp_path / "out")
    points = agg["points"].set_index("label")
    assert points.loc["ES sigma=0.03 [NO UPDATE]", "status"] == NO_UPDATE
    partial = points.loc["ES sigma=0.01 [1 of 3 seeds NO UPDATE]"]
    assert partial["status"] == "ok" and partial["n_no_update"] == 1
    assert partial["greedy_acc"] == pd.Series([0.4, 0.51, 0.52]).mean()   # the mean is over every seed
    assert "ES sigma=0.003 [1 of 3 seeds >50% skipped (70%)]" in points.index
    table = (tmp_path / "out" / "table.md").read_text()
    assert "ES sigma=0.01 [1 of 3 seeds NO UPDATE] | 3/3 |" in table


def test_grid_chooses_among_points_that_updated(tmp_path):
    runs = [planned(i, "m", f"ES sigma={s:g}", 0, grid="ES", point={"method.sigma": s})
            for i, s in enumerate((0.03, 0.01))]
    write_json_atomic(tmp_path / "experiment.json", {"group": "g", "runs": runs})
    # the run that never updated has the base model's (here better) validation score: not a choice of ES
    write_run(tmp_path, runs[0], es_record(runs[0]["label"], 0.4, 10, val=0.6, grid="ES"))
    write_run(tmp_path, runs[1], es_record(runs[1]["label"], 0.5, 0, val=0.5, grid="ES"))
    main = aggregate(tmp_path)["main"]
    assert len(main) == 1 and main.iloc[0]["status"] == "ok"
    assert main.iloc[0]["label"] == "ES sigma=0.01 (best of 2 on validation; 1 point NO UPDATE)"
    # no point updated: the row is NO UPDATE, not a result
    write_run(tmp_path, runs[1], es_record(runs[1]["label"], 0.4, 10, val=0.5, grid="ES"))
    main = aggregate(tmp_path)["main"]
    assert main.iloc[0]["status"] == NO_UPDATE and main.iloc[0]["label"].startswith("ES sigma=0.03 [NO UPDATE]")


def test_a_resumed_run_counts_the_iterations_it_ran(tmp_path):
    # resumed at 4 of 10: ES counted the skipped updates of the 6 iterations this process ran only
    write_run(tmp_path, planned(0, "m", "ES", 0), es_record("ES", 0.4, 6, resumed_from=4))
    run = aggregate(tmp_path)["runs"].iloc[0]
    assert run["iterations"] == 6 and run["update"] == "100% skipped since resume" and run["status"] == "ok"
    assert update_note(4, 6, resumed_from=4) == "67% skipped since resume"
