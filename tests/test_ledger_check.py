"""The claims ledger refuses a comparisons.csv row that disagrees with its counts, its file's BH or its runs."""
import shutil
from pathlib import Path

import pandas as pd
import pytest

from harness.reporting.claims import main as claims_main
from harness.reporting.ledger_check import LedgerMismatch, check_folder

RESULTS = Path(__file__).resolve().parents[1] / "results"


@pytest.mark.parametrize("folder", sorted(p.parent.name for p in RESULTS.glob("*/comparisons.csv")))
def test_every_committed_folder_passes_its_own_checks(folder):
    check_folder(RESULTS / folder, pd.read_csv(RESULTS / folder / "comparisons.csv"))


def _edit(tmp_path, folder, change):
    copy = tmp_path / folder
    shutil.copytree(RESULTS / folder, copy)
    df = pd.read_csv(copy / "comparisons.csv")
    change(df)
    df.to_csv(copy / "comparisons.csv", index=False)
    return copy, df


def test_an_edited_bh_p_is_refused_naming_the_row(tmp_path):
    def forge(df):  # the attack: a not-detected row made to read detected, counts unchanged
        i = df.index[df["result"] == "not detected"][0]
        df.loc[i, ["p_bh", "result"]] = [1e-9, "detected"]
    copy, df = _edit(tmp_path, "quickstart", forge)
    with pytest.raises(LedgerMismatch, match=r"quickstart/comparisons.csv row \d+ .*p_bh 1e-09 is not Benjamini"):
        check_folder(copy, df)


def test_an_edited_mcnemar_p_is_refused(tmp_path):
    def forge(df):
        i = df.index[df["pairing"] == "by prompt (exact McNemar)"][0]
        df.loc[i, "p_value"] = 1e-9
    copy, df = _edit(tmp_path, "quickstart", forge)
    with pytest.raises(LedgerMismatch, match="is not the exact McNemar p"):
        check_folder(copy, df)


def test_an_edited_seed_difference_is_refused_against_runs_csv(tmp_path):
    def forge(df):
        i = df.index[df["pairing"] == "by seed (Student-t)"][0]
        df.loc[i, ["difference", "ci_low", "ci_high"]] += 0.05
    copy, df = _edit(tmp_path, "placebo_cpu", forge)
    with pytest.raises(LedgerMismatch, match="is not (the t test's|runs.csv's)"):
        check_folder(copy, df)


def test_the_ledger_command_fails_in_one_line_on_a_forged_folder(tmp_path, capsys):
    results = tmp_path / "results"
    results.mkdir()
    def forge(df):
        df.loc[df.index[df["result"] == "not detected"][0], ["p_bh", "result"]] = [1e-9, "detected"]
    _edit(results, "quickstart", forge)
    assert claims_main(["--results", str(results), "--out", str(tmp_path / "claims.md")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("esbench: error:") and "\n" not in err and not (tmp_path / "claims.md").exists()


def test_a_damaged_point_cell_in_runs_csv_is_one_line(tmp_path):
    from harness.core.errors import UserError
    from harness.reporting.comparisons import read_runs_csv
    runs = pd.read_csv(RESULTS / "quickstart" / "runs.csv")
    runs.loc[3, "point"] = "{'beta': 0.001, lr"   # truncated
    runs.to_csv(tmp_path / "runs.csv", index=False)
    with pytest.raises(UserError, match=r"runs.csv row 5: point .* is not a grid point") as e:
        read_runs_csv(tmp_path / "runs.csv")
    assert "\n" not in str(e.value)
