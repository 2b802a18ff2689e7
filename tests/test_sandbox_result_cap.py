"""The judge reads a run's result records within a stated memory bound.

A completion that walks the stack to the runner's `emit` can write one 16 MiB line of `[],[],...`;
the judge used to parse it whole, before any limit of its own: 143 -> 487 MiB of harness RSS for
one completion, 760 MiB for two at once, 4-6 s each. tasks/judge/sandbox_results.py now refuses a line
over RECORD_BYTES, a stream over RESULT_BYTES or RESULT_ITEMS before parsing it, and the test the
line answered fails on that judge limit.

    python -m pytest tests/test_sandbox_result_cap.py -x -q
    python tests/test_sandbox_result_cap.py    # prints the harness's peak RSS per attack
"""
import io
import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from tasks.judge import sandbox_results
from tasks.judge.sandbox_results import RECORD_BYTES, RESULT_BYTES, RESULT_ITEMS, read_records

ROOT = Path(__file__).parents[1]
NONCE = "ab" * 16
TESTS = ["assert f(1) == [1]", "assert f(2) == [2]", "assert f(3) == [3]"]
# Each is `[[]] * n` as the value of test 0, emitted through the runner's own emit.
SIXTEEN_MIB_LINE = 4_000_000  # json.dumps writes "[], " per item: ~15.3 MiB, under RLIMIT_FSIZE
UNDER_EVERY_CAP = RESULT_ITEMS // 3 - 100  # `[]` and `, ` per item, under the item cap
GROWTH_MIB = 40  # the most a judged completion may add to the harness's peak RSS


def _stream(*records, raw: bytes = b"") -> io.BytesIO:
    lines = b"".join(f"{NONCE} {json.dumps(r)}\n".encode() for r in records)
    return io.BytesIO(lines + raw)


def test_honest_records_are_read_whole():
    got = read_records(_stream({"layers": {}}, {"i": 0, "value": ["i", "1"]}, {"done": True}),
                       NONCE)
    assert got.records == ({"layers": {}}, {"i": 0, "value": ["i", "1"]}, {"done": True})
    assert got.done and got.over_limit is None and not got.malformed


def test_a_long_line_is_refused_unread():
    line = f"{NONCE} ".encode() + b"[" + b"[], " * (RECORD_BYTES // 4) + b"[]]\n"
    f = _stream({"i": 0, "value": ["i", "1"]}, raw=line)
    got = read_records(f, NONCE)
    assert got.over_limit == "bytes" and not got.done
    assert got.records == ({"i": 0, "value": ["i", "1"]},)  # the records before it are kept
    assert f.tell() <= RECORD_BYTES * 1.1  # the rest of the line was never read


def test_the_whole_stream_has_a_byte_cap():
    chunk = {"i": 0, "value": ["s", "x" * (RECORD_BYTES // 2)]}  # each line under RECORD_BYTES
    got = read_records(_stream(*[chunk] * (RESULT_BYTES // (RECORD_BYTES // 2) + 1)), NONCE)
    assert got.over_limit == "bytes" and 0 < len(got.records) < RESULT_BYTES // (RECORD_BYTES // 2)


def test_items_are_counted_before_parsing():
    """A short line of many small items is refused before json builds them."""
    value = [[]] * (RESULT_ITEMS + 1)
    line = _stream({"i": 0, "value": value}).getvalue()
    assert len(line) < RECORD_BYTES  # the byte cap alone would let it through
    tracemalloc.start()
    got = read_records(io.BytesIO(line), NONCE)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert got.over_limit == "items" and got.records == ()
    assert peak < 1.5 * len(line), f"read {len(line)} bytes, held {peak}: it was parsed"


def test_items_just_under_the_cap_are_parsed():
    value = [[]] * UNDER_EVERY_CAP
    got = read_records(_stream({"i": 0, "value": value}, {"done": True}), NONCE)
    assert got.over_limit is None and got.done and got.records[0]["value"] == value


def _nested(depth: int) -> list:
    value = []
    for _ in range(depth):
        value = [value]
    return value


WORST_SHAPES = {  # each just under RESULT_ITEMS (or RECORD_BYTES): the dearest to parse
    "nested lists": lambda: [_nested(50)] * (RESULT_ITEMS // 52 - 2),  # ~85 bytes per item
    "dict of lists": lambda: {f"{i:x}": [] for i in range(RESULT_ITEMS // 3 - 10)},
    "short strs": lambda: [f"{i:x}" for i in range(RESULT_ITEMS - 10)],
    "long strs": lambda: [f"{i:060d}" for i in range(RECORD_BYTES // 64 - 100)],
}


@pytest.mark.parametrize("shape", WORST_SHAPES)
def test_the_worst_shapes_under_the_caps_stay_under_16_mib(shape):
    line = f"{NONCE} {json.dumps({'i': 0, 'value': WORST_SHAPES[shape]()})}\n".encode()
    f = io.BytesIO(line)
    del line
    tracemalloc.start()
    got = read_records(f, NONCE)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert got.over_limit is None and got.records, "not under the caps: the test proves nothing"
    assert peak < 16 << 20, f"reading held {peak / 2**20:.1f} MiB"


@pytest.mark.parametrize("line", [b"not ours\n", f"{NONCE} [1]\n".encode(),
                                  f"{NONCE} {{bad json\n".encode()])
def test_a_line_that_is_not_a_record_spoils_the_stream(line):
    got = read_records(_stream({"i": 0, "value": ["i", "1"]}, raw=line), NONCE)
    assert got.malformed and got.records == () and not got.done


def test_tail_reads_only_the_tail(tmp_path):
    class Counting:
        def __init__(self, f):
            self.f, self.read_bytes = f, 0

        def __getattr__(self, name):
            return getattr(self.f, name)

        def read(self, n=-1):
            data = self.f.read(n)
            self.read_bytes += len(data)
            return data

    with open(tmp_path / "stdout", "w+b") as f:
        f.write(b"x" * (8 << 20) + b"the end")
        counted = Counting(f)
        assert sandbox_results.tail(counted) == "x" * (sandbox_results.TAIL_CHARS - 7) + "the end"
        assert counted.read_bytes <= 4 * sandbox_results.TAIL_CHARS


def _attack(n: int) -> str:
    """A completion that finds the runner's emit and sends `[[]] * n` as test 0's value."""
    return ("import os, sys\nframe = sys._getframe()\nwhile 'emit' not in frame.f_locals:\n"
            "    frame = frame.f_back\n"
            f"frame.f_locals['emit']({{'i': 0, 'value': [[]] * {n}}})\n"
            "frame.f_locals['emit']({'done': True})\nos._exit(0)\n")


# Runs in a fresh harness process: its peak RSS while judging `n` attacks at once, in MiB.
_MEASURE = """
import json, sys, threading, time
sys.path.insert(0, {root!r})
from tasks.mbpp import MBPP

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith(key))

task = MBPP(n_eval=None, timeout_s=30)
task.judge_completion("def f(x):\\n    return [x]\\n", {tests!r})  # warm: probe, plan, watchdog
base = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak (VmHWM) starts again from here
verdicts, start = [], time.perf_counter()
threads = [threading.Thread(target=lambda: verdicts.append(task.judge_completion({code!r},
                                                                                {tests!r})))
           for _ in range({parallel})]
[t.start() for t in threads]
[t.join() for t in threads]
print(json.dumps({{"base_mib": round(base), "peak_mib": round(status("VmHWM")),
                  "seconds": round(time.perf_counter() - start, 1),
                  "limits": [v.limit for v in verdicts], "ok": [v.ok for v in verdicts]}}))
"""


def measure(n: int, parallel: int = 1) -> dict:
    """Judge `parallel` attacks of `[[]] * n` at once in a fresh harness; its RSS before and at
    its peak, in MiB, and the verdicts' limits."""
    script = _MEASURE.format(root=str(ROOT), tests=TESTS, code=_attack(n), parallel=parallel)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def can_measure():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError as e:
        pytest.skip(f"cannot reset the peak RSS (/proc/self/clear_refs: {e.strerror})")


@pytest.mark.parametrize("n, parallel, limit", [(SIXTEEN_MIB_LINE, 1, "bytes"),
                                                (SIXTEEN_MIB_LINE, 2, "bytes"),
                                                (UNDER_EVERY_CAP, 1, None)])
def test_the_harness_holds_a_few_mib_per_attack(can_measure, n, parallel, limit):
    """The 16 MiB line (alone and two at once) and the largest line the caps let through."""
    got = measure(n, parallel)
    assert got["limits"] == [limit] * parallel and not any(got["ok"]), got
    assert got["peak_mib"] - got["base_mib"] < GROWTH_MIB, got


if __name__ == "__main__":
    for n, parallel in [(SIXTEEN_MIB_LINE, 1), (SIXTEEN_MIB_LINE, 2), (UNDER_EVERY_CAP, 1)]:
        print(f"[[]] * {n}, {parallel} at once: {measure(n, parallel)}")
