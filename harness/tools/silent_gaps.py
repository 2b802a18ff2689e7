"""Run a command, stamp every line it prints with the time it arrived, and report its longest silences.

    python -m harness.tools.silent_gaps --log /tmp/qs.log -- python -m harness lanes=1
    python -m harness.tools.silent_gaps --read /tmp/qs.log          # the report of a log written before (or .log.gz)
    python -m harness.tools.silent_gaps --read /tmp/qs.log --json results/bench/x.json   # also as JSON

"No silent minute" is a property of what a user sees, so this reads what the terminal would show:
stdout and stderr merged, and a carriage return (a progress bar redrawing itself) counts as a line,
since the user sees it change. The log has one line per event, `<seconds since start>\t<text>`, so
a gap can be found again later and quoted with the lines on either side. The report gives the wall
time, the line count, the 1-minute load average before the start (silences stretch under load) and
the `--top` longest gaps, each with the line before and after it, and the commit it ran at.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from harness.core.records import git_sha  # the checkout the command runs from (its cwd's harness)


def record(cmd: list[str], log: Path) -> int:
    """Run `cmd`, echo its output, and write each line (or redraw) with its arrival time to `log`."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, bufsize=0)
    buf = b""
    with open(log, "w", encoding="utf-8") as out:
        out.write(f"# cmd\t{' '.join(cmd)}\n# load1\t{os.getloadavg()[0]:.2f}\n# git\t{git_sha()}\n")
        while chunk := proc.stdout.read(65536):  # unbuffered: whatever one read() syscall returns
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
            buf += chunk
            now = time.monotonic() - t0
            *lines, buf = buf.replace(b"\r", b"\n").split(b"\n")
            for line in lines:
                if line.strip():
                    out.write(f"{now:.2f}\t{line.decode('utf-8', 'replace')}\n")
            out.flush()
        rc = proc.wait()
        out.write(f"{time.monotonic() - t0:.2f}\t# exit {rc}\n")
    return rc


def summary(log: Path, top: int = 5) -> dict:
    """The wall time, line count, load before the start and the `top` longest gaps of a log `record` wrote."""
    events, meta = [], {}
    text = gzip.decompress(log.read_bytes()).decode() if log.suffix == ".gz" else log.read_text(encoding="utf-8")
    for raw in text.splitlines():
        head, _, text = raw.partition("\t")
        if head == "#" or raw.startswith("# "):
            key, _, val = raw[2:].partition("\t")
            meta[key] = val
        else:
            events.append((float(head), text))
    if not events:
        raise SystemExit(f"{log}: no timestamped lines (was it written by `silent_gaps --log`?)")
    gaps = sorted(((b[0] - a[0], a, b) for a, b in zip([(0.0, "(start)"), *events], events)), reverse=True)
    return {"cmd": meta.get("cmd", "?"), "git_sha": meta.get("git", "?"), "load1_before": float(meta.get("load1", "nan")),
            "wall_s": events[-1][0], "lines": len(events),
            "gaps": [{"s": round(g, 2), "from_s": ta, "after": a, "to_s": tb, "before": b}
                     for g, (ta, a), (tb, b) in gaps[:top]]}


def report(log: Path, top: int = 5) -> str:
    """summary() as text: one line a gap, with the lines on either side."""
    s = summary(log, top)
    lines = [f"{log}: {s['cmd']}", f"wall {s['wall_s']:.0f} s, {s['lines']} lines, load1 before start "
                                   f"{s['load1_before']:.2f}", "longest silent gaps (s):"]
    for g in s["gaps"]:
        lines.append(f"  {g['s']:7.1f}  from {g['from_s']:7.1f} s {g['after'][:90]!r}\n"
                     f"{'':11}to   {g['to_s']:7.1f} s {g['before'][:90]!r}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    cmd = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(prog="python -m harness.tools.silent_gaps", description=__doc__.split("\n")[0])
    ap.add_argument("--log", type=Path, help="where to write the timestamped log (with a command after --)")
    ap.add_argument("--read", type=Path, help="report on a log written before, running nothing")
    ap.add_argument("--top", type=int, default=5, help="how many of the longest gaps to list (default 5)")
    ap.add_argument("--json", type=Path, help="also write the summary here as JSON, with this checkout's commit")
    args = ap.parse_args(own)
    if not args.read and (not cmd or not args.log):
        ap.error("give --log FILE and the command after `--` (or --read FILE)")
    rc = 0 if args.read else record(cmd, args.log)
    log = args.read or args.log
    print(report(log, args.top))
    if args.json:
        from harness.core.atomic import write_text_atomic

        write_text_atomic(args.json, json.dumps(summary(log, args.top), indent=1) + "\n")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
