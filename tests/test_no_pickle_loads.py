"""Nothing executable is loaded from a run folder: every torch.load reads weights only."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOAD = re.compile(r"torch\.load\((?P<args>[^)]*)\)", re.S)


def test_every_torch_load_is_weights_only():
    bad = []
    for path in sorted([*ROOT.glob("harness/**/*.py"), *ROOT.glob("methods/**/*.py"), *ROOT.glob("tasks/**/*.py")]):
        for m in LOAD.finditer(path.read_text()):
            if "weights_only=True" not in m.group("args"):
                bad.append(f"{path.relative_to(ROOT)}: {m.group(0)[:80]}")
    assert not bad, "torch.load without weights_only=True unpickles code from a file:\n" + "\n".join(bad)
    assert (ROOT / "methods" / "ppo.py").read_text().count("weights_only=True") >= 1  # the PPO resume path


def test_a_record_group_that_is_a_path_stays_one_folder_under_outputs():
    from harness.reporting.report import safe_name
    for evil in ("/tmp/evil", "../../etc", "a/b", "..", ""):
        name = safe_name(evil)
        assert "/" not in name and not name.startswith(".") and name, (evil, name)
    assert safe_name("placebo_real_confirm") == "placebo_real_confirm"


def test_table_cells_from_a_run_folder_cannot_forge_rows_or_render_html():
    from harness.reporting.format import md_row
    row = md_row(["zoo | evil\n| forged | row |", "<script>alert(1)</script>", "p < 0.05"])
    assert row.count("\n") == 0 and row.count(" | ") == 2          # three cells, one line
    assert "&lt;script>" in row and "p < 0.05" in row
