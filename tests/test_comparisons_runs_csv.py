"""Seed-paired comparisons from a committed runs.csv (harness/reporting/comparisons.py).

    python -m pytest tests/test_comparisons_runs_csv.py -q
"""
import math

import numpy as np
import pandas as pd
import pytest

from harness.core.errors import UserError
from harness.reporting.comparisons import (SEED_ONLY, comparisons, comparisons_from_runs_csv, main, read_runs_csv,
                                           t_interval)
from harness.reporting.aggregate import aggregate
from harness.reporting.report import rebuild

COLS = ["index", "model", "seed", "cell", "column", "label", "grid", "point", "method", "key", "status", "error",
        "trains", "greedy_acc", "greedy_acc_lo", "greedy_acc_hi", "pass@1", "pass@1_lo", "pass@1_hi",
        "val:greedy_acc"]
BASE = {"greedy_acc": 0.20, "pass@1": 0.10}
PLANTED = {0: 0.30, 1: 0.335, 2: 0.315}          # ES full greedy: +10, +13.5, +11.5 points over base
NULL = {0: 0.31, 1: 0.315, 2: 0.325}              # a variant: -2, -2, +1 against ES full (greedy)


def run(model, seed, cell, label, greedy, pass1, method="es", trains=True, grid=None, point=None, val=None,
        status="ok"):
    return {"model": model, "seed": seed, "cell": cell, "column": grid or label, "label": label, "grid": grid,
            "point": repr(point or {}), "method": method, "key": f"{model}/{label}/seed{seed}", "status": status,
            "error": None, "trains": trains, "greedy_acc": greedy, "greedy_acc_lo": greedy - 0.05,
            "greedy_acc_hi": greedy + 0.05, "pass@1": pass1, "pass@1_lo": pass1 - 0.01, "pass@1_hi": pass1 + 0.01,
            "val:greedy_acc": val}


def synthetic(tmp_path, model="m"):
    """Base once; ES full (planted +10 points greedy) and a null variant, three seeds; a GRPO grid whose
    point better on validation is worse on test."""
    rows = [run(model, 0, "Original", "Original", BASE["greedy_acc"], BASE["pass@1"], method="base", trains=False)]
    for s in range(3):
        rows.append(run(model, s, "ES full", "ES full", PLANTED[s], 0.11 + 0.001 * s))
        rows.append(run(model, s, "ES sparse", "ES sparse", NULL[s], 0.11 + 0.002 * (s - 1)))
        rows.append(run(model, s, "GRPO", "GRPO lr=1", 0.40, 0.20, method="grpo", grid="GRPO", point={"lr": 1},
                        val=0.30))
        rows.append(run(model, s, "GRPO", "GRPO lr=2", 0.25 + 0.01 * s, 0.15 + 0.002 * s, method="grpo", grid="GRPO",
                        point={"lr": 2}, val=0.35))
    path = tmp_path / "runs.csv"
    pd.DataFrame([{**r, "index": i} for i, r in enumerate(rows)], columns=COLS).to_csv(path, index=False)
    return path


def row(df, comparison, metric="greedy_acc"):
    (r,) = df[(df["comparison"] == comparison) & (df["metric"] == metric)].itertuples()
    return r


def test_planted_difference_is_detected_with_the_hand_computed_t_interval(tmp_path):
    df = comparisons_from_runs_csv(synthetic(tmp_path), tmp_path / "out")
    r = row(df, "ES full vs Original")
    d = np.array([PLANTED[s] - BASE["greedy_acc"] for s in range(3)])  # the base ran once: it partners every seed
    mean, sd = d.mean(), math.sqrt(((d - d.mean()) ** 2).sum() / 2)
    half = 4.302653 * sd / math.sqrt(3)                                    # t_{0.975, 2} = 4.302653
    assert (r.difference, r.ci_low, r.ci_high) == pytest.approx((mean, mean - half, mean + half))
    assert r.result == "detected" and r.ci_low > 0 and r.n_seeds == 3 and r.kind == "trained vs base"
    assert r.pairing == "by seed (Student-t)" and r.note.startswith(SEED_ONLY)
    assert (r.difference, r.ci_low, r.ci_high) == pytest.approx(t_interval(d))
    # its p: the two-sided t-test on the same differences; t = 11.67 / (1.756 / sqrt 3) = 11.51 on 2 df; with
    # 2 df the t tail has a closed form, P(|T| > t) = 1 - t / sqrt(2 + t^2)
    t = mean / (sd / math.sqrt(3))
    assert r.p_value == pytest.approx(1 - t / math.sqrt(2 + t * t)) and r.p_value == pytest.approx(0.00747, abs=1e-5)


def test_benjamini_hochberg_runs_over_the_files_rows(tmp_path):
    """Every row with a p is one of m tests; a row is detected only when it survives BH at q = 0.05, and a
    p < 0.05 that does not survive reads "nominal only" in both files (the header counts them)."""
    df = comparisons_from_runs_csv(synthetic(tmp_path), tmp_path / "out")
    m = len(df)
    ranked = np.sort(df["p_value"].to_numpy())
    k = max([i + 1 for i, p in enumerate(ranked) if p <= 0.05 * (i + 1) / m], default=0)   # the step-up rule
    assert int((df["result"] == "detected").sum()) == k
    assert set(df.loc[df["p_value"] >= 0.05, "result"]) <= {"not detected"}
    assert (df.loc[df["result"] == "detected", "p_bh"] <= 0.05).all()
    nominal = df[(df["p_value"] < 0.05) & (df["result"] != "detected")]
    assert (nominal["result"] == "nominal only").all()
    findings = (tmp_path / "out" / "findings.md").read_text()
    assert f"m = {m} tests" in findings and f"0.05 x m = {0.05 * m:.1f}" in findings
    assert f"surviving Benjamini-Hochberg at q = 0.05: {k}." in findings


def test_null_difference_is_not_detected(tmp_path):
    df = comparisons_from_runs_csv(synthetic(tmp_path), tmp_path / "out")
    r = row(df, "ES sparse vs ES full")
    d = np.array([NULL[s] - PLANTED[s] for s in range(3)])
    assert r.kind == "variant vs full ES" and r.difference == pytest.approx(d.mean())
    assert r.ci_low < 0 < r.ci_high and r.result == "not detected"
    findings = (tmp_path / "out" / "findings.md").read_text()
    detected, not_detected = findings.split("## Not detected")
    assert "ES sparse vs ES full: not detected, " in not_detected and "ES sparse vs ES full" not in detected
    assert "m, greedy_acc: ES full vs Original differs by +11.7 points [" in detected


def test_the_comparison_set_is_the_reports_with_the_grid_chosen_on_validation(tmp_path):
    df = comparisons_from_runs_csv(synthetic(tmp_path), tmp_path / "out")
    grpo = "GRPO (chosen on validation: GRPO lr=2)"          # higher validation, lower test than lr=1
    assert set(zip(df["kind"], df["comparison"])) == {
        ("trained vs base", "ES full vs Original"), ("trained vs base", "ES sparse vs Original"),
        ("trained vs base", f"{grpo} vs Original"), ("ES vs RL", f"ES full vs {grpo}"),
        ("variant vs full ES", "ES sparse vs ES full")}
    assert set(df["metric"]) == {"greedy_acc", "pass@1"} and len(df) == 10
    r = row(df, f"ES full vs {grpo}")
    assert r.difference == pytest.approx(np.mean([PLANTED[s] - (0.25 + 0.01 * s) for s in range(3)]))


def test_every_row_and_both_headers_say_paired_by_seed_only(tmp_path):
    path = synthetic(tmp_path)
    comparisons_from_runs_csv(path, tmp_path / "out", title="synthetic", n_prompts=200)
    csv = pd.read_csv(tmp_path / "out" / "comparisons.csv")
    assert csv["note"].str.startswith(SEED_ONLY).all() and (csv["pairing"] == "by seed (Student-t)").all()
    assert (csv["n_prompts"] == 200).all()
    table = (tmp_path / "out" / "comparisons.md").read_text()
    findings = (tmp_path / "out" / "findings.md").read_text()
    for text in (table, findings):
        head = text.split("\n|")[0] if text is table else text.split("## Differences")[0]
        assert "Paired by seed only: the records predate per-prompt scores (rerun for prompt pairing)" in head
    body = [ln for ln in table.splitlines() if ln.startswith("| m |")]
    assert len(body) == 10 and all(SEED_ONLY in ln and "3 seeds / 200 prompts" in ln for ln in body)
    assert table.startswith("# synthetic: paired comparisons\n")


def test_fewer_than_two_paired_seeds_is_not_paired(tmp_path):
    path = synthetic(tmp_path)
    df = pd.read_csv(path)
    df.loc[(df["label"] == "ES sparse") & (df["seed"] > 0), "status"] = "failed"
    df.to_csv(path, index=False)
    out = comparisons_from_runs_csv(path, tmp_path / "out")
    r = row(out, "ES sparse vs ES full")
    assert r.pairing == "none" and math.isnan(r.difference) and r.result.startswith("not paired: 1 paired seed")
    findings = (tmp_path / "out" / "findings.md").read_text()
    assert "## Not paired" in findings and "ES sparse vs ES full: not paired" in findings.split("## Not paired")[1]


def test_it_agrees_with_the_reports_seed_rows_on_a_runs_csv_the_report_wrote(tmp_path):
    """Round trip: records -> report (runs.csv, comparisons.csv) -> runs.csv alone gives the same seed rows."""
    from tests.test_comparisons import put
    rng = np.random.default_rng(3)
    put(tmp_path, "base", "Original", (rng.random(100) < 0.3).astype(int), method="base", trains=False)
    for s in range(3):
        put(tmp_path, f"es{s}", "ES", (rng.random(100) < 0.5).astype(int), seed=s)
        for lr, val in ((1, 0.5), (2, 0.75)):
            put(tmp_path, f"g{lr}{s}", f"GRPO lr={lr}", (rng.random(100) < 0.4).astype(int), method="grpo", seed=s,
                grid="GRPO", point={"lr": lr}, val=val)
    rebuild(tmp_path, tmp_path / "out")
    report = pd.read_csv(tmp_path / "out" / "comparisons.csv")
    report = report[report["pairing"] == "by seed (Student-t)"].reset_index(drop=True)
    mine = comparisons_from_runs_csv(tmp_path / "out" / "runs.csv", tmp_path / "mine", n_prompts=100)
    assert len(report) == len(mine) == 3  # ES and GRPO vs base, ES vs GRPO (greedy only)
    for col in ("model", "kind", "comparison", "metric", "n_seeds", "n_prompts", "pairing", "result"):
        assert list(report[col]) == list(mine[col]), col
    for col in ("difference", "ci_low", "ci_high"):
        assert list(report[col]) == pytest.approx(list(mine[col]))
    assert list(comparisons(aggregate(tmp_path))["comparison"].unique()) == list(mine["comparison"].unique())


def test_command_line_and_bad_input(tmp_path, capsys):
    path = synthetic(tmp_path)
    assert main([str(path), "--out", str(tmp_path / "cli")]) == 0
    csv = pd.read_csv(tmp_path / "cli" / "comparisons.csv")
    detected, nominal = int((csv["result"] == "detected").sum()), int((csv["p_value"] < 0.05).sum())
    assert (f"10 comparisons, m = 10 tests, {nominal} nominal (p < 0.05), {detected} detected (Benjamini-Hochberg, "
            "q = 0.05), 0 not paired") in capsys.readouterr().out and 0 < detected <= nominal < 10
    assert sorted(p.name for p in (tmp_path / "cli").iterdir()) == ["comparisons.csv", "comparisons.md", "findings.md"]
    assert main([str(path), "--n-prompts", "7", "--out", str(tmp_path / "bad")]) == 2   # 0.2 is not k/7
    assert "does not fit these runs" in capsys.readouterr().err and not (tmp_path / "bad").exists()
    assert main([str(tmp_path / "nope.csv")]) == 2
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    with pytest.raises(UserError, match="not a runs.csv"):
        read_runs_csv(tmp_path / "x.csv")
