"""Paired comparisons (harness/reporting/comparisons.py) and the per-prompt scores they pair.

    python -m pytest tests/test_comparisons.py -q
"""
import math

import numpy as np
import pytest

from harness.core.records import Manifest, Record, write_record
from harness.evaluation.metrics import pass_at_k, per_prompt_values, prompt_set_id
from harness.reporting.aggregate import aggregate
from harness.reporting.comparisons import (ONE_SEED, PromptSetMismatch, comparisons, pairs, paired_bootstrap,
                                           t_interval)
from harness.reporting.stats import MAX_BOOT, MC_TARGET, N_BOOT, newcombe_paired
from harness.reporting.report import rebuild
from harness.reporting.findings import DESCRIPTIVE, DETECTED, NOMINAL, NOT_DETECTED

PROMPTS = prompt_set_id([f"prompt {i}" for i in range(100)])


def entry(values, prompts=PROMPTS, per_prompt=True):
    v = [int(x) for x in values]
    m = float(np.mean(v))
    e = {"mean": m, "ci_low": m - 0.05, "ci_high": m + 0.05, "n": len(v)}
    return {**e, "prompts": prompts, "per_prompt": v} if per_prompt else e


def passk(counts, n=4, prompts=PROMPTS):
    m = float(np.mean([pass_at_k(n, c, 1) for c in counts]))
    return {"mean": m, "ci_low": m, "ci_high": m, "n": len(counts), "prompts": prompts, "correct": list(counts),
            "n_samples": n}


def put(root, name, label, greedy, method="es", seed=0, trains=True, grid=None, point=None, val=None, **kw):
    metrics = {"test": {"greedy_acc": entry(greedy, **kw)}}
    if val is not None:
        metrics["validation"] = {"greedy_acc": entry([val] * 4, prompts="v")}
    write_record(root / name, Record(status="ok", label=label, model="zoo-1m", method=method, trains=trains, seed=seed,
                                     grid=grid, cell=grid or label.split(" ")[0] if point else grid or label,
                                     point=point or {}, metrics=metrics, started_at=len(name)))


def planted():
    base = np.zeros(100, int)
    base[:50] = 1
    trained = np.zeros(100, int)
    trained[:80] = 1
    return base, trained


def test_a_planted_difference_is_detected_by_prompt_pairing(tmp_path):
    base, trained = planted()
    put(tmp_path, "a", "Original", base, method="base", trains=False)
    put(tmp_path, "b", "ES", trained)
    df = comparisons(aggregate(tmp_path))
    (row,) = df.itertuples()
    assert row.kind == "trained vs base" and row.comparison == "ES vs Original" and row.metric == "greedy_acc"
    assert row.difference == pytest.approx(0.30) and row.ci_low > 0.15 and row.result == "detected"
    assert row.pairing == "by prompt (exact McNemar)" and row.n_prompts == 100 and row.n_seeds == 1
    assert (row.n_up, row.n_down) == (30, 0) and row.p_value == pytest.approx(2 * 0.5 ** 30)  # 0/1: exact test
    assert (row.ci_low, row.ci_high) == pytest.approx(newcombe_paired(50, 30, 0, 20)[1:])
    assert row.note == ONE_SEED  # one seed: the table says it is paired by prompt only
    rebuild(tmp_path, tmp_path / "out")
    findings = (tmp_path / "out" / "findings.md").read_text()
    detected, not_detected = findings.split("## Not detected")
    assert "ES vs Original differs by +30.0 points [" in detected and "None." in not_detected
    assert "exact McNemar, 30 up / 0 down, 1 seed / 100 prompts; p = 1.9e-09" in detected
    table = (tmp_path / "out" / "comparisons.md").read_text()
    assert "paired by prompt only" in table and "detected" in table
    assert "ES vs Original" in (tmp_path / "out" / "comparisons.csv").read_text()


def test_a_null_difference_is_not_detected(tmp_path):
    rng = np.random.default_rng(0)
    base = (rng.random(100) < 0.5).astype(int)
    trained = base.copy()
    flip = rng.choice(100, 6, replace=False)  # noise: three prompts gained, three lost
    trained[flip] = 1 - trained[flip]
    put(tmp_path, "a", "Original", base, method="base", trains=False)
    put(tmp_path, "b", "ES", trained)
    (row,) = comparisons(aggregate(tmp_path)).itertuples()
    assert row.ci_low < 0 < row.ci_high and row.result == "not detected"
    rebuild(tmp_path, tmp_path / "out")
    detected, not_detected = (tmp_path / "out" / "findings.md").read_text().split("## Not detected")
    assert "None." in detected and "ES vs Original: not detected, " in not_detected and "[" in not_detected


def test_seed_pairing_matches_a_hand_computed_t_interval(tmp_path):
    rng = np.random.default_rng(1)
    es, grpo = {}, {}
    for s in range(3):
        es[s] = (rng.random(100) < 0.6 + 0.05 * s).astype(int)
        grpo[s] = (rng.random(100) < 0.4).astype(int)
        put(tmp_path, f"es{s}", "ES", es[s], seed=s)
        put(tmp_path, f"grpo{s}", "GRPO lr=1", grpo[s], method="grpo", seed=s, grid="GRPO", point={"lr": 1}, val=0.5)
    df = comparisons(aggregate(tmp_path))
    rows = df[df["kind"] == "ES vs RL"]
    # first the seed-level row (the test), then the crossed seed x prompt row and the prompt row, both
    # descriptive (not in m); seeds averaged per prompt are not 0/1 (thirds): the prompt row is bootstrapped
    assert list(rows["pairing"]) == ["by seed (Student-t)", "by seed and prompt (crossed bootstrap)",
                                     "by prompt (paired bootstrap)"]
    assert list(rows["result"].iloc[1:]) == [DESCRIPTIVE] * 2 and rows["p_bh"].iloc[1:].isna().all()
    assert rows["result"].iloc[0] in (DETECTED, NOMINAL, NOT_DETECTED) and rows["p_bh"].iloc[0] == rows["p_bh"].iloc[0]
    crossed = rows.iloc[1]
    assert crossed["difference"] == pytest.approx(np.mean([es[s] - grpo[s] for s in range(3)]))
    assert crossed["n_seeds"] == 3 and "3 seeds: few to resample" in crossed["note"]
    seed = rows.iloc[0]
    rows = rows.iloc[[2, 0]]
    boot = rows.iloc[0]   # thirds on 100 prompts: a bound on a step of the lattice may stop at MAX_BOOT above target
    assert boot["n_boot"] >= N_BOOT and (boot["mc_error"] < MC_TARGET or boot["n_boot"] == MAX_BOOT)
    assert rows.iloc[0]["comparison"] == "ES vs GRPO (chosen on validation: GRPO lr=1)"
    assert "3 seeds: the interval leans on normality" in seed["note"]
    d = np.array([es[s].mean() - grpo[s].mean() for s in range(3)])
    half = 4.302653 * d.std(ddof=1) / math.sqrt(3)
    assert seed["difference"] == pytest.approx(d.mean()) and seed["n_seeds"] == 3
    assert (seed["ci_low"], seed["ci_high"]) == pytest.approx((d.mean() - half, d.mean() + half))
    by_prompt = rows.iloc[0]
    ma, mb = np.mean([es[s] for s in range(3)], 0), np.mean([grpo[s] for s in range(3)], 0)
    assert (by_prompt["difference"], by_prompt["ci_low"], by_prompt["ci_high"]) == pytest.approx(paired_bootstrap(ma, mb))
    assert t_interval(d) == pytest.approx((seed["difference"], seed["ci_low"], seed["ci_high"]))


def rows_b1(trained):
    return np.roll(trained, 1) * (np.arange(100) > 5)


def test_an_unseeded_base_partners_every_seed(tmp_path):
    base, trained = planted()
    put(tmp_path, "a", "Original", base, method="base", trains=False)
    put(tmp_path, "b0", "ES", trained, seed=0)
    put(tmp_path, "b1", "ES", np.roll(trained, 1) * (np.arange(100) > 5), seed=1)
    rows = comparisons(aggregate(tmp_path))
    seed, crossed = rows.iloc[0], rows.iloc[1]
    assert seed["pairing"] == "by seed (Student-t)" and seed["n_seeds"] == 2
    assert crossed["pairing"] == "by seed and prompt (crossed bootstrap)" and crossed["n_seeds"] == 2
    assert crossed["difference"] == pytest.approx(np.mean([trained - base, rows_b1(trained) - base]))


def test_runs_on_different_prompt_sets_are_refused_in_one_line(tmp_path):
    base, trained = planted()
    put(tmp_path, "a", "Original", base, method="base", trains=False, prompts=prompt_set_id(["x"] * 100))
    put(tmp_path, "b", "ES", trained)
    with pytest.raises(PromptSetMismatch, match="different test prompt sets") as e:
        comparisons(aggregate(tmp_path))
    assert "\n" not in str(e.value)
    rebuild(tmp_path, tmp_path / "out")  # the other tables are still written; the comparisons say why not
    assert "refusing to pair ES vs Original" in (tmp_path / "out" / "comparisons.md").read_text()


def test_old_records_without_per_prompt_scores_say_so(tmp_path):
    base, trained = planted()
    put(tmp_path, "a", "Original", base, method="base", trains=False, per_prompt=False)
    put(tmp_path, "b", "ES", trained, per_prompt=False)
    (row,) = comparisons(aggregate(tmp_path)).itertuples()
    assert row.pairing == "none" and math.isnan(row.difference)
    assert row.result.startswith("no per-prompt scores in these records (made before") and "rerun to pair" in row.result
    rebuild(tmp_path, tmp_path / "out")
    assert "## Not paired" in (tmp_path / "out" / "findings.md").read_text()


def test_pass_at_k_is_paired_from_stored_counts(tmp_path):
    for name, label, counts, method in (("a", "Original", [0] * 50 + [2] * 50, "base"), ("b", "ES", [4] * 100, "es")):
        write_record(tmp_path / name, Record(status="ok", label=label, model="zoo-1m", method=method,
                                             trains=method != "base", seed=0,
                                             metrics={"test": {"pass@1": passk(counts)}}))
    (row,) = comparisons(aggregate(tmp_path)).itertuples()
    assert row.metric == "pass@1" and row.difference == pytest.approx(0.75) and row.result == "detected"


def test_variants_and_population_rules(tmp_path):
    g = [1, 0] * 50
    put(tmp_path, "a", "Original", g, method="base", trains=False)
    put(tmp_path, "b", "ES full", g)
    put(tmp_path, "c", "ES last layer", g)
    put(tmp_path, "d", "GRPO then ES", g, method="sequential")
    for n in (10, 30):
        put(tmp_path, f"p{n}", f"ES population={n}", g, point={"method.population": n})
    got = {(k, a["label"], b["label"]) for k, a, b in pairs(aggregate(tmp_path)["main"])}
    assert ("variant vs full ES", "ES last layer", "ES full") in got
    assert ("variant vs full ES", "GRPO then ES", "ES full") in got
    assert ("population N vs N=30", "ES population=10", "ES population=30") in got
    assert ("trained vs base", "ES full", "Original") in got
    assert not any(k == "variant vs full ES" and "population" in a for k, a, _ in got)


def test_evaluate_stores_per_prompt_scores_consistent_with_its_aggregates():
    from harness.core.policy import load_policy
    from harness.evaluation.evaluate import EvalConfig, evaluate
    from harness.runner.run import build_task

    quick = dict(n_samples=2, pass_ks=[1, 2], maj_ks=[2], n_prompts=4, max_new_tokens=6, n_boot=50, maj_subsets=10)
    task = build_task("countdown")
    res = evaluate(load_policy("zoo-100k", device="cpu"), task, "test", EvalConfig(**quick))
    ids = {m["prompts"] for m in res.metrics.values()}
    assert ids == {prompt_set_id(task.load("test")["prompt"][:4])}
    for name, m in res.metrics.items():
        values = per_prompt_values(m, name)
        assert len(values) == 4 and values.mean() == pytest.approx(m["mean"], abs=1e-4), name
    assert set(res.metrics["greedy_acc"]["per_prompt"]) <= {0, 1}
    assert res.metrics["pass@2"]["n_samples"] == 2 and "per_prompt" not in res.metrics["pass@2"]


def test_a_named_es_reference_is_the_cell_variants_are_compared_to(tmp_path):
    g = [1, 0] * 50
    put(tmp_path, "a", "ES exact", g)
    put(tmp_path, "b", "ES inplace bf16", g)
    main = aggregate(tmp_path)["main"]
    assert not any(k == "variant vs full ES" for k, _, _ in pairs(main))  # no "ES" / "ES full" label
    got = {(k, a["label"], b["label"]) for k, a, b in pairs(main, es_reference="ES exact")}
    assert got == {("variant vs full ES", "ES inplace bf16", "ES exact")}


def test_es_reference_must_name_a_cell_in_one_line():
    from omegaconf import OmegaConf

    from harness.core.errors import ConfigError
    from harness.runner.schema import _check_es_reference

    cfg = OmegaConf.create({"cells": [{"label": "ES exact"}, {"label": "ES sigma", "axes": {"method.sigma": [1]}}],
                            "es_reference": "ES exakt"})
    with pytest.raises(ConfigError, match="es_reference='ES exakt' is not the label of a cell without axes"):
        _check_es_reference(cfg)
    _check_es_reference(OmegaConf.merge(cfg, {"es_reference": "ES exact"}))


def test_identical_per_seed_differences_are_not_a_detection(tmp_path):
    """Two seeds each one prompt apart (+1 of 100 both times): the Student-t interval has zero width, which
    is not evidence; the row says so under 'Not paired' instead of 'detected'."""
    g = np.zeros(100, int)
    g[:10] = 1
    h = g.copy()
    h[50] = 1
    for s in (0, 1):
        put(tmp_path, f"a{s}", "ES exact", g, seed=s)
        put(tmp_path, f"b{s}", "ES inplace", np.roll(h, s), seed=s)
    agg = aggregate(tmp_path)
    agg["manifest"] = Manifest(es_reference="ES exact")
    df = comparisons(agg)
    seed = df[df["note"] == "per-seed differences of run means"].iloc[0]
    assert seed["pairing"] == "none" and seed["difference"] == pytest.approx(0.01)
    assert "all +1.0 points" in seed["result"] and "no spread" in seed["result"]
    from harness.reporting.comparisons import findings_markdown
    md = findings_markdown(df, "x")
    assert "## Not paired" in md and "differs by" not in md


def test_rl_columns_without_a_grid_are_compared_to_es_on_the_summary_metrics(tmp_path):
    """Table 2's shape (conciseness_cpu): GRPO as one column per beta, no grid, no selection. Each ES column is
    paired with each GRPO column, also on the experiment's summary metrics (reward, KL to base)."""
    rng = np.random.default_rng(2)
    def rec(name, label, method, point, reward, kl, trains=True):
        m = {"greedy_acc": entry([0] * 100)}
        for key, v in (("mean_reward", reward), ("kl_to_base", kl)):
            e = entry([0] * 100)
            e.update(mean=float(np.mean(v)), per_prompt=[float(x) for x in v])
            m[key] = e
        write_record(tmp_path / name, Record(status="ok", label=label, model="m", method=method, trains=trains,
                                             seed=0, cell=label.split(" ")[0], point=point, metrics={"test": m},
                                             started_at=len(name)))
    base = rng.random(100)
    rec("a", "Original", "base", {}, base, np.zeros(100), trains=False)
    rec("b", "ES sigma=0.001", "es", {"method.sigma": 0.001}, base + 0.01, np.full(100, 0.001))
    rec("c", "GRPO beta=0", "grpo", {"method.beta": 0.0}, base + 0.2, 1 + rng.random(100))
    rec("d", "GRPO beta=0.01", "grpo", {"method.beta": 0.01}, base + 0.1, 0.4 + rng.random(100) / 10)
    agg = aggregate(tmp_path)
    agg["manifest"] = Manifest(summary_metrics=["mean_reward", "kl_to_base"])
    df = comparisons(agg)
    es_rl = df[df["kind"] == "ES vs RL"]
    assert set(es_rl["comparison"].str.split(" vs ").str[1]) == {"GRPO beta=0", "GRPO beta=0.01"}
    assert set(df["metric"]) == {"greedy_acc", "mean_reward", "kl_to_base"}
    r = es_rl[(es_rl["metric"] == "mean_reward") & es_rl["comparison"].str.endswith("GRPO beta=0")].iloc[0]
    assert r["difference"] == pytest.approx(-0.19) and r["result"] == "detected"
    k = es_rl[(es_rl["metric"] == "kl_to_base") & es_rl["comparison"].str.endswith("beta=0.01")].iloc[0]
    assert k["ci_high"] < 0  # ES moved less from the base than GRPO at beta 0.01
    assert not (df["kind"] == "variant vs full ES").any()


def test_seven_up_one_down_is_not_a_detection(tmp_path):
    """real_cpu's shape: +2.0 points on 300 prompts from 7 prompts gained and 1 lost. The exact McNemar
    p is 2 x (1 + 8) / 2^8 = 0.0703, so it is not detected, and Newcombe's interval spans 0 with it."""
    base = np.zeros(300, int)
    base[:37] = 1                        # 12.3%, as real_cpu's Original
    trained = base.copy()
    trained[0] = 0                       # one prompt lost
    trained[100:107] = 1                 # seven gained
    put(tmp_path, "a", "Original", base, method="base", trains=False)
    put(tmp_path, "b", "ES", trained)
    (row,) = comparisons(aggregate(tmp_path)).itertuples()
    assert row.difference == pytest.approx(0.02) and (row.n_up, row.n_down) == (7, 1)
    assert row.p_value == pytest.approx(0.0703, abs=1e-4) and row.result == "not detected"
    assert row.ci_low < 0 < row.ci_high


def test_constant_columns_are_not_testable_and_not_in_m(tmp_path):
    """Greedy 0 on every prompt on both sides (conciseness_cpu's 0 vs 0) and KL to base against the base's KL,
    0 by definition: 'not testable', never detected, and left out of m; the rows that can be tested keep their
    test. Two constant columns of a non-0/1 score are not testable either."""
    rng = np.random.default_rng(4)

    def rec(name, label, method, reward, kl, trains=True):
        m = {"greedy_acc": entry([0] * 40)}
        for key, v in (("mean_reward", reward), ("kl_to_base", kl)):
            e = entry([0] * 40)
            e.update(mean=float(np.mean(v)), per_prompt=[float(x) for x in v])
            m[key] = e
        write_record(tmp_path / name, Record(status="ok", label=label, model="m", method=method, trains=trains,
                                             seed=0, cell=label, metrics={"test": m}, started_at=len(name)))
    base = rng.random(40)
    rec("a", "Original", "base", base, np.zeros(40), trains=False)
    rec("b", "ES", "es", base + rng.normal(0, 0.05, 40), 0.001 + rng.random(40) / 1000)
    rec("c", "GRPO", "grpo", base + 0.2 + rng.normal(0, 0.05, 40), 1 + rng.random(40))
    agg = aggregate(tmp_path)
    agg["manifest"] = Manifest(summary_metrics=["mean_reward", "kl_to_base"])
    df = comparisons(agg)
    untestable = df[df["result"].str.startswith("not testable")]
    assert set(zip(untestable["comparison"], untestable["metric"])) == {
        ("ES vs Original", "greedy_acc"), ("GRPO vs Original", "greedy_acc"), ("ES vs GRPO", "greedy_acc"),
        ("ES vs Original", "kl_to_base"), ("GRPO vs Original", "kl_to_base")}
    assert untestable["p_value"].isna().all() and (untestable["pairing"] == "none").all()
    assert "identical (both 0.0 points on all 40 prompts)" in untestable.iloc[0]["result"]
    assert "0 by definition" in untestable[untestable["metric"] == "kl_to_base"].iloc[0]["result"]
    tested = df[df["p_value"].notna()]
    assert len(tested) == 4 and (tested["pairing"] == "by prompt (paired bootstrap)").all()
    from harness.reporting.findings import findings_markdown
    md = findings_markdown(df, "x")
    assert "m = 4 tests (rows with a p; 5 not testable, not in m)" in md and "## Not testable" in md
    assert "0.05 x m = 0.2" in md and "20000 resamples" in md

    from harness.reporting.comparisons import untestable as why
    assert "both columns are constant" in why(np.full(5, 0.5), np.full(5, 0.25), "mean_reward", False)
    assert why(np.ones(5), np.zeros(5), "greedy_acc", False) == ""  # 0/1: all 5 prompts moved, McNemar tests it


def test_crossed_bootstrap_resamples_seeds_and_prompts():
    from harness.reporting import stats
    # seed effect only: +1 in one seed, -1 in the other, on every prompt; a prompt-only bootstrap of the
    # seed-averaged column would see exactly 0 with no spread
    r = stats.crossed_bootstrap(np.array([[1.0] * 20, [-1.0] * 20]), seed=0, n_boot=2000)
    assert r.mean == 0.0 and (r.low, r.high) == (-1.0, 1.0) and r.p > 0.9
    # a consistent difference on every seed and prompt: detected, interval at the value
    r = stats.crossed_bootstrap(np.full((3, 50), 0.2), seed=0, n_boot=2000)
    assert (r.low, r.high) == pytest.approx((0.2, 0.2)) and r.p < 0.01
    # seeds that agree and prompts that vary: about the prompt bootstrap's width
    rng = np.random.default_rng(1)
    prompt = rng.normal(0.1, 1.0, 200)
    crossed = stats.crossed_bootstrap(np.stack([prompt, prompt, prompt]), seed=0)
    by_prompt = stats.paired_bootstrap(prompt, seed=0)
    assert crossed.high - crossed.low == pytest.approx(by_prompt.high - by_prompt.low, rel=0.1)
