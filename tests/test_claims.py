"""The claims ledger (harness/reporting/claims.py) on synthetic comparisons.csv files: each verdict from its rows."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from harness.reporting import claims
from harness.reporting.comparisons import COLUMNS

ROOT = Path(__file__).resolve().parent.parent
CLAIM = {c.id: c for c in claims.CLAIMS}
PROMPT, SEED = "by prompt (paired bootstrap)", "by seed (Student-t)"


def row(model, comparison, metric, diff, lo, hi, kind="trained vs base", pairing=PROMPT, p=None, p_bh=None):
    """A comparisons.csv row; without p (a file written before BH) it is read by its interval, uncorrected."""
    if p is None:
        result = "detected" if lo > 0 or hi < 0 else "not detected"
    else:
        result = "detected" if p_bh <= 0.05 else "nominal only" if p < 0.05 else "not detected"
    return dict(model=model, kind=kind, comparison=comparison, metric=metric, difference=diff, ci_low=lo, ci_high=hi,
                n_seeds=3 if pairing == SEED else 1, n_prompts=200, pairing=pairing, result=result, note="",
                p_value=p, p_bh=p_bh)


def write(results: Path, exp: str, rows: list[dict]) -> Path:
    (results / exp).mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows, columns=COLUMNS).to_csv(results / exp / "comparisons.csv", index=False)
    return results


def verdict(results, claim, exp="qiu2025_table1_cpu"):
    return claims.verdict(CLAIM[claim], results, exp)


@pytest.mark.parametrize("interval, word", [((0.02, 0.08), "supported"), ((-0.08, -0.02), "contradicted"),
                                            ((-0.02, 0.06), "not detected")])
def test_a_row_decides_its_claim(tmp_path, interval, word):
    lo, hi = interval
    write(tmp_path, "qiu2025_table1_cpu", [row("zoo-1m", "ES vs Original", "greedy_acc", (lo + hi) / 2, lo, hi),
                                          row("zoo-1m", "ES vs Original", "pass@1", -0.1, -0.2, -0.05)])
    v = verdict(tmp_path, "Q1")
    assert v.word == word
    assert [r["metric"] for r in v.rows] == ["greedy_acc"]          # only the rows the rule names
    assert "zoo-1m, greedy_acc, ES vs Original" in claims.quote(v.rows[0])


def test_every_model_must_agree_and_one_against_contradicts(tmp_path):
    write(tmp_path, "qiu2025_table1_cpu", [row("zoo-100k", "ES vs Original", "greedy_acc", 0.05, 0.01, 0.09),
                                          row("zoo-1m", "ES vs Original", "greedy_acc", 0.01, -0.02, 0.04)])
    assert verdict(tmp_path, "Q1").word == "not detected"
    write(tmp_path, "qiu2025_table1_cpu", [row("zoo-100k", "ES vs Original", "greedy_acc", 0.05, 0.01, 0.09),
                                          row("zoo-1m", "ES vs Original", "greedy_acc", -0.05, -0.09, -0.01)])
    assert verdict(tmp_path, "Q1").word == "contradicted"


def test_not_run_says_why_and_how(tmp_path):
    v = verdict(tmp_path, "Q1")
    assert v.word == "not run" and "no results/qiu2025_table1_cpu" in v.detail
    assert "python -m harness experiment=qiu2025_table1_cpu results_dir=results" in v.detail
    (tmp_path / "qiu2025_table1_cpu").mkdir()
    (tmp_path / "qiu2025_table1_cpu" / "table.md").write_text("old")
    v = verdict(tmp_path, "Q1")
    assert v.word == "not run" and "predate per-prompt scores" in v.detail
    no_scores = dict(row("zoo-1m", "ES vs Original", "greedy_acc", 0, 0, 0), pairing="none", result="no per-prompt")
    write(tmp_path, "qiu2025_table1_cpu", [no_scores])
    v = verdict(tmp_path, "Q1")
    assert v.word == "not run" and "predate per-prompt scores" in v.detail and "rerun" in v.detail
    write(tmp_path, "qiu2025_table1_cpu", [row("zoo-1m", "PPO (chosen on validation: x) vs Original", "greedy_acc",
                                               0.05, 0.01, 0.09)])
    assert verdict(tmp_path, "Q1").word == "not run"                  # no ES row: nothing decides Q1
    write(tmp_path, "qiu2025_table1_cpu", [row("zoo-1m", "ES vs Original", "greedy_acc", 0.05, 0.01, 0.09)])
    assert verdict(tmp_path, "Q4").detail == "1 model(s) run; the claim needs 2"


def test_seed_pairing_decides_when_there_is_one(tmp_path):
    by_seed = row("zoo-1m", "ES vs Original", "greedy_acc", 0.05, -0.02, 0.12, pairing=SEED)
    write(tmp_path, "qiu2025_table1_cpu", [row("zoo-1m", "ES vs Original", "greedy_acc", 0.05, 0.01, 0.09), by_seed])
    v = verdict(tmp_path, "Q1")
    assert v.word == "not detected" and v.rows[0]["pairing"] == SEED


def test_c1_reads_the_largest_k_measured(tmp_path):
    grpo = "GRPO(8) (chosen on validation: GRPO beta=0.001 learning_rate=3e-05) vs Original"
    write(tmp_path, "qiu2025_table1_cpu", [row("zoo-1m", grpo, "pass@1", 0.07, 0.05, 0.09),
                                          row("zoo-1m", grpo, "pass@4", 0.01, -0.01, 0.03),
                                          row("zoo-1m", grpo, "pass@16", -0.08, -0.1, -0.06)])
    v = verdict(tmp_path, "C1")
    assert v.word == "supported" and [r["metric"] for r in v.rows] == ["pass@1", "pass@16"]
    assert "GRPO(8) vs Original" in claims.quote(v.rows[0])      # the chosen point's label is shortened


def test_es_pattern_leaves_the_sequential_rows_out(tmp_path):
    write(tmp_path, "es_variants_cpu", [row("ladder-100k", "ES then GRPO vs Original", "pass@1", -0.1, -0.2, -0.05),
                                       row("ladder-100k", "GRPO then ES vs Original", "pass@1", 0.1, 0.05, 0.2),
                                       row("ladder-100k", "GRPO then ES vs Original", "pass@16", 0.1, 0.05, 0.2)])
    assert claims.verdict(CLAIM["C9"], tmp_path, "es_variants_cpu").word == "supported"
    assert claims.select(pd.read_csv(tmp_path / "es_variants_cpu" / "comparisons.csv"),
                         claims.Check("trained vs base", claims.ES, "pass@1")).empty


def test_the_boundary_on_real_sizes_and_on_the_zoo(tmp_path):
    def sweep(exp, signs):
        rows = [row(m, "ES sigma=0.001 vs Original", "greedy_acc", s * 0.05, s * 0.05 - 0.03, s * 0.05 + 0.03)
                for m, s in signs.items()]
        write(tmp_path, exp, rows)
        return claims.verdict(CLAIM["1.5B"], tmp_path, exp).word
    assert sweep("sigma_sweep", {"qwen2.5-0.5b-instruct": -1, "qwen2.5-7b-instruct": 1}) == "supported"
    assert sweep("sigma_sweep", {"qwen2.5-0.5b-instruct": 1, "qwen2.5-7b-instruct": 1}) == "contradicted"
    assert sweep("sigma_sweep", {"qwen2.5-1.5b-instruct": 0, "qwen2.5-7b-instruct": 1}) == "not detected"
    assert sweep("sigma_sweep_cpu", {"zoo-100k": -1, "zoo-1m": 0, "zoo-4m": 1}) == "supported"
    assert sweep("sigma_sweep_cpu", {"zoo-4m": -1, "zoo-100k": 1}) == "contradicted"   # ordered by size, not by row


def test_the_alternative_reading_takes_the_smallest_sigma_on_the_smallest_model(tmp_path):
    write(tmp_path, "sigma_sweep_cpu", [row("zoo-100k", "ES sigma=0.003 vs Original", "greedy_acc", 0.05, 0.01, 0.09),
                                       row("zoo-100k", "ES sigma=0.03 vs Original", "greedy_acc", -0.05, -0.09, -0.01),
                                       row("zoo-4m", "ES sigma=0.003 vs Original", "greedy_acc", -0.05, -0.09, -0.01)])
    v = claims.verdict(CLAIM["1.5B-alt"], tmp_path, "sigma_sweep_cpu")
    assert v.word == "supported" and len(v.rows) == 1 and "sigma=0.003" in v.rows[0]["comparison"]


def test_population_falls_with_scale(tmp_path):
    kind = "population N vs N=30"
    rows = [row("ladder-100k", "ES population=10 vs ES population=30", "greedy_acc", -0.05, -0.09, -0.01, kind=kind),
            row("ladder-750k", "ES population=10 vs ES population=30", "greedy_acc", -0.01, -0.04, 0.02, kind=kind)]
    write(tmp_path, "population_cpu", rows)
    assert claims.verdict(CLAIM["C7"], tmp_path, "population_cpu").word == "supported"
    write(tmp_path, "population_cpu", [dict(rows[0], model="ladder-750k"), dict(rows[1], model="ladder-100k")])
    assert claims.verdict(CLAIM["C7"], tmp_path, "population_cpu").word == "contradicted"


def test_analysis_only_claims_are_never_given_a_verdict(tmp_path):
    write(tmp_path, "quickstart", [row("zoo-1m", "ES vs base", "greedy_acc", 0.05, 0.01, 0.09)])
    v = claims.verdict(CLAIM["C5"], tmp_path, "quickstart")
    assert v.word.startswith("not decidable from comparisons") and "analysis.md" in v.word and not v.rows


def test_the_ledger_is_written_with_working_links(tmp_path):
    results = write(tmp_path / "results", "quickstart", [row("zoo-1m", "ES vs base", "greedy_acc", 0.05, 0.01, 0.09)])
    (results / "quickstart" / "analysis.md").write_text("# a\n")
    out = tmp_path / "docs" / "claims.md"
    assert claims.main(["--results", str(results), "--out", str(out)]) == 0
    text = out.read_text()
    assert "| Q1 |" in text and "quickstart: supported" in text and "qiu2025_table1: not run" in text
    assert "[results/quickstart/analysis.md](../results/quickstart/analysis.md)" in text
    assert "[comparisons.csv](../results/quickstart/comparisons.csv)" in text
    assert not list(out.parent.glob(".*.tmp"))


def test_every_experiment_named_exists():
    for c in claims.CLAIMS:
        for exp in (*c.cpu, *c.gpu):
            assert (ROOT / "conf" / "experiment" / f"{exp}.yaml").is_file(), (c.id, exp)
        assert bool(c.undecidable) != bool(c.rule), c.id          # a rule, or why none decides it


def test_only_rows_surviving_bh_and_holm_count(tmp_path):
    es = "ES vs Original"
    nominal = row("zoo-1m", es, "greedy_acc", 0.05, 0.01, 0.09, p=0.03, p_bh=0.107)   # interval excludes 0
    write(tmp_path, "qiu2025_table1_cpu", [nominal])
    v = verdict(tmp_path, "Q1")
    assert v.word == "not detected" and not v.uncorrected and "nominal only" in claims.quote(v.rows[0])
    assert "1 nominal only" in v.detail
    write(tmp_path, "qiu2025_table1_cpu", [dict(nominal, p_value=0.001, p_bh=0.01, result="detected")])
    assert verdict(tmp_path, "Q1").word == "supported"
    # two BH-surviving rows against the claim: p 0.03 each, Holm over the two gives 0.06: neither counts
    against = [row(m, es, "pass@1", -0.02, -0.04, -0.001, p=0.03, p_bh=0.04) for m in ("zoo-100k", "zoo-1m")]
    write(tmp_path, "qiu2025_table1_cpu", against)
    v = verdict(tmp_path, "C2")
    assert v.word == "not detected" and "2 detected in its file but not after Holm" in v.detail
    assert "Holm p = 0.060 over 2 rows" in claims.quote(v.rows[0])
    write(tmp_path, "qiu2025_table1_cpu", [dict(against[0], p_value=0.02), dict(against[1], p_value=0.5, p_bh=0.6)])
    assert verdict(tmp_path, "C2").word == "contradicted"                 # Holm: 2 x 0.02 = 0.04 <= 0.05


def test_holm_step_down():
    assert list(claims.holm([0.01, 0.04, 0.03])) == pytest.approx([0.03, 0.06, 0.06])
    adj = claims.holm([0.02, float("nan")])
    assert adj[0] == pytest.approx(0.02) and adj[1] != adj[1]


def test_a_file_without_p_is_uncorrected_and_says_so(tmp_path):
    results = tmp_path / "results"
    (results / "quickstart").mkdir(parents=True)
    old = {k: v for k, v in row("zoo-1m", "ES vs base", "greedy_acc", -0.05, -0.09, -0.01).items()
           if k not in ("p_value", "p_bh")}
    pd.DataFrame([old]).to_csv(results / "quickstart" / "comparisons.csv", index=False)   # no p_bh column
    v = claims.verdict(CLAIM["Q1"], results, "quickstart")
    assert v.word == "contradicted" and v.uncorrected and "by 95% interval alone" in v.detail
    out = tmp_path / "docs" / "claims.md"
    text = claims.ledger(results, out)
    assert "quickstart: contradicted (uncorrected)" in text
    assert "**contradicted** (uncorrected: records needed to apply BH)" in text


def test_not_testable_is_its_own_reason(tmp_path):
    same = dict(row("zoo-1m", "ES vs Original", "greedy_acc", 0.0, float("nan"), float("nan")), pairing="none",
                result="not testable: the two columns are identical (both 0.0 points on all 200 prompts)")
    write(tmp_path, "qiu2025_table1_cpu", [same])
    v = verdict(tmp_path, "Q1")
    assert v.word == "not testable" and "predate" not in v.detail and "not testable" in v.detail
    tested = row("zoo-100k", "ES vs Original", "greedy_acc", 0.05, 0.01, 0.09, p=0.001, p_bh=0.01)
    write(tmp_path, "qiu2025_table1_cpu", [tested, same])
    v = verdict(tmp_path, "Q1")
    assert v.word == "not detected" and "1 not testable" in v.detail and "predate" not in v.detail


def test_nominal_only_rows_decide_nothing_in_the_custom_rules(tmp_path):
    kind = "population N vs N=30"
    rows = [row("ladder-100k", "ES population=10 vs ES population=30", "greedy_acc", -0.01, -0.04, 0.02, kind=kind,
                pairing=SEED, p=0.4, p_bh=0.5),
            row("ladder-750k", "ES population=10 vs ES population=30", "greedy_acc", -0.088, -0.16, -0.017, kind=kind,
                pairing=SEED, p=0.034, p_bh=0.107)]
    write(tmp_path, "population_cpu", rows)
    v = claims.verdict(CLAIM["C7"], tmp_path, "population_cpu")
    assert v.word == "not detected" and "a nominal-only loss: BH p 0.107" in v.detail
    write(tmp_path, "scale_ladder_cpu", [
        row("ladder-100k", "ES sigma=0.003 vs Original", "greedy_acc", -0.05, -0.09, -0.01, pairing=SEED, p=0.001,
            p_bh=0.01),
        row("ladder-750k", "ES sigma=0.01 vs Original", "greedy_acc", 0.043, 0.017, 0.069, pairing=SEED, p=0.019,
            p_bh=0.060)])
    v = claims.verdict(CLAIM["1.5B"], tmp_path, "scale_ladder_cpu")
    assert v.word == "not detected" and "ladder-750k 0 (a nominal-only gain: BH p 0.060)" in v.detail
