"""The quickstart, shortened, against committed golden numbers: does this host reproduce results/?

    python -m harness.tools.golden check            # run it (a few minutes) and compare with tests/data/golden_quickstart.json
    python -m harness.tools.golden write            # run it and (re)write the golden file (after a change on purpose)
    python -m harness.tools.golden compare A B      # compare two golden files (e.g. made on two hosts or ISAs)

It runs `experiment=quickstart` exactly as `python -m harness` does (same model, cells, grids, seeds,
selection on validation) with a budget of a few steps per method and a smaller evaluation, and keeps,
per run: status, steps, FLOPs charged, validation and test greedy accuracy, test pass@1 and a sha256 of
the final weights.

What reproduces (measured with `compare` on 2-core AMD EPYC family 25 machines; the README's
"Reproducibility" says the same):
- Steps, FLOPs charged and every metric of all 11 runs were identical in 6 of 6 runs of this check:
  AVX512, AVX2 and default kernels (ATEN_CPU_CAPABILITY), two code versions, runs in one process and
  in a process each. `check` demands them exactly on a host with the same CPU and package versions.
- The final weights were not: another ISA changed 9-10 of the 10 trained runs' last bits, and two
  identical runs on one host differed in 2-4 of 10 (each such run lands on one of two weight sets).
  `check` reports how many weights match and never fails on them.
- Another CPU (model, ids or flags) or other package versions: metrics within TOLERANCE.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.core import paths

ROOT = paths.ROOT
GOLDEN = ROOT / "tests" / "data" / "golden_quickstart.json"
# A few steps of each method on zoo-1m: 3 ES iterations, 13 GRPO steps, 3 PPO updates.
OVERRIDES = [
    "experiment=quickstart", "budget.flops=1.2e11", "stamp=golden",
    "eval.n_prompts=100", "eval.n_samples=4", "eval.pass_ks=[1,4]", "eval.maj_ks=[4]",
    "eval.n_boot=100", "eval.maj_subsets=20", "eval.every_flops_fraction=null",
    "analysis.entropy_every_flops_fraction=null", "analysis.sparsity_prompts=0", "analysis.store_update=true",
]
METRICS = ("validation:greedy_acc", "test:greedy_acc", "test:pass@1")
# Between ISAs on one host every metric was identical (module docstring); 0.05 (5 of 100 prompts,
# about one standard error) is the margin left for CPUs whose rounding moves further.
TOLERANCE = 0.05
EXACT = ("status", "steps", "flops_used", *METRICS)  # identical on one host in every measurement


def run(workdir: Path) -> Path:
    """Run the shortened quickstart into workdir; return its records folder."""
    cmd = [sys.executable, "-m", "harness", *OVERRIDES, f"runs_dir={workdir / 'runs'}",
           f"results_dir={workdir / 'outputs'}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"the shortened quickstart failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}"
                           f"\n{proc.stderr[-3000:]}")
    return workdir / "runs" / "quickstart" / "golden"


def collect(root: Path) -> dict:
    """The golden numbers of every record under root, keyed by run label, plus the host they came from."""
    from harness.core.payloads import BudgetSummary
    from harness.core.records import read_records

    records, _ = read_records(root)
    if not records:
        raise RuntimeError(f"no records under {root}")
    runs = {}
    for r in records:
        budget = r.budget or BudgetSummary()  # a failed run may have none
        row = {"status": r.status, "steps": budget.steps, "flops_used": budget.flops_used}
        for name in METRICS:
            split, metric = name.split(":")
            m = r.metrics.get(split, {}).get(metric)  # a failed run evaluated nothing
            row[name] = m.mean if m else None
        weights = Path(r.path).parent / r.update["path"] if r.update.get("path") else None
        row["weights_sha256"] = (hashlib.sha256(weights.read_bytes()).hexdigest()
                                 if weights and weights.exists() else None)
        runs[r.label] = row
    first = records[0]
    return {"host": {"cpu": first.cpu, "versions": first.versions, "git_sha": first.git_sha},
            "overrides": OVERRIDES, "runs": runs}


def same_host(a: dict, b: dict) -> bool:
    """Bit-identity is expected only on the same CPU model and kernel ISA with the same versions."""
    keep = ("torch", "transformers", "trl", "tokenizers", "numpy", "accelerate")
    return (a["cpu"] == b["cpu"]
            and all(a["versions"].get(k) == b["versions"].get(k) for k in keep))


def compare(got: dict, golden: dict, exact: bool | None = None) -> list[str]:
    """Differences that break reproduction (empty: it reproduces). exact=None: decided by the hosts."""
    exact = same_host(got["host"], golden["host"]) if exact is None else exact
    problems = []
    for label, want in golden["runs"].items():
        have = got["runs"].get(label)
        if have is None:
            problems.append(f"{label}: missing")
            continue
        for k in EXACT if exact else ("status", *METRICS):
            a, b = have.get(k), want.get(k)
            if k == "status" or exact:
                if a != b:
                    problems.append(f"{label}: {k} {a} != {b}" + (" (same host: must be identical)" if exact else ""))
            elif a is not None and b is not None and abs(a - b) > TOLERANCE:
                problems.append(f"{label}: {k} {a:.3f} vs {b:.3f}, beyond the cross-host tolerance {TOLERANCE}")
    return problems


def differences(a: dict, b: dict) -> dict[str, float]:
    """Largest |a - b| per metric over the runs both files have (to measure TOLERANCE)."""
    out = {}
    for k in METRICS:
        d = [abs(a["runs"][lb][k] - b["runs"][lb][k]) for lb in a["runs"] if lb in b["runs"]
             and a["runs"][lb][k] is not None and b["runs"][lb][k] is not None]
        out[k] = max(d) if d else 0.0
    out["identical weights"] = sum(a["runs"][lb]["weights_sha256"] == b["runs"][lb]["weights_sha256"]
                                   for lb in a["runs"] if lb in b["runs"])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.tools.golden", description=__doc__.split("\n")[0])
    ap.add_argument("action", choices=["check", "write", "compare"])
    ap.add_argument("files", nargs="*", help="compare: two golden files")
    ap.add_argument("--out", type=Path, help="write: where (default tests/data/golden_quickstart.json)")
    a = ap.parse_args(argv)
    if a.action == "compare":
        if len(a.files) != 2:
            ap.error("compare takes two golden files")
        x, y = (json.loads(Path(f).read_text()) for f in a.files)
        print(json.dumps({"same host": same_host(x["host"], y["host"]), **differences(x, y)}, indent=1))
        return 0
    with tempfile.TemporaryDirectory(prefix="esbench-golden-") as tmp:
        got = collect(run(Path(tmp)))
    if a.action == "write":
        from harness.core.atomic import write_json_atomic

        out = a.out or GOLDEN
        write_json_atomic(out, got)
        print(f"wrote {out} ({len(got['runs'])} runs, {got['host']['cpu']})")
        return 0
    golden = json.loads(GOLDEN.read_text())
    problems = compare(got, golden)
    mode = "exact (same host)" if same_host(got["host"], golden["host"]) else f"within {TOLERANCE} (other host)"
    same = differences(got, golden)["identical weights"]
    trained = sum(r["weights_sha256"] is not None for r in golden["runs"].values())
    print(f"{len(golden['runs'])} runs compared, {mode}: " + ("reproduces" if not problems else "DIFFERS")
          + f"; final weights identical in {same} of {trained} trained runs (not required)")
    for p in problems:
        print("  " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
