"""Run a command, stamp every line it prints with the time it arrived, and report its longest silences.

    python -m harness.tools.silent_gaps --log /tmp/qs.log -- python -m harness lanes=1
    python -m harness.tools.silent_gaps --read /tmp/qs.log          # the report of a log written before

"No silent minute" is a property of what a user sees, so this reads what the terminal would show:
stdout and stderr merged, and a carriage return (a progress bar redrawing itself) counts as a line,
since the user sees it change. The log has one line per event, `<seconds since start>\t<text>`, so
a gap can be found again later and quoted with the lines on either side. The report gives the wall
time, the line count, the 1-minute load average before the start (silences stretch under load) and
the `--top` longest gaps, each with the line before and after it.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path


def record(cmd: list[str], log: Path) -> int:
    """Run `cmd`, echo its output, and write each line (or redraw) with its arrival time to `log`."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, bufsize=0)
    buf = b""
    with open(log, "w", encoding="utf-8") as out:
        out.write(f"# cmd\t{' '.join(cmd)}\n# load1\t{os.getloadavg()[0]:.2f}\n")
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


def report(log: Path, top: int = 5) -> str:
    """The wall time, line count and longest gaps of a log `record` wrote."""
    events, meta = [], {}
    for raw in log.read_text(encoding="utf-8").splitlines():
        head, _, text = raw.partition("\t")
        if head == "#" or raw.startswith("# "):
            key, _, val = raw[2:].partition("\t")
            meta[key] = val
        else:
            events.append((float(head), text))
    if not events:
        raise SystemExit(f"{log}: no timestamped lines (was it written by `silent_gaps --log`?)")
    gaps = sorted(((b[0] - a[0], a, b) for a, b in zip([(0.0, "(start)"), *events], events)), reverse=True)
    lines = [f"{log}: {meta.get('cmd', '?')}",
             f"wall {events[-1][0]:.0f} s, {len(events)} lines, load1 before start {meta.get('load1', '?')}",
             f"longest silent gaps (s):"]
    for gap, (ta, a), (tb, b) in gaps[:top]:
        lines.append(f"  {gap:7.1f}  from {ta:7.1f} s {a[:90]!r}\n{'':11}to   {tb:7.1f} s {b[:90]!r}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    cmd = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(prog="python -m harness.tools.silent_gaps", description=__doc__.split("\n")[0])
    ap.add_argument("--log", type=Path, help="where to write the timestamped log (with a command after --)")
    ap.add_argument("--read", type=Path, help="report on a log written before, running nothing")
    ap.add_argument("--top", type=int, default=5, help="how many of the longest gaps to list (default 5)")
    args = ap.parse_args(own)
    if args.read:
        print(report(args.read, args.top))
        return 0
    if not cmd or not args.log:
        ap.error("give --log FILE and the command after `--` (or --read FILE)")
    rc = record(cmd, args.log)
    print(report(args.log, args.top))
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
