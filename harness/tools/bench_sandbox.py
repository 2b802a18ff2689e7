"""What the MBPP sandbox costs: per-program and per-test wall time on N reference solutions.

Scores N reference solutions one at a time through `MBPP.is_correct` (the full path a reward
takes: sandbox start, the program, the judge) and, as the no-sandbox baseline, runs the same
program (solution + setup + asserts) with a plain `python -I -S -B` subprocess. The overhead is
the difference; it is what isolation adds on top of starting Python, per program and per test.
Timing assertions do not belong in unit tests on a shared machine, so speed is measured here.

    python -m harness.tools.bench_sandbox --n 50
    python -m harness.tools.bench_sandbox --references   # every row's reference solution, judged
    python -m harness.tools.bench_sandbox --attacks      # the memory and data attacks of tests/hostile/

`--references` scores the reference solution of every MBPP row (all splits and the few-shot rows)
and reports how many tests are judged outside the sandbox (value compared in the harness) vs
inside, and which references fail.

`--attacks` runs the hostile programs that target memory and data (tests/hostile/) alone and as
MBPP completions, and reports for each: outcome, reward, wall time, and host memory taken (the
largest drop of MemAvailable while it ran, sampled every 10 ms, so other load on the host adds
noise) next to the sandbox's own peak when a cgroup measured it.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50, help="reference solutions to time")
    parser.add_argument("--references", action="store_true",
                        help="judge every row's reference solution instead of timing")
    parser.add_argument("--attacks", action="store_true",
                        help="run the memory and data attacks (tests/hostile/) and measure them")
    return parser


if __name__ == "__main__" and any(a in ("-h", "--help") for a in sys.argv[1:]):
    _parser().parse_args()  # prints the help and exits, before the imports below (datasets, pandas: 3 s)

from tasks.judge import sandbox
from tasks.mbpp import MBPP

from harness.core import paths

HOSTILE = paths.ROOT / "tests" / "hostile"


def _rows(task: MBPP, n: int) -> list[dict]:
    """The first n test-split rows: a fixed, reproducible sample."""
    return list(task.load("test"))[:n]


def _plain_script(row: dict) -> str:
    return "\n\n".join([row["code"], row["test_setup_code"] or "", *row["test_list"]]) + "\n"


def _time_plain(row: dict, work: Path) -> float:
    """Seconds to run the unjudged script in a bare subprocess: the cost without any sandbox."""
    script = work / "main.py"
    script.write_text(_plain_script(row), encoding="utf-8")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-I", "-S", "-B", str(script)], cwd=work,
                   stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    return time.perf_counter() - start


def _time_sandbox(task: MBPP, row: dict) -> tuple[float, bool]:
    start = time.perf_counter()
    ok = task.is_correct(task.gold_completion(code=row["code"]), test_list=row["test_list"],
                         test_setup_code=row["test_setup_code"])
    return time.perf_counter() - start, ok


def bench(n: int) -> dict:
    """Time n reference solutions in the sandbox and bare; return the summary row."""
    task = MBPP(n_eval=None)
    rows = _rows(task, n)
    task.is_correct(task.gold_completion(code=rows[0]["code"]), test_list=rows[0]["test_list"])
    sandbox, plain, passed = [], [], 0  # the warm-up above paid the one-off isolation probe
    with tempfile.TemporaryDirectory(prefix="esbench-bench-") as work:
        for row in rows:
            seconds, ok = _time_sandbox(task, row)
            sandbox.append(seconds)
            passed += ok
            plain.append(_time_plain(row, Path(work)))
    tests = sum(len(r["test_list"]) for r in rows)
    ms = lambda xs: round(1000 * statistics.mean(xs), 1)  # noqa: E731
    summary = {"programs": len(rows), "tests": tests, "passed": passed,
               "sandbox_ms_per_program": ms(sandbox),
               "sandbox_ms_per_program_median": round(1000 * statistics.median(sandbox), 1),
               "plain_ms_per_program": ms(plain),
               "overhead_ms_per_program": round(ms(sandbox) - ms(plain), 1),
               "overhead_ms_per_test": round((ms(sandbox) - ms(plain)) * len(rows) / tests, 1),
               "sandbox_ms_per_test": round(ms(sandbox) * len(rows) / tests, 1)}
    info = getattr(task, "run_info", None)
    if info:
        summary["run_info"] = info()
    return summary


def check_references() -> dict:
    """Judge every row's reference solution; the judge counts come from the task itself."""
    from tasks.base import DATA_DIR, read_jsonl  # noqa: PLC0415 - only this mode needs them
    task = MBPP(n_eval=None)
    rows = [r for _, r in read_jsonl(DATA_DIR / "mbpp" / "mbpp.jsonl", "MBPP data")]
    completions = [task.gold_completion(code=r["code"]) for r in rows]
    rewards = task.reward(completions, test_list=[r["test_list"] for r in rows],
                          test_setup_code=[r["test_setup_code"] for r in rows])
    failed = [r["task_id"] for r, x in zip(rows, rewards) if x != 1.0]
    return {"rows": len(rows), "passed": len(rows) - len(failed), "failed_task_ids": failed,
            **task.run_info()}


def _available_mib() -> int:
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:")) >> 10


def _measured(call) -> tuple[object, dict]:
    """Run call(); return its result with wall seconds and the host memory it took (MiB)."""
    before, low, stop = _available_mib(), [_available_mib()], threading.Event()

    def sample():
        while not stop.wait(0.01):
            low[0] = min(low[0], _available_mib())
    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    start = time.perf_counter()
    try:
        result = call()
    finally:
        stop.set()
        watcher.join()
    return result, {"seconds": round(time.perf_counter() - start, 2),
                    "host_mib_taken": max(0, before - low[0])}


def attacks() -> dict:
    """Each memory or data attack alone (run_python) and as an MBPP completion (reward)."""
    task = MBPP(n_eval=None)
    rows = list(task.load("test"))[:10]
    out = {"layers": {k: v for k, v in sandbox.layers().items() if v}}
    for name in ("tmpfs_nested_ns", "fork_children_300mib"):
        source = (HOSTILE / f"{name}.py").read_text()
        result, cost = _measured(lambda: sandbox.run_python(source, timeout_s=10))
        out[f"{name} (run_python)"] = {
            "ok": result.ok, "returncode": result.returncode, **cost,
            "sandbox_peak_mib": getattr(result, "peak_memory_mb", None),
            "stdout": result.stdout_tail[-300:], "stderr": result.stderr_tail[-300:]}
        # The attack appended to a correct solution: does the completion still score?
        row = rows[0]
        code = f"{row['code']}\ntry:\n    exec({source!r})\nexcept SystemExit:\n    pass\n"
        reward, cost = _measured(lambda: task.reward(
            [task.gold_completion(code=code)], test_list=[row["test_list"]],
            test_setup_code=[row["test_setup_code"]])[0])
        out[f"{name} + reference (MBPP)"] = {"reward": reward, **cost}
    source = (HOSTILE / "copy_answer.py").read_text()
    rewards, cost = _measured(lambda: task.reward(
        [task.gold_completion(code=source)] * len(rows), test_list=[r["test_list"] for r in rows],
        test_setup_code=[r["test_setup_code"] for r in rows]))
    out["copy_answer (MBPP)"] = {"rewards": f"{sum(rewards):g}/{len(rows)}", **cost}
    return out


def main(argv: list[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    result = check_references() if args.references else attacks() if args.attacks else bench(args.n)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
