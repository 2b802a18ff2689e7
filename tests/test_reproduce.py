"""A fresh checkout reproduces the committed numbers: the quickstart, shortened, against golden values.

    python -m pytest tests/test_reproduce.py -q -m slow     # runs harness.tools.golden (a few minutes)

Same CPU and package versions: steps, FLOPs and every metric must be identical (the final weights
may differ in their last bits, measured). Another host: the metrics must agree within
harness.tools.golden.TOLERANCE, measured across ISAs (see its docstring).
"""
from __future__ import annotations

import copy
import json

import pytest

from harness.tools import golden


def _golden() -> dict:
    return json.loads(golden.GOLDEN.read_text())


def test_golden_file_covers_every_quickstart_run():
    g = _golden()
    assert g["overrides"] == golden.OVERRIDES, "golden file made with other overrides: python -m harness.tools.golden write"
    labels = set(g["runs"])
    assert "base" in labels and len(labels) == 11  # base, two ES cells, 4 GRPO and 4 PPO grid points
    assert all(r["status"] == "ok" for r in g["runs"].values())
    assert sum(r["weights_sha256"] is not None for r in g["runs"].values()) == 10  # every trained run


def test_compare_is_exact_on_the_same_host_and_tolerant_elsewhere():
    g = _golden()
    assert golden.compare(copy.deepcopy(g), g) == []
    label = next(lb for lb, r in g["runs"].items() if r["weights_sha256"])
    one_bit = copy.deepcopy(g)
    one_bit["runs"][label]["weights_sha256"] = "0" * 64
    assert golden.compare(one_bit, g, exact=True) == []    # last bits of the weights may differ, measured
    one_step = copy.deepcopy(g)
    one_step["runs"][label]["steps"] += 1
    assert golden.compare(one_step, g, exact=True)          # same host: steps must be identical
    assert golden.compare(one_step, g, exact=False) == []   # other host: only metrics, within the tolerance
    one_prompt = copy.deepcopy(g)
    one_prompt["runs"][label]["test:greedy_acc"] += 0.01
    assert golden.compare(one_prompt, g, exact=True)        # same host: one prompt more is a failure
    near = copy.deepcopy(g)
    near["runs"][label]["test:greedy_acc"] += golden.TOLERANCE / 2
    assert golden.compare(near, g, exact=False) == []
    far = copy.deepcopy(g)
    far["runs"][label]["test:greedy_acc"] += 2 * golden.TOLERANCE
    assert golden.compare(far, g, exact=False)
    other = copy.deepcopy(g)
    other["host"]["cpu"] = {**other["host"]["cpu"], "capability": "AVX2"}
    assert not golden.same_host(other["host"], g["host"])


@pytest.mark.slow
def test_shortened_quickstart_reproduces_the_golden_numbers(tmp_path):
    got = golden.collect(golden.run(tmp_path))
    problems = golden.compare(got, _golden())
    assert problems == [], "\n".join(problems)
