"""Train reward per step of a results folder's trained runs, written beside its tables.

    python -m harness.tools.train_reward results/placebo_real_cpu     # -> results/placebo_real_cpu/train_reward.csv

Run records (and the train curves they hold) are not committed, so a write-up's train-reward figures are
read from this file: one row per trained run and step with the reward the step's samples scored on its train
prompts (for ES, the population's mean over its members) and whether an ES update was skipped (every member
scored the same). It prints, per run, the first step's reward, the mean of the last 5, the highest, and the
skipped steps. One mean per step, no interval: a measurement of training, not a tested difference.
"""
from __future__ import annotations

import argparse
import csv
import io
import sys
from pathlib import Path

OUT_NAME = "train_reward.csv"
LAST = 5  # steps averaged for "the end of training": one step's population mean moves by a prompt at a time


def rows(records) -> list[dict]:
    """One row per (trained run, step), in the order the runs ran."""
    out = []
    for r in records:
        if not r.trains or r.status != "ok":
            continue
        for s in r.steps:
            extras = s.get("extras") or {}
            out.append({"label": r.label, "seed": r.seed, "step": s["step"], "reward_mean": s["reward_mean"],
                        "skipped": extras.get("skipped", "")})
    return out


def summary(table: list[dict]) -> list[dict]:
    """Per run: first step's reward, the mean of the last LAST steps, the highest, and the skipped steps."""
    runs: dict[tuple, list[dict]] = {}
    for row in table:
        runs.setdefault((row["label"], row["seed"]), []).append(row)
    out = []
    for (label, seed), steps in runs.items():
        rewards = [s["reward_mean"] for s in steps]
        out.append({"label": label, "seed": seed, "steps": len(steps), "first": rewards[0],
                    f"last{LAST}": sum(rewards[-LAST:]) / len(rewards[-LAST:]), "highest": max(rewards),
                    "skipped": sum(1 for s in steps if s["skipped"] is True)})
    return out


def to_csv(table: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=["label", "seed", "step", "reward_mean", "skipped"], lineterminator="\n")
    w.writeheader()
    w.writerows(table)
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.tools.train_reward", description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="results/<group> (the records its versions.json names) or runs/<group>/<stamp>")
    ap.add_argument("--runs-dir", type=Path, default=Path("runs"), help="where records live (default: runs)")
    ap.add_argument("--out", type=Path, help=f"the CSV (default: <folder>/{OUT_NAME})")
    args = ap.parse_args(argv)
    from harness.analysis.report import resolve
    from harness.analysis.update import UpdateError
    from harness.core.atomic import write_text_atomic
    from harness.core.records import read_records

    try:
        folder, _ = resolve(args.folder, args.runs_dir)
    except UpdateError as e:
        print(f"esbench: error: {e}", file=sys.stderr)
        return 2
    records, warnings = read_records(folder)
    for w in warnings:
        print(w, file=sys.stderr)
    table = rows(records)
    if not table:
        print(f"esbench: error: no trained run with a train curve under {folder}", file=sys.stderr)
        return 2
    out = args.out or args.folder / OUT_NAME
    write_text_atomic(out, to_csv(table))
    print(f"| run | seed | steps | first | mean of last {LAST} | highest | skipped |\n|---|---|---|---|---|---|---|")
    for s in summary(table):
        print(f"| {s['label']} | {s['seed']} | {s['steps']} | {s['first']:.3f} | {s[f'last{LAST}']:.3f} | "
              f"{s['highest']:.3f} | {s['skipped']} |")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
