"""What the graders cost: time to score the shipped MATH-500 and GSM8K data, and the attacks' times.

The common path: MATH-500's 500 reference solutions (and 500 wrong boxed answers), GSM8K's
hand-judged corpus (tests/data/gsm8k_grading.jsonl, its first 50 rows ten times), 500 GSM8K test
solutions (rule 1) and 500 boxed GSM8K answers (rule 3, math-verify). Each line gives the time for
500 completions, per completion, and how many scored correct (the counts must not move between
versions of the graders). Timing assertions do not belong in unit tests on a shared machine, so
speed is measured here.

`--attacks` scores each exploding answer in ATTACKS (and one that passes tasks/judge/bounded.py's
guard, to time its limit) on a worker thread (where rewards are computed) and on the main thread,
each in its own process cut off after --deadline seconds, and prints the result and the time
("HUNG" when cut off).

    python -m harness.tools.bench_graders
    python -m harness.tools.bench_graders --attacks
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from harness.core import paths

ROOT = paths.ROOT
ATTACKS = [r"\boxed{(10^{9999})^{9999}}", r"\boxed{((10^{999})^{999})^{999}}",
           r"\boxed{10^{9999\cdot 9999}}", r"\boxed{(10^{9})!}",
           r"\boxed{" + "(" * 450 + "1" + ")" * 450 + "}",
           r"\boxed{(10^{9999}x)^{9999}}"]  # passes the guard (a variable): the time limit's case


def _timed(label: str, score, n: int) -> None:
    start = time.perf_counter()
    rewards = score()
    wall = time.perf_counter() - start
    print(f"{label}: {n} in {wall:.2f} s ({wall / n * 1e3:.2f} ms each), {sum(rewards):.0f} correct",
          flush=True)


def common_path() -> None:
    from tasks.gsm8k import GSM8K
    from tasks.math500 import MATH500

    m = MATH500(n_eval=None)
    rows = m.load("test")
    m.reward(["\\boxed{1}"], answer=["1"])  # imports sympy (or starts a worker): not per completion
    _timed("math500 reference solutions", lambda: m.reward(rows["solution"], answer=rows["answer"]), 500)
    wrong = [f"\\boxed{{{a}1}}" for a in rows["answer"]]
    _timed("math500 wrong boxed answers", lambda: m.reward(wrong, answer=rows["answer"]), 500)
    g = GSM8K(n_eval=None)
    lines = (ROOT / "tests" / "data" / "gsm8k_grading.jsonl").read_text().splitlines()
    corpus = [json.loads(line) for line in lines if line.strip()][:50]
    _timed("gsm8k grading corpus (first 50 rows x 10)",
           lambda: g.reward([c["completion"] for c in corpus] * 10,
                            answer=[c["gold"] for c in corpus] * 10), 500)
    test = g.load("test").select(range(500))
    _timed("gsm8k test solutions", lambda: g.reward(test["solution"], answer=test["answer"]), 500)
    boxed = [f"so the total is $\\boxed{{{a}}}$" for a in test["answer"]]
    _timed("gsm8k boxed answers (rule 3, math-verify)",
           lambda: g.reward(boxed, answer=test["answer"]), 500)


_ONE = """
import sys, threading, time
from tasks.gsm8k import GSM8K
from tasks.math500 import MATH500
task, text, where = sys.argv[1], sys.argv[2], sys.argv[3]
score = ((lambda: MATH500().is_correct(text, answer="5")) if task == "math500"
         else (lambda: GSM8K().extract_answer("so " + text)))
MATH500().is_correct("\\\\boxed{1}", answer="1")  # imports and worker start are not the attack's
out = {}
def run():
    start = time.perf_counter(); out["r"] = score(); out["s"] = time.perf_counter() - start
if where == "thread":
    threading.Thread(target=run, daemon=True).start()
    while "s" not in out: time.sleep(0.01)
else:
    run()
print(repr(out["r"]), f"{out['s']:.2f} s", flush=True)
"""


def attacks(deadline: float) -> None:
    for task in ("math500", "gsm8k"):
        for i, text in enumerate(ATTACKS):
            cells = []
            for where in ("thread", "main"):
                try:
                    done = subprocess.run([sys.executable, "-c", _ONE, task, text, where], cwd=ROOT,
                                          capture_output=True, text=True, timeout=deadline)
                    cells.append(f"{where}: " + (done.stdout.strip().splitlines() or ["?"])[-1])
                except subprocess.TimeoutExpired:
                    cells.append(f"{where}: HUNG > {deadline:.0f} s")
            shown = text if len(text) < 40 else text[:20] + "..."
            print(f"{task} {shown}: " + "; ".join(cells), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--attacks", action="store_true", help="time the exploding answers")
    parser.add_argument("--deadline", type=float, default=60.0, help="seconds per attack run")
    args = parser.parse_args(argv)
    attacks(args.deadline) if args.attacks else common_path()


if __name__ == "__main__":
    main()
