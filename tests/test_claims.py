"""The claims ledger (harness/reporting/claims.py) on synthetic comparisons.csv files: each verdict from its rows."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from harness.reporting import claims
from harness.reporting.claim_rows import roles, with_roles
from harness.reporting.comparisons import COLUMNS
from harness.reporting.roles import declared as roles_declared, role_of

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
    """Q4 (robust across models) is decided per model, unlike Q1's average."""
    write(tmp_path, "qiu2025_table1_cpu", [row("zoo-100k", "ES vs Original", "greedy_acc", 0.05, 0.01, 0.09),
                                          row("zoo-1m", "ES vs Original", "greedy_acc", 0.01, -0.02, 0.04)])
    assert verdict(tmp_path, "Q4").word == "not detected"
    write(tmp_path, "qiu2025_table1_cpu", [row("zoo-100k", "ES vs Original", "greedy_acc", 0.05, 0.01, 0.09),
                                          row("zoo-1m", "ES vs Original", "greedy_acc", -0.05, -0.09, -0.01)])
    assert verdict(tmp_path, "Q4").word == "contradicted"
    assert verdict(tmp_path, "Q1").word == "not detected"            # their mean, 0.0 [-5.0, +5.0], spans 0


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
    v = claims.verdict(CLAIM["C9"], tmp_path, "es_variants_cpu")
    assert v.word == "not decidable from comparisons" and not v.rows     # against base decides nothing now
    rows = with_roles(pd.read_csv(tmp_path / "es_variants_cpu" / "comparisons.csv"), roles("es_variants_cpu"))
    assert list(rows["_a_role"]) == ["es_then_grpo", "grpo_then_es", "grpo_then_es"]   # declared in the file
    assert claims.select(rows, claims.Check("trained vs base", claims.ES, "pass@1")).empty


def test_cells_are_matched_by_their_declared_role_never_by_their_label():
    declared = roles_declared({"cells": [
        {"label": "Original", "role": "base"}, {"label": "ES", "role": "es_sweep", "axes": {"method.sigma": [0.003]}},
        {"label": "ES alpha tied", "role": "es_tied", "axes": {"method.sigma": [0.003]}},
        {"label": "Adam-free", "role": "es"}, {"label": "GRPO-LoRA", "role": "grpo_lora"}, {"label": "ES full"}]})
    assert role_of("ES sigma=0.003", declared) == "es_sweep"          # a point of the cell "ES"
    assert role_of("ES alpha tied sigma=0.003", declared) == "es_tied"  # not "ES" at a point "alpha tied ..."
    assert role_of("Adam-free", declared) == "es" and role_of("GRPO-LoRA", declared) == "grpo_lora"
    assert role_of("ES full", declared) == ""                          # declares no role: in no claim's rows
    assert role_of("ES population=10", declared) == ""                 # "ES" has no population axis
    df = pd.DataFrame([row("m", "Adam-free vs Original", "greedy_acc", 0.05, 0.01, 0.09),
                       row("m", "ES sigma=0.01 vs Original", "greedy_acc", 0.05, 0.01, 0.09)])
    picked = claims.select(with_roles(df, declared), claims.Check("trained vs base", claims.ES, "greedy_acc"))
    assert list(picked["comparison"]) == ["Adam-free vs Original"]


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


def test_the_alternative_reading_chooses_the_sigma_on_validation(tmp_path):
    """On the smallest model, among sigmas at or below its fixed one (zoo-100k: 1e-2, conf/model), the sigma with
    the best validation score is tested against base; without validation scores nothing is chosen."""
    write(tmp_path, "sigma_sweep_cpu", [row("zoo-100k", "ES sigma=0.003 vs Original", "greedy_acc", 0.05, 0.01, 0.09),
                                       row("zoo-100k", "ES sigma=0.01 vs Original", "greedy_acc", 0.0, -0.04, 0.04),
                                       row("zoo-100k", "ES sigma=0.03 vs Original", "greedy_acc", 0.09, 0.05, 0.13),
                                       row("zoo-4m", "ES sigma=0.003 vs Original", "greedy_acc", -0.05, -0.09, -0.01)])
    v = claims.verdict(CLAIM["1.5B-alt"], tmp_path, "sigma_sweep_cpu")
    assert v.word == "not testable" and "were not scored on validation" in v.detail
    assert "eval_splits=[validation,test]" in v.detail and "0.03" not in v.detail  # above 1e-2: never a candidate

    def table(vals):
        pd.DataFrame([{"model": "zoo-100k", "column": c, "val": x} for c, x in vals.items()]).to_csv(
            tmp_path / "sigma_sweep_cpu" / "table.csv", index=False)
        return claims.verdict(CLAIM["1.5B-alt"], tmp_path, "sigma_sweep_cpu")
    v = table({"Original": None, "ES sigma=0.003": 0.40, "ES sigma=0.01": 0.35, "ES sigma=0.03": 0.90})
    assert v.word == "supported" and len(v.rows) == 1 and "sigma=0.003" in v.rows[0]["comparison"]
    assert "sigma 0.003 chosen on validation (40.0) among 0.003, 0.01 (at or below zoo-100k's fixed sigma 0.01)" in v.detail
    v = table({"ES sigma=0.003": 0.30, "ES sigma=0.01": 0.35})      # validation prefers 1e-2, which shows nothing
    assert v.word == "not detected" and "sigma=0.01" in v.rows[0]["comparison"]


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
    results = write(tmp_path / "results", "quickstart",
                    [row("zoo-1m", "ES sigma=1e-2 (zoo set) vs base", "greedy_acc", 0.05, 0.01, 0.09)])
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
    old = {k: v for k, v in row("zoo-1m", "ES sigma=1e-2 (zoo set) vs base", "greedy_acc", -0.05, -0.09, -0.01).items()
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
    v = verdict(tmp_path, "Q4")
    assert v.word == "not detected" and "1 not testable" in v.detail and "predate" not in v.detail
    v = verdict(tmp_path, "Q1")                       # a model without an interval leaves no average to test
    assert v.word == "not testable" and "no average: zoo-1m has no interval (not testable" in claims.quote(v.rows[0])


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


# ---- the restated rules: hand-made rows, values computed by hand

def test_q1_is_decided_on_the_mean_over_models(tmp_path):
    """Means 4 and 2 points, 95% half-widths 3 and 4: mean 3.0, half-width 1.96 x sqrt(1.53^2 + 2.04^2) / 2 =
    sqrt(3^2 + 4^2) / 2 = 2.5 points, so [+0.5, +5.5]: supported, though zoo-1m's own row spans 0 (Q4 is not)."""
    write(tmp_path, "qiu2025_table1_cpu", [row("zoo-100k", "ES vs Original", "greedy_acc", 0.04, 0.01, 0.07),
                                          row("zoo-1m", "ES vs Original", "greedy_acc", 0.02, -0.02, 0.06)])
    v = verdict(tmp_path, "Q1")
    assert v.word == "supported" and not v.uncorrected
    mean = v.rows[0]
    assert mean["difference"] == pytest.approx(0.03) and mean["ci_low"] == pytest.approx(0.005, abs=1e-9)
    assert mean["ci_high"] == pytest.approx(0.055, abs=1e-9)
    assert "mean over 2 models (zoo-100k, zoo-1m), greedy_acc, ES vs Original: +3.0 points [+0.5, +5.5]" in \
        claims.quote(mean)
    assert "normal p = 0.019" in claims.quote(mean)                  # z = 0.03 / 0.012755 = 2.352
    assert [r["model"] for r in v.rows[1:]] == ["zoo-100k", "zoo-1m"]  # the rows it came from, listed beneath
    assert verdict(tmp_path, "Q4").word == "not detected"
    write(tmp_path, "qiu2025_table1_cpu", [row("zoo-100k", "ES vs Original", "greedy_acc", -0.04, -0.07, -0.01),
                                          row("zoo-1m", "ES vs Original", "greedy_acc", -0.02, -0.06, 0.02)])
    assert verdict(tmp_path, "Q1").word == "contradicted"             # [-5.5, -0.5]


def test_q3_averages_each_grpo_column_apart_with_holm_over_the_columns(tmp_path):
    """Means 3.2 and 2.0 (half-widths 3 and 4): mean 2.6, SE 1.2755, z = 2.038, p = 0.042: detected for one column,
    not for two identical ones (Holm: 2 x 0.042 = 0.083); GRPO-LoRA and GRPO then ES are not GRPO columns."""
    def grpo(col, model, d, lo, hi):
        return row(model, f"{col} (chosen on validation: {col} beta=0.001) vs Original", "greedy_acc", d, lo, hi)
    g8 = [grpo("GRPO(8)", "zoo-100k", 0.032, 0.002, 0.062), grpo("GRPO(8)", "zoo-1m", 0.02, -0.02, 0.06)]
    noise = [grpo("GRPO-LoRA", "zoo-1m", -0.2, -0.3, -0.1), row("zoo-1m", "GRPO then ES vs Original", "greedy_acc",
                                                                -0.2, -0.3, -0.1)]
    write(tmp_path, "qiu2025_table1_cpu", g8 + noise)
    v = verdict(tmp_path, "Q3")
    assert v.word == "supported" and "normal p = 0.042" in claims.quote(v.rows[0])
    g30 = [dict(r, comparison=r["comparison"].replace("GRPO(8)", "GRPO(30)")) for r in g8]
    write(tmp_path, "qiu2025_table1_cpu", g8 + g30 + noise)
    v = verdict(tmp_path, "Q3")
    assert v.word == "not detected" and "Holm p = 0.083 over 2 columns" in claims.quote(v.rows[0])
    assert "p < 0.05, not after Holm" in claims.quote(v.rows[0])


def test_q1_with_one_model_is_that_models_row(tmp_path):
    write(tmp_path, "qiu2025_table1_cpu", [row("zoo-1m", "ES vs Original", "greedy_acc", 0.02, -0.01, 0.05)])
    v = verdict(tmp_path, "Q1")
    assert v.word == "not detected" and len(v.rows) == 1 and v.rows[0]["model"] == "zoo-1m" and v.uncorrected


VARIANTS = ("ES antithetic", "GRPO then ES", "ES norms only", "ES then GRPO", "ES population=10", "GRPO-LoRA")


@pytest.mark.parametrize("claim", ["Q1", "C1", "C2"])
def test_variant_and_sequential_labels_never_decide_es_or_grpo_claims(tmp_path, claim):
    grpo = "GRPO(8) (chosen on validation: GRPO(8) beta=0.001 learning_rate=3e-05) vs Original"
    rows = [row(m, "ES vs Original", k, 0.01, -0.01, 0.03) for m in ("zoo-100k", "zoo-1m")
            for k in ("greedy_acc", "pass@1", "pass@16")]
    rows += [row(m, grpo, "pass@1", 0.05, 0.02, 0.08) for m in ("zoo-100k", "zoo-1m")]
    rows += [row(m, grpo, "pass@16", -0.01, -0.03, 0.01) for m in ("zoo-100k", "zoo-1m")]
    write(tmp_path, "qiu2025_table1_cpu", rows)
    before = verdict(tmp_path, claim)
    extra = [row(m, f"{label} vs Original", k, d, d - 0.02, d + 0.02) for m in ("zoo-100k", "zoo-1m")
             for label in VARIANTS for k in ("greedy_acc", "pass@1", "pass@16") for d in (0.2, -0.2)]
    write(tmp_path, "qiu2025_table1_cpu", rows + extra)
    after = verdict(tmp_path, claim)
    assert [(r["model"], r["comparison"], r["metric"]) for r in after.rows] == \
        [(r["model"], r["comparison"], r["metric"]) for r in before.rows]
    assert after.word == before.word and after.rows


def test_c1_counts_models_below_base_against_15_of_18(tmp_path):
    grpo = "GRPO vs base"
    models = ("zoo-100k", "zoo-1m", "zoo-4m")

    def passk(signs, one=1):
        rows = [row(m, grpo, "pass@1", one * 0.05, one * 0.05 - 0.02, one * 0.05 + 0.02) for m in models]
        rows += [row(m, grpo, "pass@16", s * 0.05, s * 0.05 - 0.02, s * 0.05 + 0.02) if s else
                 row(m, grpo, "pass@16", 0.0, -0.02, 0.02) for m, s in zip(models, signs)]
        write(tmp_path, "quickstart", rows)
        return claims.verdict(CLAIM["C1"], tmp_path, "quickstart")
    v = passk((-1, -1, 0))                       # 2 of 3 below: a majority, where "every model" said not detected
    assert v.word == "supported" and "pass@16 detected below base on 2 of 3" in v.detail and "15 of 18" in v.detail
    assert "pass@1 detected above base on 3 of 3 models" in v.detail
    assert passk((-1, 0, 0)).word == "not detected"                  # 1 of 3
    assert passk((1, 1, -1)).word == "contradicted"                  # above base on a majority
    assert passk((-1, -1, -1), one=-1).word == "contradicted"        # pass@1 below base


@pytest.mark.parametrize("high, p, word", [(0.009, None, "supported"), (0.01, None, "not detected"),
                                           (0.011, None, "not detected"), (0.06, 0.001, "contradicted")])
def test_c8_is_non_superiority_within_one_point(tmp_path, high, p, word):
    """Supported when every upper 95% bound is below +1 point (strictly); an interval spanning 0 with a higher
    upper bound is not evidence of no gain; a row detected above full ES contradicts."""
    kind = "variant vs full ES"
    other = row("ladder-100k", "ES antithetic vs ES full", "greedy_acc", -0.01, -0.03, 0.005, kind=kind, pairing=SEED,
                p=0.3 if p else None, p_bh=0.4 if p else None)
    lo = 0.02 if p else -0.03
    mine = row("ladder-300k", "ES antithetic vs ES full", "greedy_acc", (lo + high) / 2, lo, high, kind=kind,
               pairing=SEED, p=p, p_bh=0.01 if p else None)
    distractor = row("ladder-300k", "ES antithetic vs Original", "greedy_acc", 0.2, 0.1, 0.3, pairing=SEED)
    write(tmp_path, "es_variants_cpu", [other, mine, dict(distractor, p_value=p, p_bh=0.01 if p else None)])
    v = claims.verdict(CLAIM["C8"], tmp_path, "es_variants_cpu")
    assert v.word == word and len(v.rows) == 2
    if word != "contradicted":
        assert "below the +1-point margin on" in v.detail


@pytest.fixture
def with_grpo(tmp_path, monkeypatch):
    """conf/ with es_variants_cpu given a GRPO grid (role grpo), which the committed file does not have."""
    from harness.reporting import claim_rows
    conf = tmp_path / "conf" / "experiment"
    conf.mkdir(parents=True)
    spec = (ROOT / "conf" / "experiment" / "es_variants_cpu.yaml").read_text()
    (conf / "es_variants_cpu.yaml").write_text(spec + "\ngrids:\n  - {name: GRPO, role: grpo, overrides: [method=grpo]}\n")
    monkeypatch.setattr(claim_rows, "CONF", tmp_path / "conf")


@pytest.mark.parametrize("low, word", [(-0.009, "supported"), (-0.011, "not detected"), (-0.05, "contradicted")])
def test_c9_is_non_inferiority_to_grpo_and_to_es_within_one_point(tmp_path, with_grpo, low, word):
    """GRPO then ES against GRPO on pass@1 and against ES full on the largest pass@k: lower bounds above -1 point
    support it; one detected below (here [-5.0, -3.0] points) contradicts; its rows against base decide nothing."""
    high = -0.03 if word == "contradicted" else 0.02
    rows = [row("ladder-100k", "GRPO then ES vs GRPO", "pass@1", (low + high) / 2, low, high, kind="sequential vs RL"),
            row("ladder-100k", "GRPO then ES vs ES full", "pass@16", 0.01, -0.005, 0.025, kind="variant vs full ES"),
            row("ladder-100k", "GRPO then ES vs Original", "pass@1", -0.2, -0.3, -0.1),
            row("ladder-100k", "GRPO then ES vs ES full", "pass@4", -0.2, -0.3, -0.1, kind="variant vs full ES")]
    write(tmp_path, "es_variants_cpu", rows)
    v = claims.verdict(CLAIM["C9"], tmp_path, "es_variants_cpu")
    assert v.word == word
    assert [(r["comparison"], r["metric"]) for r in v.rows] == [("GRPO then ES vs GRPO", "pass@1"),
                                                                ("GRPO then ES vs ES full", "pass@16")]


def test_c9_without_a_grpo_comparison_names_it(tmp_path):
    es_side = row("ladder-100k", "GRPO then ES vs ES full", "pass@16", 0.01, -0.005, 0.025, kind="variant vs full ES")
    write(tmp_path, "es_variants_cpu", [es_side])
    v = claims.verdict(CLAIM["C9"], tmp_path, "es_variants_cpu")
    assert v.word == "not decidable from comparisons"
    assert "no 'GRPO then ES vs GRPO' row on pass@1" in v.detail and "no GRPO cell" in v.detail
    write(tmp_path, "es_variants_cpu", [dict(es_side, difference=-0.05, ci_low=-0.07, ci_high=-0.03)])
    assert claims.verdict(CLAIM["C9"], tmp_path, "es_variants_cpu").word == "contradicted"   # one end already lost


def test_c7_uses_the_half_point_criterion_where_the_rows_allow_it(tmp_path):
    """N=10 within 0.5 points of N=30 at 0.75M (lower bound -0.4) and detected below it at 0.1M: supported; the
    other way round: contradicted. This file matches FLOPs, the note updates, and the verdict says so."""
    kind, comp = "population N vs N=30", "ES population=10 vs ES population=30"
    short = row("ladder-100k", comp, "greedy_acc", -0.05, -0.09, -0.01, kind=kind, pairing=SEED)
    enough = row("ladder-750k", comp, "greedy_acc", 0.005, -0.004, 0.014, kind=kind, pairing=SEED)
    write(tmp_path, "population_cpu", [short, enough])
    v = claims.verdict(CLAIM["C7"], tmp_path, "population_cpu")
    assert v.word == "supported" and "ladder-750k: N = 10 within 0.5 points" in v.detail
    assert "cannot be applied" not in v.detail and "matches FLOPs where NOTE-076 matches updates" in v.detail
    write(tmp_path, "population_cpu", [dict(short, model="ladder-750k"), dict(enough, model="ladder-100k")])
    assert claims.verdict(CLAIM["C7"], tmp_path, "population_cpu").word == "contradicted"
    write(tmp_path, "population_cpu", [short, dict(enough, ci_low=-0.006)])   # -0.6: the weaker reading decides
    v = claims.verdict(CLAIM["C7"], tmp_path, "population_cpu")
    assert v.word == "supported" and "cannot be applied" in v.detail and "weaker reading" in v.detail
    write(tmp_path, "population", [short, enough])                       # the GPU file matches updates
    assert "matches FLOPs" not in claims.verdict(CLAIM["C7"], tmp_path, "population", gpu=True).detail


def test_every_verdict_line_says_what_it_came_from(tmp_path):
    results = write(tmp_path / "results", "population_cpu", [
        row(m, "ES population=10 vs ES population=30", "greedy_acc", -0.01, -0.04, 0.02,
            kind="population N vs N=30", pairing=SEED) for m in ("ladder-100k", "ladder-750k")])
    v = claims.verdict(CLAIM["C7"], results, "population_cpu")
    assert v.basis == ("models ladder-100k, ladder-750k; 3 seeds; 200 test prompts; paired by seed (Student-t); "
                       "budget: flops (equal FLOPs)")
    text = claims.ledger(results, tmp_path / "docs" / "claims.md")
    assert f"**not detected** (uncorrected: records needed to apply BH): {v.detail}. From {v.basis} ([" in text
    assert claims.budget("population") == {"kind": "updates", "updates": 300, "own": True}
    assert claims.budget_text(claims.budget("population")) == \
        "budget: updates (300 updates a run; some cells set their own: read the file)"


def test_every_cell_of_a_file_the_ledger_reads_declares_its_role():
    """A cell without a role is in no claim's rows, silently: every file a claim names declares one everywhere."""
    import yaml
    for exp in sorted({e for c in claims.CLAIMS for e in (*c.cpu, *c.gpu)}):
        spec = yaml.safe_load((ROOT / "conf" / "experiment" / f"{exp}.yaml").read_text())
        missing = [e.get("label", e.get("name")) for e in (spec.get("cells") or []) + (spec.get("grids") or [])
                   if not e.get("role")]
        assert not missing, f"conf/experiment/{exp}.yaml: no role on {missing}"


def test_the_committed_ledger_is_what_the_committed_results_give(tmp_path):
    """docs/claims.md regenerates identically from results/ (a change to a rule, a role or a folder that is not
    followed by `python -m harness.reporting.claims` fails here)."""
    out = ROOT / "docs" / "claims.md"
    assert claims.ledger(ROOT / "results", out) == out.read_text()


def test_the_claims_file_is_data_and_a_bad_entry_names_itself(tmp_path):
    """conf/claims.yaml declares the claims; an unknown rule or source fails naming the claim and the choices."""
    assert [c.id for c in claims.load_claims()][:3] == ["Q1", "Q2", "Q3"] and len(claims.CLAIMS) == 21
    bad = tmp_path / "claims.yaml"
    bad.write_text("sources: {s: S}\nclaims:\n  - {id: X1, source: s, text: t, decide: {rule: avarage}}\n")
    with pytest.raises(ValueError, match="claim 'X1': no rule 'avarage'; one of averaged, boundary"):
        claims.load_claims(bad)
    bad.write_text("sources: {s: S}\nclaims:\n  - {id: X2, source: q, text: t}\n")
    with pytest.raises(ValueError, match="claim 'X2'.*source 'q' \\(sources: s\\)"):
        claims.load_claims(bad)
