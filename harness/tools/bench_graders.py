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

`--worst` times the worst cases of one completion's time slice (tasks/judge/budget.py) and writes
them to results/bench/graders.json: a 64-completion GSM8K and MATH-500 reward call of answers
that each run sympy to the end of their slice (all 64, and the red team's 8 first + 56 correct,
whose correct answers must all score 1), and MATH-500's evaluation grading path (what
harness/evaluation/evaluate.py calls on the sampled completions) with 10% hostile samples, at
--prompts x 33 samples (10 x 33 by default, so that it runs in a few minutes on two shared cores;
`per_500_prompts_s` scales it linearly to the 500 x 33 of a full evaluation). Run from an older
checkout, it times that code's path (serial is_correct and extract_answer plus reward, as
evaluate() did then), so before and after come from one script.

    python -m harness.tools.bench_graders
    python -m harness.tools.bench_graders --attacks
    python -m harness.tools.bench_graders --worst [--prompts 10] [--out results/bench/graders.json]
    python -m harness.tools.bench_graders --code [--out results/bench/graders_code.json]

`--code` times MBPP's evaluation grading of 8 programs that sleep past their slice beside 8 correct ones, in
the order evaluation once took them (one `is_correct` after another: the generic path of
harness/evaluation/grading.py, which MBPP and HumanEval took before they had `judge_all`) and in parallel slices
(`task.judge_all`, `workers` at a time), with the slice bound `task.call_bound_s(n)`; the scores must agree.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
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


# Answers that pass every cost guard and keep sympy busy to the end of any slice (the 5 s limit
# before slices): MATH-500 verifies them; GSM8K's rule 3 evaluates FLOOR to a number.
FLOOR = (r"\lfloor \cos(\lfloor \sin(9999!) \rfloor) \rfloor + "
         r"\lfloor \cos(\lfloor \sin(9998!) \rfloor) \rfloor")
SLOW = {"math500": [r"\boxed{\sin(x)^{9999}}", f"\\boxed{{{FLOOR}}}",
                    r"\boxed{\sin(x)^{9999}+\cos(x)^{9999}}"],
        "gsm8k": [f"so $\\boxed{{{FLOOR}}}$", f"#### $\\boxed{{{FLOOR}}}$", f"\\boxed{{{FLOOR}}}"]}
RIGHT = r"so there are $\boxed{\frac{36}{2}}$"


def _worker_cpu() -> float | None:
    """Worker CPU seconds so far (None before per-completion slices: the old code kept none)."""
    from tasks.judge import bounded

    return bounded.worker_cpu() if hasattr(bounded, "worker_cpu") else None


def _costs(start: float, cpu: float | None) -> dict:
    """Wall time, and worker CPU time: on shared cores the wall time depends on the load."""
    now = _worker_cpu()
    return {"wall_s": round(time.perf_counter() - start, 1),
            "worker_cpu_s": None if cpu is None or now is None else round(now - cpu, 1),
            "load": round(os.getloadavg()[0], 1)}


def _reward_call(task, completions: list[str], gold: str) -> dict:
    start, cpu = time.perf_counter(), _worker_cpu()
    rewards = task.reward(completions, answer=[gold] * len(completions))
    return {"n": len(completions), **_costs(start, cpu), "correct_scored": int(sum(rewards)),
            "correct_given": completions.count(RIGHT)}


def _evaluation_grading(task, flat: list[str], rows: list[dict]) -> tuple[list[bool], list]:
    """What evaluate() does with the sampled completions, in the checked-out version."""
    try:
        from harness.evaluation.grading import judge_all
    except ImportError:  # before per-completion slices: serial is_correct, a reward call, extract
        correct = [task.is_correct(t, **r) for t, r in zip(flat, rows)]
        task.reward(flat, answer=[r["answer"] for r in rows])
        return correct, [task.extract_answer(t) for t in flat]
    correct, answers = judge_all(task, flat, rows)
    if not getattr(task, "reward_is_correct", False):
        task.reward(flat, answer=[r["answer"] for r in rows])
    return correct, answers


def worst(prompts: int, out: str) -> None:
    from tasks.gsm8k import GSM8K
    from tasks.math500 import MATH500

    result = {"command": "python -m harness.tools.bench_graders --worst --prompts " + str(prompts),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores, load "
                         f"{os.getloadavg()[0]:.1f} at start (other jobs share them)",
              "git": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                                    capture_output=True).stdout.strip(), "reward_64": {}}
    for name, task in (("gsm8k", GSM8K()), ("math500", MATH500())):
        task.reward([RIGHT] * 8, answer=["18"] * 8)  # workers up: a start is not a completion's
        slow = [SLOW[name][i % 3] for i in range(64)]
        result["reward_64"][name] = {
            "all_slow": _reward_call(task, slow, "18"),
            "8_slow_first_56_correct": _reward_call(task, slow[:8] + [RIGHT] * 56, "18")}
        print(name, json.dumps(result["reward_64"][name]), flush=True)
    m = MATH500()
    rows = m.load("test").select(range(prompts))
    flat, args = [], []
    for i, (solution, gold) in enumerate(zip(rows["solution"], rows["answer"])):
        for j in range(33):  # every tenth sample hostile: 10% (3 or 4 of 33 per prompt)
            flat.append(SLOW["math500"][j % 3] if (i * 33 + j) % 10 == 0 else solution)
            args.append({"answer": gold})
    start, cpu = time.perf_counter(), _worker_cpu()
    correct, answers = _evaluation_grading(m, flat, args)
    costs = _costs(start, cpu)
    hostile = sum(t in SLOW["math500"] for t in flat)
    result["math500_evaluation"] = {
        "prompts": prompts, "samples_per_prompt": 33, "completions": len(flat), "hostile": hostile,
        **costs, "per_500_prompts_s": round(costs["wall_s"] * 500 / prompts),
        "honest_scored": sum(c for c, t in zip(correct, flat) if t not in SLOW["math500"]),
        "honest_given": len(flat) - hostile,
        "note": "grading only (no generation); per_500_prompts_s scales the measured time linearly"}
    print("math500 evaluation", json.dumps(result["math500_evaluation"]), flush=True)
    path = ROOT / out
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")


SLEEPER = "```python\nimport time\ntime.sleep(60)\n```"


def code(out: str) -> None:
    from tasks.mbpp import MBPP

    task = MBPP(n_eval=None)
    row = next(r for r in task.load("test") if r["task_id"] == 11)
    gold = task.gold_completion(code=row["code"])
    completions = [SLEEPER, gold] * 8
    rows = [{"test_list": row["test_list"], "test_setup_code": row["test_setup_code"]}] * len(completions)
    task.reward([gold], test_list=[row["test_list"]])  # the row's clean run: once, not per completion
    result = {"command": "python -m harness.tools.bench_graders --code",
              "machine": f"{platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} at start",
              "git": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                                    capture_output=True).stdout.strip(),
              "task": {"timeout_s": task.timeout_s, "judge_s": task.judge_s, "workers": task.workers},
              "completions": len(completions), "sleepers": completions.count(SLEEPER),
              "bound_s": task.call_bound_s(len(completions))}
    start = time.perf_counter()
    serial = [bool(task.is_correct(c, **r)) for c, r in zip(completions, rows)]
    result["one_by_one"] = {"wall_s": round(time.perf_counter() - start, 1), "correct": sum(serial)}
    start = time.perf_counter()
    parallel = [ok for ok, _ in task.judge_all(completions, rows)]
    result["parallel_slices"] = {"wall_s": round(time.perf_counter() - start, 1), "correct": sum(parallel),
                                 "load": round(os.getloadavg()[0], 1)}
    assert serial == parallel, "the two paths scored differently"
    print(json.dumps(result), flush=True)
    path = ROOT / out
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--attacks", action="store_true", help="time the exploding answers")
    parser.add_argument("--deadline", type=float, default=60.0, help="seconds per attack run")
    parser.add_argument("--worst", action="store_true", help="time the worst cases, write --out")
    parser.add_argument("--prompts", type=int, default=10, help="--worst: MATH-500 prompts x 33 samples")
    parser.add_argument("--code", action="store_true", help="time MBPP's evaluation grading with sleepers")
    parser.add_argument("--out", default=None, help="--worst, --code: where to write (results/bench/graders.json, "
                                                    "results/bench/graders_code.json)")
    args = parser.parse_args(argv)
    if args.code:
        code(args.out or "results/bench/graders_code.json")
    elif args.worst:
        worst(args.prompts, args.out or "results/bench/graders.json")
    else:
        attacks(args.deadline) if args.attacks else common_path()


if __name__ == "__main__":
    main()
