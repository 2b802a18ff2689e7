"""The one step log (harness/core/budget.py Ledger.step, harness/core/steplog.py listeners).

    python -m pytest tests/test_steplog.py -q
"""
from __future__ import annotations

import builtins
import json

import numpy as np
import pytest
import torch

from harness.core.budget import BudgetError, Ledger
from harness.core.errors import ConfigError
from harness.core.steplog import EvalEvery, JsonlLog, StepStats, Tracker, make_ledger

torch.set_num_threads(1)


def test_step_charges_records_and_broadcasts():
    seen = []
    ledger = Ledger(limit=100, kind="samples", listeners=[lambda led, s: seen.append((led.steps, s))])
    ledger.start_clock()
    a = ledger.step(1e6, 10, reward_mean=np.float32(0.5), reward_std=None, sigma=0.1)
    b = ledger.step(2e6, 10)
    assert isinstance(a, StepStats) and (a.step, a.flops, a.samples, a.extras) == (1, 1e6, 10, {"sigma": 0.1})
    assert type(a.reward_mean) is float and a.reward_std is None
    assert (b.step, b.flops, b.samples) == (2, 3e6, 20) and b.wall_s >= a.wall_s >= 0
    assert ledger.history == [a, b] and seen == [(1, a), (2, b)]
    assert ledger.fraction == 0.2 and not ledger.exhausted


def test_state_dict_round_trip_keeps_wall_time_and_history():
    ledger = Ledger(limit=1e9)
    ledger.step(1e6, 4, 0.1, 0.01, loss=1.0)
    ledger.wall_s = 12.5  # as if an earlier process had trained 12.5 s
    state = json.loads(json.dumps(ledger.state_dict()))  # what a checkpoint holds
    again = Ledger(limit=1e9)
    again.load_state_dict(state)
    assert (again.steps, again.flops, again.samples, again.wall_s) == (1, 1e6, 4, 12.5)
    assert again.history == ledger.history
    again.start_clock()
    assert again.step(1e6, 4).wall_s >= 12.5  # train time accumulates across processes
    with pytest.raises(BudgetError, match="budget.kind"):
        Ledger(limit=10, kind="samples").load_state_dict(state)


def test_jsonl_log_is_rewritten_from_history_on_resume(tmp_path):
    first = Ledger(limit=10, kind="samples", listeners=[JsonlLog(tmp_path)])
    for _ in range(3):
        first.step(1.0, 1)
    checkpoint = first.state_dict()
    first.step(1.0, 1)  # logged, then the process is killed before the next checkpoint
    resumed = Ledger(limit=10, kind="samples", listeners=[JsonlLog(tmp_path)])
    resumed.load_state_dict(checkpoint)
    resumed.step(1.0, 1)
    steps = [json.loads(line)["step"] for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]
    # a fresh run in a folder holding an old log starts a new one
    fresh = Ledger(limit=10, kind="samples", listeners=[JsonlLog(tmp_path)])
    fresh.step(1.0, 1)
    assert (tmp_path / "train_log.jsonl").read_text().count("\n") == 1


def test_eval_every_fires_at_each_crossing_and_at_the_end_without_touching_training():
    model = torch.nn.Linear(2, 2).train()
    calls = []

    def fn():
        calls.append(model.training)
        torch.rand(3), np.random.rand()  # evaluation draws random numbers ...
        return {"acc": len(calls) / 10}

    ledger = Ledger(limit=10, kind="samples")
    ledger.listeners = [EvalEvery(0.25, fn, model)]
    torch.manual_seed(0)
    expected = torch.rand(1)
    torch.manual_seed(0)
    for samples in (2, 2, 4, 1, 3):  # fractions 0.2, 0.4, 0.8, 0.9, 1.2
        ledger.step(0.0, samples)
    assert torch.equal(torch.rand(1), expected)  # ... but training sees the same RNG stream
    assert calls == [False] * 3 and model.training  # eval mode inside, training mode restored
    assert [e["step"] for e in ledger.evals] == [2, 3, 5]  # 0.25 crossed at 2, 0.5 and 0.75 at 3 (once), end at 5
    assert set(ledger.evals[0]) >= {"step", "flops", "samples", "fraction", "acc", "eval_s"}
    ledger.close()
    assert len(ledger.evals) == 3  # the end was already evaluated
    capped = Ledger(limit=10, kind="samples")
    capped.listeners = [EvalEvery(0.5, fn, model)]
    capped.step(0.0, 1)
    capped.close()  # training stopped by a step cap before the budget: the final weights are evaluated
    assert [e["step"] for e in capped.evals] == [1]


def test_make_ledger_and_tracker_fail_in_one_line(monkeypatch, tmp_path):
    with pytest.raises(BudgetError, match="budget.flops is not set"):
        make_ledger("flops", None, tmp_path)
    with pytest.raises(ValueError, match="logger='mlflow' is unknown; use one of none, tensorboard, wandb"):
        make_ledger("flops", 1e9, tmp_path, logger="mlflow")
    with pytest.raises(ValueError, match="together"):
        make_ledger("flops", 1e9, tmp_path, eval_fn=dict)
    real_import = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    with pytest.raises(ConfigError, match="^logger=wandb needs the wandb package: pip install wandb$"):
        Tracker("wandb", tmp_path)
    ledger = make_ledger("samples", 5, tmp_path, eval_fn=dict, eval_every_fraction=0.5, model=torch.nn.Linear(1, 1))
    assert [type(x).__name__ for x in ledger.listeners] == ["JsonlLog", "Progress", "EvalEvery"]


def test_tensorboard_events_hold_step_stats_against_flops(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from tests.test_es import N, P, TASK, make_es, params_of, tiny_policy

    policy = tiny_policy()
    seen = []

    def eval_fn():  # records the weights evaluation sees
        seen.append([p.detach().clone() for p in params_of(policy.model)])
        return {"val_acc": 0.5}

    ledger = make_ledger("samples", 2 * N * P, tmp_path, logger="tensorboard", eval_fn=eval_fn,
                         eval_every_fraction=0.5, model=policy.model)
    make_es(checkpoint_every=0).train(policy, TASK, ledger, tmp_path)
    # ES evaluates the updated, unperturbed weights: the last evaluation saw the final weights
    assert len(seen) == 2 and all(torch.equal(a, b) for a, b in zip(seen[-1], params_of(policy.model)))
    events = EventAccumulator(str(tmp_path / "tensorboard" / "ledger")).Reload()
    tags = events.Tags()["scalars"]
    assert {"train/reward_mean", "train/reward_std", "train/samples", "train/sigma", "train/update_norm",
            "eval/val_acc"} <= set(tags)
    rewards = events.Scalars("train/reward_mean")
    assert [e.step for e in rewards] == [round(s.flops / 1e6) for s in ledger.history]  # x-axis: MFLOPs
    assert [e.value for e in rewards] == pytest.approx([s.reward_mean for s in ledger.history])
    assert [e.value for e in events.Scalars("train/samples")] == [N * P, 2 * N * P]


def test_progress_line_counts_updates_and_gives_an_eta(capsys):
    from harness.core.steplog import Progress, eta
    ledger = Ledger(limit=4, kind="updates", listeners=[Progress()])
    ledger.step(1e6, 8, 0.25, 0.1)
    ledger.wall_s = 120.0  # as if one update had taken two minutes
    ledger.step(1e6, 8, 0.5, 0.1)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("step    1/4 | reward 0.25")
    assert "(50% of the budget)" in lines[1] and lines[1].endswith("ETA 2 min")  # 2 more updates at 1 min each
    assert eta(30.0, 0.5) == ", ETA 30 s" and eta(5.0, 1.0) == "" and eta(0.0, 0.0) == ""


def test_generation_progress_reports_done_of_total_on_stderr(tiny_policy, capsys):
    from harness.core.policy import generate
    policy = tiny_policy()
    generate(policy, ["1+1="] * 5, max_new_tokens=2, batch_size=2, progress="test: greedy")
    err = capsys.readouterr().err  # not a terminal: one line per update, the last at 5/5
    assert "test: greedy" in err and "5/5" in err.splitlines()[-1]
    generate(policy, ["1+1="] * 5, max_new_tokens=2, batch_size=2)  # members and training: silent
    assert capsys.readouterr().err == ""


def test_one_batch_shows_its_decode_steps_and_leaves_the_output_unchanged(tiny_policy, capsys):
    """500 greedy prompts fit one batch of 512: a bar over batches would never move, so it counts decode steps."""
    from harness.core.policy import generate
    policy = tiny_policy()
    quiet = generate(policy, ["1+1=", "2+2="], max_new_tokens=4, batch_size=8)
    capsys.readouterr()
    shown = generate(policy, ["1+1=", "2+2="], max_new_tokens=4, batch_size=8, progress="test: greedy")
    err = capsys.readouterr().err
    assert "test: greedy" in err and "step" in err and "/4" in err.splitlines()[-1]
    assert shown.texts == quiet.texts and shown.completion_tokens == quiet.completion_tokens


def test_a_long_prefill_is_not_silent(tiny_policy, capsys, monkeypatch):
    """The first tick of a batch comes after its prefill (173 s for SmolLM2's 500 prompts on one thread): the
    bar redraws after every decoder layer's forward meanwhile, at most once per its print interval (0 here)."""
    import harness.core.progress as progress
    from harness.core.policy import generate
    monkeypatch.setattr(progress, "LOG_INTERVAL_S", 0.0)
    policy = tiny_policy()
    quiet = generate(policy, ["1+1=", "2+2="], max_new_tokens=3, batch_size=8)
    capsys.readouterr()
    shown = generate(policy, ["1+1=", "2+2="], max_new_tokens=3, batch_size=8, progress="test: greedy")
    lines = capsys.readouterr().err.splitlines()
    before_first_step = [line for line in lines if " 0/3 " in line]
    layers = len(policy.model.get_decoder().layers)
    assert len(before_first_step) >= layers + 1, lines  # the bar's opening line and one per layer of the prefill
    assert shown.texts == quiet.texts
    assert not any(m._forward_hooks for m in policy.model.get_decoder().layers)  # hooks removed after
