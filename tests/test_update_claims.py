"""NOTE-076's claims section (harness/reporting/update_claims.py): counts read from analysis.json, placed once in findings.md."""
import json

import math

from harness.reporting.update_claims import MARK, lines, power, refresh_findings, walk_below, with_claims


def run(label, norms, set_size, set_norms, below, ok, numerics=None, method="es", below_rms=None):
    """`below`: the share below one update's range (NOTE-076's threshold); `below_rms`: below its RMS, the
    only share an older analysis.json has (below=None)."""
    null = {"top_k": {"norm": {"ok": ok}}, "below": {"one_step": {"ok": ok}, "range": {"ok": ok}},
            "drift": {"whole": {"ratio": 1.0 if ok else 2.3, "ok": ok}}}
    return {"method": method, "model": "m", "label": label, "numerics": numerics, "null": null,
            "localisation": {"top_k": 100, "top_k_counts": {"norm": norms, "mlp": 100 - norms},
                             "max_set": {"size": set_size, "by_group": {"norm": set_norms, "mlp": set_size - set_norms}}},
            "sparsity": {"below_one_step": below_rms if below_rms is not None else 0.1,
                         "rule": "one ES update: RMS per coordinate",
                         **({} if below is None else {"below_range": below})}}


def test_counts_runs_reaching_each_figure_and_matching_the_walk():
    bf16 = {"numerics": "inplace", "dtype": "bfloat16", "seeding": "iid"}
    runs = [run("ES exact", 0, 1, 0, 0.52, True), run("ES exact", 1, 1, 0, 0.521, True),
            run("ES bf16", 80, 144, 117, 0.80, False, bf16), run("ES bf16", 71, 10, 5, 0.95, True, bf16),
            run("GRPO", 90, 1, 1, 0.9, False, method="grpo")]
    text = "\n".join(lines(runs))
    assert "GRPO" not in text  # Adam's update is not what NOTE-076's ES claims are about
    exact, bf16_ = text.split("- m, ES bf16")
    assert "exact (fp32 master; not recorded), 2 runs" in exact
    assert "norms 0 to 1; NOTE-076's 72-80 reached in 0 of 2; the norm count is the walk's in 2 of 2" in exact
    assert "52.0% to 52.1%; inside NOTE-076's 77.6-93.0% in 0 of 2" in exact
    assert "inplace bfloat16 iid, 2 runs" in bf16_
    assert "norms 71 to 80; NOTE-076's 72-80 reached in 1 of 2" in bf16_
    assert "size 10 to 144, norms 5 to 117; a norm majority (NOTE-076: 117 of 144) in 1 of 2" in bf16_  # 5 of 10 is no majority
    assert "80.0% to 95.0%; inside NOTE-076's 77.6-93.0% in 1 of 2; the share is the walk's in 1 of 2" in bf16_
    assert "1.00x to 2.30x the walk's" in bf16_


def test_findings_section_is_replaced_not_appended(tmp_path):
    (tmp_path / "analysis.json").write_text(json.dumps({"runs": [run("ES", 0, 1, 0, 0.5, True)]}))
    (tmp_path / "findings.md").write_text("# x: findings\n\n- a detected row\n")
    assert refresh_findings(tmp_path) and refresh_findings(tmp_path)
    text = (tmp_path / "findings.md").read_text()
    assert text.count(MARK) == 1 and text.startswith("# x: findings\n\n- a detected row\n")
    assert with_claims("# y\n", tmp_path / "elsewhere") == "# y\n"  # no analysis.json: findings unchanged


def test_no_findings_file_is_reported(tmp_path):
    (tmp_path / "analysis.json").write_text(json.dumps({"runs": []}))
    assert not refresh_findings(tmp_path)


def test_an_older_analysis_is_not_read_as_one_es_update():
    old = run("ES", 0, 1, 0, 0.03, True)
    old["sparsity"]["rule"] = "alpha/N x max abs(z) x E abs(eps)"  # the harness's earlier one-member step
    del old["localisation"]["max_set"], old["null"]
    text = "\n".join(lines([old]))
    assert "C5: this analysis.json cuts at another step" in text and "3.0%" not in text
    assert "maximum-|delta| set: not in this analysis.json" in text and "no random-walk null to read it against" in text


def test_an_analysis_without_the_range_gives_the_rms_share_and_says_so():
    old = run("ES", 0, 1, 0, None, True, below_rms=0.52)
    text = "\n".join(lines([old]))
    assert "predates NOTE-076's threshold, one update's range (rerun python -m harness.analysis)" in text
    assert "52.0%, the share is the walk's in 1 of 1" in text and "inside NOTE-076's" not in text


def test_range_multiple_is_the_median_of_the_largest_abs_normal():
    from harness.reporting.stats import range_multiple
    assert abs(range_multiple(1) - 0.67449) < 1e-4     # the median of |Z|: Phi^-1(0.75)
    assert abs(range_multiple(2) - 1.05180) < 1e-4     # P(|Z| < c) = 2^-1/2: Phi^-1(0.853553)
    import numpy as np
    sims = np.abs(np.random.default_rng(0).standard_normal((4001, 1000))).max(axis=1)
    assert abs(np.median(sims) - range_multiple(1000)) < 0.02   # 3.48; the median of 4001 maxima, sd ~0.006


def test_the_walk_null_has_no_power_at_these_iteration_counts():
    # a perfect signal (rho = 1) moves the drift ratio by sqrt(1 + T N / d): zoo-1m needs 1,013 updates, SmolLM2 181,147
    fixed = power(46, 30, 752_128, adaptive=False)
    assert fixed[1] == 1013 and fixed[0] == math.sqrt(1 + 46 * 30 / 752_128)
    assert power(2, 30, 134_515_008, adaptive=False)[1] == 181_147       # ceil(0.0404 x 134,515,008 / 30)
    # a signal that aligns each step with the displacement so far: ceil((0.75 x 0.0404)^2 x d / N)
    assert power(2, 30, 134_515_008)[1] == 4117 and power(46, 30, 752_128)[1] == 24
    assert power(46, 30, 752_128)[0] == math.sqrt(1 + 4 / 3 * math.sqrt(46 * 30 / 752_128))
    walked = run("ES", 0, 1, 0, 0.52, True)
    walked["null"]["walk"] = {"t": 2, "n": 30}
    walked["null"]["n_updated"] = 134_515_008
    text = "\n".join(lines([walked]))
    assert "T = 2 applied updates" in text and "cannot tell learning from none" in text
    assert "Not testable at this T" in text and "(the walk puts 100.0% there at T = 2)" in text
    assert "5.84x its RMS" in text                     # c_d at d = 134,515,008
    assert abs(walk_below(1) - 0.6827) < 1e-4          # at most 68.3% of a walk's coordinates below one update's RMS
    assert abs(walk_below(12, 752_128) - 0.8434) < 1e-4   # zoo-1m: erf(4.908 / sqrt(24)), inside 77.6-93.0%
    walked["null"]["walk"]["t"] = 181_147                # at the power line's bound C5 can be read
    assert "Not testable" not in "\n".join(lines([walked]))
