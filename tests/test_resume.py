"""Kill-and-resume: a run SIGKILLed after a checkpoint and restarted with the same run_dir ends with
the ledger totals of an uninterrupted run (and, where the method is deterministic, the same weights).

    python -m pytest tests/test_resume.py -q -m slow

Each test trains zoo-100k for a few steps in subprocesses (this file is also the child script):
an uninterrupted run, a run killed once checkpoint 2 is on disk (its steps are slowed down by a
sleeping listener so the kill lands mid-run), and the rerun of the killed run_dir.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STEPS = 5


def _task():
    from tasks.countdown import Countdown

    class DenseCountdown(Countdown):
        """A dense toy reward, so a random model's completions differ in reward."""

        def reward(self, completions, **kwargs):
            return [sum(ord(ch) % 7 for ch in c) / (6 * max(len(c), 1)) for c in completions]

    return DenseCountdown(source="zoo", template="compact", max_new_tokens=8, n_train=64)


def _method(name: str):
    from methods.es import ES
    from methods.grpo import GRPO
    from methods.ppo import PPO

    if name == "es":
        return ES(population=4, prompts_per_iteration=8, sigma=0.1, alpha=0.05, generation_batch_size=8,
                  checkpoint_every=1), 4 * 8
    # LoRA variants: no adapter dropout, so an uninterrupted and a resumed run can be compared bit for bit
    lora = {"peft": "lora", "lora": {"r": 4, "alpha": 8, "dropout": 0.0}} if name.endswith("-lora") else {}
    if name.startswith("grpo"):
        return GRPO(prompts_per_step=4, num_generations=4, max_completion_length=8, learning_rate=1e-3, beta=1e-3,
                    checkpoint_every=1, **lora), 4 * 4
    return PPO(prompts_per_step=4, num_ppo_epochs=2, num_mini_batches=2, learning_rate=1e-3, checkpoint_every=1,
               **lora), 4


def child(name: str, run_dir: str, slow: bool) -> None:
    """Train `name` for STEPS steps (a samples budget) in run_dir; write the final weights and totals."""
    import torch
    from safetensors.torch import save_file

    from harness.core.policy import load_policy
    from harness.core.steplog import make_ledger

    torch.set_num_threads(1)
    run_dir = Path(run_dir)
    method, per_step = _method(name)
    policy = load_policy("zoo-100k", device="cpu")
    ledger = make_ledger("samples", STEPS * per_step, run_dir, progress=False)
    if slow:  # leave time to kill the run between checkpoints
        ledger.listeners.append(lambda ledger, stats: time.sleep(1.0))
    summary = method.train(policy, _task(), ledger, run_dir)
    weights = {n: p.detach().clone().contiguous() for n, p in policy.model.named_parameters()}  # tied: once
    save_file(weights, str(run_dir / "final.safetensors"))
    totals = {"steps": ledger.steps, "flops": ledger.flops, "samples": ledger.samples,
              "resumed_from": summary["resumed_from"], "wall_s": ledger.wall_s}
    (run_dir / "totals.json").write_text(json.dumps(totals))


def _spawn(name: str, run_dir: Path, slow: bool = False) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TRL_EXPERIMENTAL_SILENCE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.Popen([sys.executable, __file__, name, str(run_dir), "slow" if slow else "fast"], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(proc: subprocess.Popen) -> None:
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]


def _checkpointed_steps(name: str, run_dir: Path) -> int:
    """The step of the newest complete checkpoint in run_dir (0 if none)."""
    from methods.base import latest_dir
    from methods.trl_ledger import last_complete_checkpoint

    if name.startswith("grpo"):
        ckpt = last_complete_checkpoint(run_dir / "trl")
        return int(ckpt.name.split("-")[1]) if ckpt else 0
    path = latest_dir(run_dir / f"{name.removesuffix('-lora')}_checkpoint", "state.json")
    if path is None:
        return 0
    state = json.loads((path / "state.json").read_text())
    return state.get("iteration", state.get("updates", 0))


def kill_and_resume(name: str, tmp_path: Path) -> tuple[dict, dict, bool]:
    """Totals of an uninterrupted and a killed+resumed run, and whether their final weights are bit-identical."""
    import torch
    from safetensors.torch import load_file

    full, part = tmp_path / "full", tmp_path / "part"
    reference = _spawn(name, full)
    killed = _spawn(name, part, slow=True)
    deadline = time.time() + 300
    while _checkpointed_steps(name, part) < 2:
        assert killed.poll() is None, killed.communicate()[0][-3000:]
        assert time.time() < deadline, "no second checkpoint within 300 s"
        time.sleep(0.05)
    killed.send_signal(signal.SIGKILL)
    killed.communicate()
    assert killed.returncode == -signal.SIGKILL
    assert not (part / "totals.json").exists()
    _finish(reference)
    _finish(_spawn(name, part))
    a, b = (json.loads((d / "totals.json").read_text()) for d in (full, part))
    wa, wb = (load_file(str(d / "final.safetensors")) for d in (full, part))
    identical = wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    steps = [json.loads(line)["step"] for line in (part / "train_log.jsonl").read_text().splitlines()]
    assert steps == list(range(1, STEPS + 1)), f"train_log steps {steps}: a resumed log must not repeat steps"
    return a, b, identical


def _same_totals(a: dict, b: dict) -> None:
    assert b["resumed_from"] >= 2, "the rerun did not resume"
    assert (a["steps"], a["samples"]) == (b["steps"], b["samples"]) == (STEPS, b["samples"])
    assert a["flops"] == pytest.approx(b["flops"], rel=0)


@pytest.mark.slow
def test_es_kill_and_resume_is_bit_identical(tmp_path):
    a, b, identical = kill_and_resume("es", tmp_path)
    _same_totals(a, b)
    assert identical


@pytest.mark.slow
def test_grpo_kill_and_resume_same_totals(tmp_path):
    a, b, identical = kill_and_resume("grpo", tmp_path)
    _same_totals(a, b)
    print(f"GRPO final weights bit-identical after kill+resume: {identical}")
    assert identical  # CPU, fp32: TRL restores RNG, optimizer and data position exactly


@pytest.mark.slow
def test_ppo_kill_and_resume_same_totals(tmp_path):
    a, b, identical = kill_and_resume("ppo", tmp_path)
    _same_totals(a, b)
    print(f"PPO final weights bit-identical after kill+resume: {identical}")
    assert identical  # CPU, fp32: RNG states, optimizer and prompt stream restored at the update boundary


@pytest.mark.slow
@pytest.mark.parametrize("name", ["grpo-lora", "ppo-lora"])
def test_lora_kill_and_resume_same_totals(tmp_path, name):
    """LoRA resumes through the same checkpoints (TRL's adapter checkpoint; PPO's own, adapters inside the policy)."""
    a, b, identical = kill_and_resume(name, tmp_path)
    _same_totals(a, b)
    print(f"{name} final (merged) weights bit-identical after kill+resume: {identical}")
    assert identical


if __name__ == "__main__":
    child(sys.argv[1], sys.argv[2], sys.argv[3] == "slow")
