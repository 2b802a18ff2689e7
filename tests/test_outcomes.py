"""A results folder's comparisons recompute from its committed outcomes alone, byte for byte."""
import gzip
from pathlib import Path
import shutil

import numpy as np
import pytest

from harness.core.records import Manifest, PlannedRun, Record, write_manifest, write_record
from harness.evaluation.metrics import pass_at_k, prompt_set_id
from harness.reporting.outcomes import OUTCOMES, OutcomesMismatch, rebuild
from harness.reporting.report import rebuild as report

PROMPTS = prompt_set_id([f"prompt {i}" for i in range(60)])
FILES = ("comparisons.md", "comparisons.csv", "findings.md")


def metrics(rng, p):
    greedy = (rng.random(60) < p).astype(int).tolist()
    correct = rng.binomial(4, p, size=60).tolist()
    m = float(np.mean(greedy))
    k1 = float(np.mean([pass_at_k(4, c, 1) for c in correct]))
    return {"test": {"greedy_acc": {"mean": m, "ci_low": m, "ci_high": m, "n": 60, "prompts": PROMPTS,
                                    "per_prompt": greedy},
                     "pass@1": {"mean": k1, "ci_low": k1, "ci_high": k1, "n": 60, "prompts": PROMPTS,
                                "correct": correct, "n_samples": 4}}}


def experiment(root, seeds=(0, 1, 2)):
    """An Original row (unseeded) and two trained arms over three seeds, with a declared primary."""
    rng = np.random.default_rng(3)
    plan, i = [], 0
    arms = [("Original", "base", False, seeds[:1], 0.4), ("ES", "es", True, seeds, 0.5), ("placebo", "es", True, seeds, 0.42)]
    for label, method, trains, arm_seeds, p in arms:
        for s in arm_seeds:
            key = f"{label}/seed{s}"
            overrides = [f"method={method}"] + ["method.fitness=placebo"] * (label == "placebo")
            plan.append(PlannedRun(i, None, s, label, label, label, None, {}, overrides, method, key))
            write_record(root / key, Record(
                status="ok", label=label, model="zoo-1m", method=method, trains=trains, seed=s, cell=label,
                column=label, run_index=i, run_key=key, started_at=float(i),
                config={"method": {"_target_": "methods.es.ES" if method == "es" else "methods.base.Base"}},
                metrics=metrics(rng, p + 0.02 * s)))
            i += 1
    write_manifest(root, Manifest(group="g", stamp="s", runs=plan,
                                  primary=[{"a": "ES", "b": "placebo", "metric": "greedy_acc", "direction": "greater",
                                            "test": "seed_t"}]))


def test_comparisons_rebuild_byte_identically_from_the_committed_outcomes(tmp_path):
    experiment(tmp_path / "records")
    report(tmp_path / "records", tmp_path / "out")
    committed = tmp_path / "committed"
    committed.mkdir()
    for name in ("runs.csv", OUTCOMES, "experiment.json", *FILES):
        shutil.copy(tmp_path / "out" / name, committed / name)
    for name in FILES:
        (committed / name).write_text("stale")
    (committed / "findings.md").write_text((tmp_path / "out" / "findings.md").read_text().split("\n")[0] + "\n")
    rebuild(committed)
    for name in FILES:
        assert (committed / name).read_bytes() == (tmp_path / "out" / name).read_bytes(), name
    md = (committed / "findings.md").read_text()
    assert "## Primary endpoints" in md and "seed-level one-sided t" in md


def test_outcomes_are_small_and_deterministic(tmp_path):
    experiment(tmp_path / "records")
    report(tmp_path / "records", tmp_path / "a")
    report(tmp_path / "records", tmp_path / "b")
    assert (tmp_path / "a" / OUTCOMES).read_bytes() == (tmp_path / "b" / OUTCOMES).read_bytes()
    text = gzip.decompress((tmp_path / "a" / OUTCOMES).read_bytes()).decode()
    assert text.count("\n") == 1 + 7 * 2  # header, then 7 runs x 2 metrics


def test_outcomes_that_disagree_with_runs_csv_fail_naming_the_folder(tmp_path):
    experiment(tmp_path / "records")
    report(tmp_path / "records", tmp_path / "out")
    path = tmp_path / "out" / OUTCOMES
    text = gzip.decompress(path.read_bytes()).decode()
    line = next(ln for ln in text.split("\n") if ln.startswith("ES/seed1,") and "greedy_acc" in ln)
    flipped = line[:-1] + ("1" if line[-1] == "0" else "0")
    path.write_bytes(gzip.compress(text.replace(line, flipped).encode()))
    with pytest.raises(OutcomesMismatch, match=r"out: run 'ES/seed1' greedy_acc"):
        rebuild(tmp_path / "out")


def test_multi_seed_comparisons_test_at_the_seed_level_only(tmp_path):
    experiment(tmp_path / "records")
    report(tmp_path / "records", tmp_path / "out")
    import pandas as pd
    df = pd.read_csv(tmp_path / "out" / "comparisons.csv")
    tested = df[df["p_bh"].notna()]
    assert set(tested["pairing"]) == {"by seed (Student-t)"}
    assert df["result"].str.startswith("descriptive").sum() >= 2


def test_one_seed_against_several_is_refused_in_one_line(tmp_path):
    experiment(tmp_path / "records", seeds=(0, 1, 2))
    shutil.rmtree(tmp_path / "records" / "placebo" / "seed1")
    shutil.rmtree(tmp_path / "records" / "placebo" / "seed2")
    report(tmp_path / "records", tmp_path / "out")
    import pandas as pd
    df = pd.read_csv(tmp_path / "out" / "comparisons.csv")
    row = df[df["comparison"] == "ES vs placebo"].iloc[0]
    assert row["result"].startswith("not paired: B has one seed and the other side 3") and "\n" not in row["result"]


RESULTS = Path(__file__).resolve().parents[1] / "results"


@pytest.mark.parametrize("folder", sorted(p.parent.name for p in RESULTS.glob("*/comparisons.csv")))
def test_every_committed_folder_recomputes_or_says_it_cannot(folder, tmp_path):
    """A folder with outcomes rebuilds its comparisons byte for byte; one without says so in its findings."""
    src = RESULTS / folder
    if not (src / OUTCOMES).is_file():
        assert "Per-prompt outcomes are not committed for this folder" in (src / "findings.md").read_text()
        return
    copy = tmp_path / folder
    shutil.copytree(src, copy)
    rebuild(copy)
    for name in FILES:
        assert (copy / name).read_bytes() == (src / name).read_bytes(), name
