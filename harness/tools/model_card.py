"""Base scores of a real model on every task, and its card: where a method has room to move it.

    python -m harness.tools.model_card smollm2-135m-instruct --prompts 64 --samples 32 --long 16 0 --threads 1

Each task is evaluated as a run would evaluate it (the model's conf/model settings: dtype, chat
template; the task's conf/task settings plus the overrides listed below), on the first
`--prompts` test prompts: greedy, and `--samples` samples at T=1 for pass@k and maj@k, with bootstrap
95% CIs over prompts. The scores go to results/models/<name>/base_scores.json (per task, with the
settings and wall time; written after every task, so a stopped run keeps what it measured) and the
card to docs/models/<name>.md. A task has headroom when greedy accuracy lies between 5% and 60%: a
method can show a gain there, and a loss.
"""
from __future__ import annotations

import argparse
import json
import time

from omegaconf import OmegaConf

from harness.core import wheels
from harness.core.atomic import write_json_atomic, write_text_atomic
from harness.core.paths import CONF_DIR, ROOT

# (label, conf/task option, overrides): the shipped tasks as an instruct model is asked them. Countdown
# uses the think template (the compact one is the zoo's own notation), on the zoo's 3- and 4-number
# problems; long-form tasks keep their own max_new_tokens except Countdown's think budget (1,024 ran
# over 10 minutes for 40 prompts on one thread), cut to 512.
TASKS = [
    ("arithmetic (2 digits, +-)", "arithmetic", {}),
    ("conciseness", "conciseness", {}),
    ("countdown, 3 numbers", "countdown", {"template": "think", "max_new_tokens": 512}),
    ("countdown, 4 numbers", "countdown4", {"template": "think", "max_new_tokens": 512}),
    ("gsm8k", "gsm8k", {}),
    ("math500", "math500", {}),
    ("mbpp", "mbpp", {}),
    ("arithmetic (3 digits, +-)", "arithmetic", {"digits": 3}),
]
HEADROOM = (0.05, 0.60)
LONG_TOKENS = 64  # a task that may write more than this many tokens is evaluated with --long prompts and samples


def measure(name: str, prompts: int, samples: int, threads: int, only: list[str] | None,
            long: tuple[int, int] | None = None, save=None) -> dict:
    """Evaluate every task of TASKS (or `only`); `save(scores)` after each task, so a stopped run keeps its tasks."""
    import torch

    from harness.evaluation.evaluate import EvalConfig, evaluate
    from harness.core.policy import load_policy
    from harness.runner.run import build_task

    torch.set_num_threads(threads)
    model = OmegaConf.load(CONF_DIR / "model" / f"{name}.yaml")
    policy = load_policy(model.name_or_path, model.dtype, model.chat_template, model.system_prompt, "cpu")
    out = {"model": name, "dtype": model.dtype, "chat_template": model.chat_template, "prompts": prompts,
           "samples": samples, "long": list(long or (prompts, samples)), "threads": threads,
           "torch": torch.__version__, "tasks": {}}
    for label, task_name, overrides in TASKS:
        if only and task_name not in only and label not in only:
            continue
        task, t0 = build_task(task_name, overrides), time.time()
        n, m = long if long and task.max_new_tokens > LONG_TOKENS else (prompts, samples)
        ks = [k for k in (1, 16, 32) if k <= m]
        cfg = EvalConfig(n_samples=m, pass_ks=ks, maj_ks=[k for k in ks if k > 1], n_prompts=n,
                         batch_size=256, n_examples=2)
        res = evaluate(policy, task, "test", cfg)
        out["tasks"][label] = {
            "task": task_name, "overrides": overrides, "version": task.version,
            "prompts": next(iter(res.metrics.values()))["n"], "samples": m,  # prompts evaluated (a task may hold fewer)
            "wall_s": round(time.time() - t0, 1),
            "metrics": {k: {f: v[f] for f in ("mean", "ci_low", "ci_high")} for k, v in res.metrics.items()},
            "examples": res.examples[:2],
        }
        print(f"{label}: " + ", ".join(f"{k}={v['mean']:.3f}" for k, v in res.metrics.items())
              + f" ({time.time() - t0:.0f} s)", flush=True)
        if save:
            save(out)
    return out


def card(scores: dict) -> str:
    name = scores["model"]
    model = wheels.MODELS.get(name)
    info = wheels.manifest(name) or {}
    metrics = ["greedy_acc", "pass@1", "pass@16", "pass@32"]
    rows = []
    for label, t in scores["tasks"].items():
        m = t["metrics"]
        cells = []
        for k in metrics:
            if t["task"] == "conciseness":  # its score is the reward (characters of length error), not exact match
                k = {"greedy_acc": "greedy_reward", "pass@1": "mean_reward"}.get(k, "")
            v = m.get(k)
            cells.append("" if v is None else f"{100 * v['mean']:.1f} [{100 * v['ci_low']:.1f}, {100 * v['ci_high']:.1f}]"
                         if t["task"] != "conciseness" else f"{v['mean']:.0f} [{v['ci_low']:.0f}, {v['ci_high']:.0f}]")
        g = m.get("greedy_acc") or {}
        greedy = g.get("mean")
        room = "" if greedy is None or t["task"] == "conciseness" else (
            "no" if not HEADROOM[0] <= greedy <= HEADROOM[1] else
            "unclear (its interval reaches 0)" if g["ci_low"] <= 0 else "yes")
        rows.append(f"| {label} | {t['prompts']} x {t['samples']} | " + " | ".join(cells) + f" | {room} | {t['wall_s']:.0f} |")
    provenance = (f"{model.source}; dequantised to fp32 by `python -m harness.models get {name}` (the "
                  f"{model.quantisation} weights, not the original checkpoint); licence {model.licence}" if model else "")
    return f"""# {name}

{provenance}.

| | |
|---|---|
| parameters | {info.get('parameters', 0):,} |
| GGUF sha256 | `{info.get('gguf_sha256', model.gguf_sha256 if model else '')}` |
| weights sha256 (model.safetensors as written) | `{info.get('weights_sha256', '')}` |
| run dtype / chat template | {scores['dtype']} / {scores['chat_template']} |

Base scores on the first test prompts of each task (greedy, and samples at T=1.0; the "n" column: prompts x
samples), in %, with bootstrap 95% CIs over prompts; conciseness as its reward, minus the characters of length
error (higher is better). Headroom: greedy between {100 * HEADROOM[0]:.0f}% and {100 * HEADROOM[1]:.0f}%, its interval clear of 0. Measured with
`python -m harness.tools.model_card {name} --prompts {scores['prompts']} --samples {scores['samples']} --long {scores['long'][0]} {scores['long'][1]} --threads {scores['threads']}`
(torch {scores['torch']}); the numbers are in [results/models/{name}/base_scores.json](../../results/models/{name}/base_scores.json).

| task | n | greedy | pass@1 | pass@16 | pass@32 | headroom | wall s |
|---|---|---|---|---|---|---|---|
""" + "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m harness.tools.model_card", description=__doc__.splitlines()[0])
    p.add_argument("name", help="a conf/model option, e.g. smollm2-135m-instruct")
    p.add_argument("--prompts", type=int, default=50)
    p.add_argument("--samples", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--long", type=int, nargs=2, default=None, metavar=("PROMPTS", "SAMPLES"),
                   help=f"prompts and samples for tasks that write more than {LONG_TOKENS} tokens (default: as the others)")
    p.add_argument("--tasks", default="", help="comma-separated conf/task names or labels (default: all)")
    p.add_argument("--card-only", action="store_true", help="rewrite the card from base_scores.json")
    args = p.parse_args(argv)
    out = ROOT / "results" / "models" / args.name / "base_scores.json"
    doc = ROOT / "docs" / "models" / f"{args.name}.md"
    doc.parent.mkdir(parents=True, exist_ok=True)
    old = json.loads(out.read_text()) if out.is_file() else None

    def save(scores: dict) -> None:
        if old and args.tasks:  # a partial rerun keeps the other tasks' scores
            scores = {**scores, "tasks": {**old["tasks"], **scores["tasks"]}}
        out.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out, scores)
        write_text_atomic(doc, card(scores))

    if args.card_only:
        if old is None:
            raise SystemExit(f"error: {out} does not exist; run without --card-only first")
        scores = old
    else:
        measure(args.name, args.prompts, args.samples, args.threads, [t for t in args.tasks.split(",") if t] or None,
                tuple(args.long) if args.long else None, save)
        scores = json.loads(out.read_text())
    write_text_atomic(doc, card(scores))
    print(f"wrote {out} and {doc}")


if __name__ == "__main__":
    main()
