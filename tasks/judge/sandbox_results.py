"""Read what a sandboxed run left: its result records within a stated memory bound, and its tails.

The records come as nonce-prefixed JSON lines (tasks/judge/sandbox.py). A completion that finds the
runner's `emit` can write any line it likes, and JSON is cheap to write but dear to build: one
16 MiB line of `[],[],...` became ~4 million lists, ~350 MiB in the judge per completion, before
any judge limit looked at it. So the stream is read one line at a time, and a line is refused
*before* it is parsed when it would pass:

- RECORD_BYTES, the length of one line (so the 16 MiB line costs one 2 MiB read), or
  RESULT_BYTES, all lines together: limit "bytes";
- RESULT_ITEMS, the JSON items of all records together, counted as the `[`, `{`, `,` and `:`
  bytes of each line (every JSON value after a record's first follows one of them, so the count
  is an upper bound; bytes inside strings only make it larger): limit "items". A parsed item
  costs at most ~85 bytes (a list nested in a list), so the parsed records never hold more than
  ~11 MiB, and the whole read, with one line and its decoded copy, stays below 16 MiB
  (tests/test_sandbox_result_cap.py measures the worst shapes).

Honest records are far below both: MBPP's largest literal expected value makes a 3.7 KB record
of 776 items (task 493); the judge's own limits (tasks/judge/mbpp_judge.Limits) then bound the values
rebuilt from them. A plain node takes ~3 items (`["i","1"],`), so a value past ~43k nodes fails
here on "items", before the judge's own items limit (mbpp_runner.MAX_NODES, 100k) would see it.
A refused stream keeps the records before the refused line; the judge fails the test that line
belonged to on the limit (tasks/judge/code_runs.py), and `ok` is False.

    python -m pytest tests/test_sandbox_result_cap.py -x -q
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

RESULT_BYTES = 4 << 20  # every record line together
RECORD_BYTES = 2 << 20  # one record line (MBPP's largest expected value's: 3.7 KB)
RESULT_ITEMS = 1 << 17  # JSON items of every record together (that record's: 776)
TAIL_CHARS = 2000


@dataclass(frozen=True)
class Stream:
    """The records read (those before a refused line), whether the run's `done` record ended them,
    and the limit that refused a line (None if none did) with a one-line reason."""

    records: tuple = ()
    done: bool = False
    malformed: bool = False  # a line that is not ours, or not a JSON object: no records at all
    over_limit: str | None = None  # "bytes" or "items"
    reason: str = ""


def _items(line: bytes) -> int:
    return 1 + line.count(b"[") + line.count(b"{") + line.count(b",") + line.count(b":")


def read_records(f, nonce: str) -> Stream:
    """Parse the result file `f` (binary, readable) within the limits above."""
    f.seek(0)
    prefix = f"{nonce} ".encode()
    records, total, items = [], 0, 0
    while line := f.readline(RECORD_BYTES + 1):
        if not line.startswith(prefix):
            return Stream(malformed=True)
        total += len(line)
        if len(line) > RECORD_BYTES or total > RESULT_BYTES:
            what = (f"a result record is longer than {RECORD_BYTES} bytes"
                    if len(line) > RECORD_BYTES else
                    f"the result records pass {RESULT_BYTES} bytes together")
            return Stream(tuple(records), over_limit="bytes", reason=what)
        items += _items(line)  # the nonce is hex: it adds no item
        if items > RESULT_ITEMS:
            return Stream(tuple(records), over_limit="items", reason=(
                f"the result records hold more than {RESULT_ITEMS} JSON items together"))
        try:
            record = json.loads(line[len(prefix):])
        except (ValueError, RecursionError):
            return Stream(malformed=True)
        if not isinstance(record, dict):
            return Stream(malformed=True)
        records.append(record)
    done = [i for i, r in enumerate(records) if r.get("done") is True]
    return Stream(tuple(records), done == [len(records) - 1] if records else False)


def tail(f) -> str:
    """The last TAIL_CHARS characters of binary file `f`, reading no more than their bytes."""
    size = os.fstat(f.fileno()).st_size
    f.seek(max(0, size - TAIL_CHARS * 4))
    return f.read(TAIL_CHARS * 4).decode("utf-8", "replace")[-TAIL_CHARS:]
