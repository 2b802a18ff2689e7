"""Lanes (harness/runner/lanes.py): an experiment's runs side by side on one host, each in its own process.

    python -m pytest tests/test_lanes.py -q               # the lane count, GPU packing, the scheduler
    python -m pytest tests/test_lanes.py -q -m slow       # + the smoke experiment at lanes=1 and lanes=2

The packing tests mock the devices (no GPU needed); the slow one checks that the lane count changes no
metric of any run.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from harness.core.errors import Terminated
from harness.core.records import PlannedRun
from harness.runner import lanes
from harness.runner.lanes import LanesError, Need, Plan, Slots

ROOT = Path(__file__).resolve().parent.parent


def runs(n: int) -> list[PlannedRun]:
    return [PlannedRun(i, "zoo-100k", 0, f"c{i}", f"c{i}", f"cell{i}", None, {}, [], "es", f"k{i}") for i in range(n)]


def children(n: int, threads: int = 1, device: str = "auto") -> dict:
    return {i: OmegaConf.create({"threads": threads, "device": device}) for i in range(n)}


@pytest.mark.parametrize("value, count", [(None, None), ("auto", None), (1, 1), (3, 3)])
def test_lanes_accepts_auto_and_positive_ints(value, count):
    assert lanes.parse_lanes(value) == count


@pytest.mark.parametrize("value", [0, -2, "two", True, 1.5])
def test_a_bad_lanes_value_is_one_line_naming_the_fix(value):
    with pytest.raises(LanesError, match=r"^lanes=.* must be auto or an int >= 1 \(lanes=1 runs one run at a time\)$"):
        lanes.parse_lanes(value)


def test_on_cpu_lanes_are_cores_over_threads():
    assert lanes.lanes_that_fit([Need(1)] * 7, 2, 0) == (2, "2 cores / threads=1")
    assert lanes.lanes_that_fit([Need(2)] * 7, 16, 0) == (8, "16 cores / threads=2")
    assert lanes.lanes_that_fit([Need(4)] * 7, 2, 0)[0] == 1  # threads above the cores: one at a time, as before
    p = lanes.plan("auto", runs(7), children(7), n_cores=2, gpus=[])
    assert (p.lanes, p.why) == (2, "2 cores / threads=1") and p.needs[3] == Need(1, 0)
    assert lanes.plan("auto", runs(7), children(7), n_cores=64, gpus=[]).lanes == 7  # never more than runs left


def test_lanes_above_what_fits_are_clamped_with_one_line(capsys):
    p = lanes.plan(8, runs(7), children(7), n_cores=2, gpus=[])
    out = capsys.readouterr().out.strip().splitlines()
    assert p.lanes == 2
    assert out == ["lanes: lanes=8 is more than this machine fits (2 cores / threads=1); running 2 side by side"]
    assert lanes.plan(2, runs(7), children(7), n_cores=2, gpus=[]).lanes == 2 and not capsys.readouterr().out


def test_lanes_1_plans_nothing_and_refuses_nothing(monkeypatch):
    monkeypatch.setattr(lanes, "planned_gpus", lambda child, gb: pytest.fail("lanes=1 must not price runs"))
    assert lanes.plan(1, runs(3), children(3), n_cores=8, gpus=["0"]).lanes == 1


def test_gpu_runs_take_their_planned_count_of_the_visible_devices(monkeypatch):
    counts = {0: 1, 1: 2, 2: 1, 3: 4, 4: 1}
    monkeypatch.setattr(lanes, "planned_gpus", lambda child, gb: (counts[child.i], None))
    kids = {i: OmegaConf.create({"threads": 1, "device": "auto", "i": i}) for i in counts}
    p = lanes.plan("auto", runs(5), kids, n_cores=16, gpus=["0", "1", "2", "3"], memory_gb=80)
    assert p.lanes == 4 and p.why == "4 GPUs / 1 per run" and [p.needs[i].gpus for i in counts] == [1, 2, 1, 4, 1]
    # device=cpu runs hold no GPU even on a GPU node
    cpu = lanes.plan("auto", runs(5), children(5, device="cpu"), n_cores=16, gpus=["0", "1"], memory_gb=80)
    assert {n.gpus for n in cpu.needs.values()} == {0} and cpu.lanes == 5


@pytest.mark.parametrize("need, says", [(5, "needs 5 GPUs"), (0, "fits no number of GPUs (too big)")])
def test_a_run_needing_more_gpus_than_the_node_is_refused_naming_it(monkeypatch, need, says):
    monkeypatch.setattr(lanes, "planned_gpus", lambda child, gb: (need if child.i == 2 else 1, "too big"))
    kids = {i: OmegaConf.create({"threads": 1, "device": "auto", "i": i}) for i in range(3)}
    with pytest.raises(LanesError) as e:
        lanes.plan("auto", runs(3), kids, n_cores=16, gpus=["0", "1", "2", "3"], memory_gb=80)
    assert str(e.value) == (f"run 2 (cell2) {says} by the planner (+plan=true); this node shows 4: run it on a "
                            "bigger node, or pass lanes=1 to run one run at a time on all 4")


def test_visible_gpus_follow_cuda_visible_devices(monkeypatch):
    monkeypatch.setattr(lanes, "_device_count", lambda: 3)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert lanes.visible_gpus() == ["0", "1", "2"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5, 7,-1,2")  # CUDA stops at the first invalid id
    assert lanes.visible_gpus() == ["5", "7"]
    monkeypatch.setattr(lanes, "_device_count", lambda: 0)  # a CPU-only torch sees none, whatever the variable says
    assert lanes.visible_gpus() == []


def test_slots_give_disjoint_gpus_lowest_first():
    s = Slots(4, ["0", "1", "2", "3"])
    a, b = s.take(Need(1, 2), alone=True), s.take(Need(1, 1), alone=False)
    assert (a, b, s.take(Need(1, 2), alone=False)) == (["0", "1"], ["2"], None)
    s.give(Need(1, 2), a)
    assert s.take(Need(1, 3), alone=False) == ["0", "1", "3"] and s.cores == 2
    assert Slots(2, []).take(Need(4), alone=True) == [] and Slots(2, []).take(Need(4), alone=False) is None


class FakeProc:
    """A child that exits with `rc` after `polls` polls; records what the scheduler did to it."""

    def __init__(self, polls: int, rc: int = 0):
        self.left, self.rc, self.returncode, self.terminated = polls, rc, None, False

    def poll(self):
        if self.returncode is None and not self.terminated:
            self.left -= 1
            if self.left <= 0:
                self.returncode = self.rc
        return self.returncode

    def terminate(self):
        self.terminated, self.returncode = True, -15

    def wait(self, timeout=None):
        return self.returncode

    def kill(self):
        self.returncode = -9


def test_the_scheduler_packs_gpus_in_plan_order_and_never_shares_a_device():
    needs = {0: Need(1, 2), 1: Need(1, 4), 2: Need(1, 1), 3: Need(1, 1), 4: Need(1, 2)}
    p = Plan(4, needs, 16, ["0", "1", "2", "3"])
    held, events, peak = {}, [], [0]

    def start(r, ids):
        assert len(ids) == needs[r.index].gpus and not set(ids) & {g for v in held.values() for g in v}
        held[r.index] = ids
        peak[0] = max(peak[0], len(held))
        events.append(("start", r.index))
        return FakeProc(polls=3)

    def end(r, rc):
        held.pop(r.index)
        events.append(("end", r.index))

    lanes.schedule(runs(5), p, start, end, poll_s=0)
    starts = [i for kind, i in events if kind == "start"]
    # run 1 (4 GPUs) waits for the node to empty; 2 and 3 fill the two GPUs run 0 leaves (backfill, plan order)
    assert starts[:3] == [0, 2, 3] and sorted(starts) == list(range(5)) and peak[0] == 3
    assert events.index(("start", 1)) > max(events.index(("end", i)) for i in (0, 2, 3))


def test_an_interrupted_lane_stops_every_lane():
    procs = []

    def start(r, ids):
        procs.append(FakeProc(polls=2 if r.index == 0 else 10**6, rc=143 if r.index == 0 else 0))
        return procs[-1]

    def end(r, rc):
        lanes.exit_status(rc, f"run {r.index}")

    with pytest.raises(Terminated, match="run 0 was interrupted"):
        lanes.schedule(runs(4), Plan(3, {i: Need(1) for i in range(4)}, 3), start, end, poll_s=0)
    assert len(procs) == 3 and all(p.terminated for p in procs[1:])  # run 3 never started


# ---- end to end: the smoke experiment at lanes=1 and lanes=2 gives the same numbers ----

def harness(*args, cwd):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=1200)


@pytest.mark.slow  # a subprocess: Python, torch and Hydra start-up each time
def test_bad_lanes_on_the_command_line_is_one_line(tmp_path):
    r = harness("experiment=smoke", "lanes=0", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "esbench: error: lanes=0 must be auto or an int >= 1 (lanes=1: an experiment's runs one at a time)"]


@pytest.mark.slow  # 14 runs, each a process: minutes on 2 busy cores
def test_smoke_metrics_are_equal_at_lanes_1_and_2(tmp_path):
    walls = {}
    for n in (1, 2):
        t0 = time.time()
        # analysis.sparsity_prompts=0: the analysis's re-evaluations at the end took minutes on busy cores and
        # write no record; the runs themselves are the smoke experiment's
        r = harness("experiment=smoke", f"stamp=lanes{n}", f"lanes={n}", f"results_dir=out{n}",
                    "analysis.sparsity_prompts=0", cwd=tmp_path)
        walls[n] = time.time() - t0
        assert r.returncode == 0, r.stderr[-3000:]
    print(f"smoke wall time: lanes=1 {walls[1]:.0f} s, lanes=2 {walls[2]:.0f} s")
    lines = r.stdout.splitlines()
    if lanes.cores() >= 2:  # two started before the first ended: they ran side by side
        assert "lanes: 2 runs side by side (" in r.stdout
        first_end = next(i for i, ln in enumerate(lines) if ": ok after " in ln)
        assert sum(": starting in its own process" in ln for ln in lines[:first_end]) == 2
    assert any(": ok after " in ln and "7 of 7 runs finished" in ln for ln in lines)  # the last run's end line

    def numbers(stamp: str) -> dict:
        recs = [json.loads(p.read_text()) for p in (tmp_path / "runs" / "smoke" / stamp).rglob("record.json")]
        assert len(recs) == 7 and {rec["status"] for rec in recs} == {"ok"}
        return {rec["run_key"]: (rec["metrics"], rec["pass_curve"], rec["heldout"]) for rec in recs}

    one, two = numbers("lanes1"), numbers("lanes2")
    assert one.keys() == two.keys()
    for key in one:
        assert one[key] == two[key], key
    def table(n: int) -> list[str]:  # table.md without its last column, wall s (two lanes share the cores)
        return [ln.rsplit("|", 2)[0] for ln in (tmp_path / f"out{n}" / "smoke" / "table.md").read_text().splitlines()]

    assert table(1) == table(2)
