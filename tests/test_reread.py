"""The committed results folders without per-prompt outcomes read again under the seed-level rule.

`python -m harness.reporting.reread results/<x>` recomputes every seed-level row from the folder's runs.csv and
rewrites comparisons and findings; run on a copy of each committed folder it must give back the committed files
byte for byte (so every seed-level interval there recomputes from committed numbers), and no template
placeholder may reach the prose (a `{uncorrected}` once did, in every such folder).

    python -m pytest tests/test_reread.py -q
"""
import re
import shutil

import pytest

from harness.core.paths import ROOT
from harness.reporting.outcomes import OUTCOMES
from harness.reporting.reread import reread

RESULTS = ROOT / "results"
FOLDERS = sorted(p.name for p in RESULTS.iterdir()
                 if (p / "comparisons.csv").is_file() and (p / "runs.csv").is_file() and not (p / OUTCOMES).is_file())
FILES = ("comparisons.csv", "comparisons.md", "findings.md")


def test_there_are_folders_to_reread():
    assert "placebo_real_cpu" in FOLDERS and "real_cpu" in FOLDERS and "sigma_sweep_cpu" not in FOLDERS


@pytest.mark.parametrize("name", FOLDERS)
def test_reread_gives_back_the_committed_files(name, tmp_path):
    copy = tmp_path / name
    shutil.copytree(RESULTS / name, copy)
    reread(copy, experiment=None if (ROOT / "conf" / "experiment" / f"{name}.yaml").is_file() else "quickstart")
    for file in FILES:
        mine, committed = (copy / file).read_text(), (RESULTS / name / file).read_text()
        assert mine.replace(copy.as_posix(), f"results/{name}") == committed, f"{name}/{file} differs from a reread"


@pytest.mark.parametrize("name", FOLDERS)
def test_no_template_placeholder_in_the_prose(name):
    for file in FILES[1:]:
        text = (RESULTS / name / file).read_text()
        assert not re.search(r"\{[a-z_]+\}", text), f"results/{name}/{file}: {re.search(r'{[a-z_]+}', text)[0]}"
