"""Analyse what training did to the model, from stored updates (no retraining): the command line.

    python -m harness.analysis results/quickstart          # a tables folder: the runs/<group>/<stamp> its versions.json names
    python -m harness.analysis runs/quickstart/<stamp>     # a records folder
    python -m harness.analysis runs/adhoc/<run>            # one run
    python -m harness.analysis results/quickstart --sparsity-prompts 0     # cheap parts only
    python -m harness.analysis runs/quickstart/<stamp> --out results/quickstart   # refresh the curated copy

Writes analysis.md, analysis.json, drift.png, localisation.png, sparsity.png and entropy.png into
outputs/<group>/ unless --out names a folder (harness/analysis/report.py); no records: exit 2 and
nothing written. Settings default to conf/config.yaml's `analysis:` block.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from harness.core.paths import CONF_DIR

# The analysis (torch, safetensors, matplotlib) loads after the arguments are parsed: `--help` and a
# usage error answer in a fraction of a second, not after 8 s of imports.


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.analysis", description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="results/<group> (the records its versions.json names), runs/<group>/<stamp> or one run folder")
    ap.add_argument("--out", type=Path, help="output folder (default: outputs/<group>)")
    ap.add_argument("--runs-dir", type=Path, default=Path("runs"), help="where records live (default: runs)")
    ap.add_argument("--sparsity-prompts", type=int, help="test prompts per sparsity re-evaluation (0: skip it)")
    ap.add_argument("--sparsity-samples", type=int, help="samples per prompt for pass@1 (0: greedy only)")
    args = ap.parse_args(argv)
    from omegaconf import OmegaConf

    from harness.analysis.report import analyse, resolve
    from harness.analysis.settings import analysis_config
    from harness.analysis.update import UpdateError
    from harness.core.errors import ConfigError

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        settings = dict(OmegaConf.to_container(OmegaConf.load(CONF_DIR / "config.yaml").get("analysis") or {}))
        for k in ("sparsity_prompts", "sparsity_samples"):
            if getattr(args, k) is not None:
                settings[k] = getattr(args, k)
        cfg = analysis_config(settings)
        records, out = resolve(args.folder, args.runs_dir)
        summary = analyse(records, args.out or out, cfg)
    except (UpdateError, ConfigError) as e:
        print(f"esbench: error: {e}", file=sys.stderr)
        return 2
    for line in summary["skipped"] + summary["not_ok"]:
        print(f"not analysed: {line}", file=sys.stderr)
    print(f"{len(summary['runs'])} runs analysed from {records} -> {(args.out or out) / 'analysis.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
