"""No flood of step lines: a run prints its first step, one line per 5% of the budget and its last; every step
stays in train_log.jsonl.

    python -m pytest tests/test_step_lines.py -q
"""
from harness.core.budget import Ledger
from harness.core.steplog import LINES_PER_RUN, JsonlLog, Progress


def test_a_266_step_run_prints_about_20_lines_and_its_last(tmp_path, capsys):
    ledger = Ledger(limit=266, kind="updates", listeners=[JsonlLog(tmp_path), Progress()])
    for _ in range(266):
        ledger.step(1e6, 8, 0.5, 0.1)
    ledger.close()
    lines = capsys.readouterr().out.splitlines()
    assert LINES_PER_RUN <= len(lines) <= LINES_PER_RUN + 2, len(lines)
    assert lines[0].startswith("step    1/266") and "every step: train_log.jsonl" in lines[0]
    assert lines[-1].startswith("step  266/266") and "(100% of the budget)" in lines[-1]
    assert len((tmp_path / "train_log.jsonl").read_text().splitlines()) == 266


def test_a_short_run_prints_every_step_once(capsys):
    ledger = Ledger(limit=4, kind="updates", listeners=[Progress()])
    for _ in range(4):
        ledger.step(1e6, 8, 0.5, 0.1)
    ledger.close()  # the last step was printed already: not again
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("|")[0].strip() for line in lines] == [f"step    {i}/4" for i in range(1, 5)]


def test_a_run_that_stops_early_still_prints_its_last_step(capsys):
    ledger = Ledger(limit=1000, kind="updates", listeners=[Progress()])
    for _ in range(7):  # 0.7% of the budget: only the first step crossed a line
        ledger.step(1e6, 8, 0.5, 0.1)
    ledger.close()
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("|")[0].strip() for line in lines] == ["step    1/1000", "step    7/1000"]


def test_the_experiment_line_gives_overall_progress_and_an_eta():
    from harness.core.progress import experiment_progress
    assert experiment_progress(0, 11, 0, 2.0) == " | experiment: 0 of 11 runs finished, 2 s in"  # no ETA before a run
    assert experiment_progress(5, 11, 3, 360.0) == " | experiment: 5 of 11 runs finished, 6 min in, ETA 12 min"
    assert "ETA" not in experiment_progress(11, 11, 11, 60.0)  # nothing left
