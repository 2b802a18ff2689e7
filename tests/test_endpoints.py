"""Declared primary endpoints and exploratory arms (harness/reporting/endpoints.py, reporting/findings.py).

    python -m pytest tests/test_endpoints.py -q
"""
from __future__ import annotations

import shutil

import pandas as pd
import pytest
from omegaconf import OmegaConf

from harness.core.errors import ConfigError
from harness.core.paths import CONF_DIR, ROOT
from harness.reporting.endpoints import declarations, from_experiment_file
from harness.reporting.findings import findings_markdown, rewrite_findings

FILE = {"cells": [{"label": "base"}, {"label": "ES"}, {"label": "late", "exploratory": {"date": "2026-12-01",
                                                                                         "reason": "seen first"}}],
        "grids": [{"name": "GRPO"}], "eval": {"pass_ks": [1, 16]},
        "primary": [{"a": "ES", "b": "GRPO", "metric": "greedy_acc", "direction": "greater"}]}


def cfg(**change):
    return OmegaConf.create({**FILE, **change})


def test_declarations_read_primary_and_exploratory():
    d = declarations(cfg())
    assert d.primary[0].a == "ES" and d.exploratory == {"late": "2026-12-01: seen first"}
    assert d.role("ES vs GRPO (chosen on validation: GRPO beta=0.001)", "greedy_acc") == "primary"
    assert d.role("ES vs GRPO (chosen on validation: GRPO beta=0.001)", "pass@1") == "secondary"
    assert d.role("late vs base", "greedy_acc") == "exploratory"
    assert d.role("ES vs base", "greedy_acc") == "secondary"


@pytest.mark.parametrize("primary, words", [
    ([{"a": "ESS", "b": "base", "metric": "greedy_acc"}], "primary[0].a='ESS' is not a cell label or grid name"),
    ([{"a": "ES", "b": "base", "metric": "pass@1x"}], "primary[0].metric='pass@1x' is not a metric"),
    ([{"a": "ES", "b": "base", "metric": "greedy_acc", "direction": "up"}], "direction='up' is unknown"),
    ([{"a": "ES", "metric": "greedy_acc"}], "primary[0] has keys"),
])
def test_a_primary_naming_nothing_of_the_file_is_refused(primary, words):
    with pytest.raises(ConfigError, match=words.replace("[", r"\[").replace("(", r"\(")):
        declarations(cfg(primary=primary))


def test_exploratory_needs_a_date_and_a_reason():
    cells = [{"label": "ES"}, {"label": "late", "exploratory": {"date": "2026-12-01"}}]
    with pytest.raises(ConfigError, match="'late': exploratory needs a date and a reason"):
        declarations(cfg(cells=cells, primary=None))


def test_shipped_files_declare_what_their_comments_say():
    d = from_experiment_file("placebo_cpu")
    assert {(p.a, p.b, p.metric) for p in d.primary} == {
        (f"ES sigma={s}", f"placebo sigma={s}", m) for s in ("1e-2", "1e-3") for m in ("greedy_acc", "pass@1")}
    assert list(from_experiment_file("real_cpu").exploratory) == ["ES sigma=0.003 (density)"]
    assert declarations(OmegaConf.load(CONF_DIR / "experiment" / "placebo_cpu.yaml"), check=False).primary


def rows():
    base = {"model": "m", "kind": "k", "n_seeds": 3, "n_prompts": 100, "pairing": "by seed (Student-t)", "note": "",
            "n_up": float("nan"), "n_down": float("nan"), "n_boot": float("nan"), "mc_error": float("nan")}
    return pd.DataFrame([
        {**base, "comparison": "ES vs base", "metric": "greedy_acc", "difference": 0.05, "ci_low": 0.01,
         "ci_high": 0.09, "p_value": 0.01, "p_bh": 0.03, "result": "detected"},
        {**base, "comparison": "ES vs GRPO (chosen on validation: GRPO lr=1)", "metric": "greedy_acc",
         "difference": -0.02, "ci_low": -0.05, "ci_high": 0.01, "p_value": 0.2, "p_bh": 0.3, "result": "not detected"},
        {**base, "comparison": "late vs base", "metric": "greedy_acc", "difference": 0.1, "ci_low": 0.05,
         "ci_high": 0.15, "p_value": 0.001, "p_bh": 0.003, "result": "detected"}])


def test_findings_put_primary_first_and_exploratory_apart():
    text = findings_markdown(rows(), "t", decl=declarations(cfg()))
    primary, rest = text.split("## Primary endpoints")[1].split("## Secondary: Differences detected")
    assert "ES vs GRPO" in primary and "sign opposite to the declaration" in primary and "ES vs base" not in primary
    secondary, exploratory = rest.split("## Exploratory")
    assert "ES vs base differs by +5.0" in secondary and "late" not in secondary
    assert "late: added 2026-12-01: seen first." in exploratory and "late vs base differs by +10.0" in exploratory
    assert text.count("**Multiplicity.** m = 3 tests") == 1  # one family: the file's BH, unchanged


def test_without_declarations_findings_are_unchanged(tmp_path):
    """A committed folder's findings.md regenerates byte for byte from its comparisons.csv."""
    src = ROOT / "results" / "es_variants_cpu"
    for name in ("comparisons.csv", "findings.md", "analysis.json"):
        if (src / name).exists():
            shutil.copy(src / name, tmp_path / name)
    rewrite_findings(tmp_path, declarations(OmegaConf.create({})))
    assert (tmp_path / "findings.md").read_text() == (src / "findings.md").read_text()


def test_a_row_flagged_for_skipped_updates_is_still_its_arm():
    """The tables flag an ES row that made no update in most iterations ("ES [67% skipped]"); it is still
    the ES arm its file declared (the placebo_real_cpu pilot's primary row was lost to this once)."""
    from harness.reporting.claim_rows import column
    from harness.reporting.endpoints import Primary
    p = Primary("ES", "placebo", "greedy_acc", "greater")
    assert p.matches("ES [67% skipped] vs placebo", "greedy_acc")
    assert p.matches("ES vs placebo [NO UPDATE]", "greedy_acc")
    assert not p.matches("ES antithetic [67% skipped] vs placebo", "greedy_acc")
    for flagged in ("ES [67% skipped]", "ES [NO UPDATE]", "ES [100% skipped since resume]",
                    "ES [1 of 3 seeds NO UPDATE; 2 of 3 seeds >50% skipped (62%, 80%)]"):
        assert column(flagged) == "ES"
    assert column("GRPO(8) (chosen on validation: beta=0.001)") == "GRPO(8)"


def test_the_declared_one_sided_test_is_reported_beside_the_row_not_as_a_detection():
    """The confirmation's shape: +1.5 points, two-sided seed-level p 0.079, declared greater at 0.05 one-sided:
    the one-sided p is 0.0395, the declared criterion is met, and the words must not read as a detection."""
    from harness.reporting.endpoints import direction_note
    decl = declarations(cfg(primary=[{"a": "ES", "b": "GRPO", "metric": "greedy_acc", "direction": "greater",
                                      "test": "seed_t"}]))
    row = {"comparison": "ES vs GRPO", "metric": "greedy_acc", "difference": 1.5, "p_value": 0.0790,
           "pairing": "by seed (Student-t)"}
    note = direction_note(pd.DataFrame([row]), decl)[0]
    assert "p = 0.0395, below 0.05: the declared criterion is met" in note and "confirmed" not in note
    note = direction_note(pd.DataFrame([{**row, "difference": -1.5}]), decl)[0]
    assert "p = 0.9605, not below 0.05: the declared criterion is not met" in note
