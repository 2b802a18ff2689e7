"""grid.md names every grid whose validation choice sits at an edge of the grid (harness/reporting/grid_edges.py)."""
import pandas as pd

from harness.reporting.grid_edges import edge_notes


def _points(chosen_lr: float, lrs=(1e-5, 3e-5, 1e-4)) -> pd.DataFrame:
    return pd.DataFrame([{"model": "zoo-1m", "grid": "GRPO", "chosen": lr == chosen_lr,
                          "point": {"method.beta": 0.001, "method.learning_rate": lr}} for lr in lrs]
                        + [{"model": "zoo-1m", "grid": None, "chosen": False, "point": {}}])  # a fixed cell


def test_an_inner_choice_is_not_flagged():
    assert edge_notes(_points(3e-5)) == []


def test_an_edge_choice_is_flagged_with_its_side_and_the_grid():
    (note,) = edge_notes(_points(1e-4))
    assert "GRPO chose learning_rate=0.0001 (the largest of 1e-05, 3e-05, 0.0001)" in note
    assert "two-point" not in note  # beta has one value: not a grid axis
    (note,) = edge_notes(_points(1e-5))
    assert "the smallest of" in note


def test_a_two_point_grid_says_it_always_chooses_an_edge():
    (note,) = edge_notes(_points(1e-5, lrs=(1e-5, 3e-5)))
    assert "a two-point grid always chooses an edge" in note


def test_the_quickstart_grids_read_back_from_grid_csv():
    """The committed quickstart's two-point grids (points stored as their repr in grid.csv): GRPO chose
    learning_rate 3e-05 (the largest) and beta 0.001 (the smallest), PPO learning_rate 1e-05 (the smallest)."""
    notes = edge_notes(pd.read_csv("results/quickstart/grid.csv"))
    assert len(notes) == 2
    grpo = next(n for n in notes if "GRPO" in n)
    assert "learning_rate=3e-05 (the largest of 1e-05, 3e-05)" in grpo and "beta=0.001 (the smallest" in grpo
    assert "PPO" in next(n for n in notes if "GRPO" not in n)
