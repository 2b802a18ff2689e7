"""Rebuild tables and plots from run records: the command line over harness/reporting/.

    python -m harness.reporting runs/quickstart/<stamp>                         # -> outputs/quickstart/
    python -m harness.reporting runs/quickstart/<stamp> --out results/quickstart  # refresh the curated copy
    python -m harness.reporting runs/adhoc                                        # a folder of single runs

Tables go to outputs/<group>/ unless --out names a folder: the curated results/ are rewritten only
when asked, by name. A folder with no records is an error (exit 2, one line) and writes nothing,
so a mistyped path (results/quickstart holds tables, not records) cannot replace a good table.

An experiment folder has an experiment.json (its plan: runs with no record are marked MISSING);
a folder of single runs has none, and each run is then a cell of its own. Both go through the
same aggregation and write the same files (harness/reporting/report.py lists them). Records from
an unreadable schema are skipped with a warning; failed, interrupted and running runs stay in the
tables as marked rows, so nothing disappears silently.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

# The tables (pandas, matplotlib) load after the arguments are parsed: `--help` answers at once.


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.reporting", description="Rebuild tables from run records.")
    ap.add_argument("records", type=Path, help="a records folder: runs/<group>/<stamp> or a folder of single runs")
    ap.add_argument("--out", type=Path, help="output folder (default: outputs/<group>)")
    ap.add_argument("--title", default=None, help="table title (default: the experiment's group)")
    ap.add_argument("--select-by", default=None, help="validation metric that chooses grid points "
                    "(default: the experiment's select_by, else greedy_acc)")
    ap.add_argument("--experiment", action="store_true", help=argparse.SUPPRESS)  # accepted; no longer needed
    args = ap.parse_args(argv)
    from harness.reporting.report import NoRecords, output_name, rebuild

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    if not args.records.is_dir():
        ap.error(f"{args.records} is not a folder; pass runs/<group>/<stamp> (see `ls runs/`)")
    out = args.out or Path("outputs") / output_name(args.records)
    try:
        print(rebuild(args.records, out, args.select_by, args.title))
    except NoRecords as e:
        print(f"esbench: error: {e}", file=sys.stderr)
        return 2
    print(f"tables: {out}/", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
