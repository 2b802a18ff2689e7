"""The tiny-model zoo: Qwen2-architecture base models trained from scratch on Countdown.

No model hub is reachable in tests or on a fresh laptop, so the project makes its own base models.
Each is a Qwen2 causal LM with the character tokenizer (harness/core/chartok.py), trained with plain
next-token loss on the completion of procedurally generated, solvable 3-number Countdown problems
from the zoo's *train* split (tasks/countdown.py), for a fixed number of steps, then saved with a
CARD.md holding the rebuild command, steps, wall time and measured base scores.

    python -m harness.tools.zoo build zoo-1m          # rebuild one model (minutes on 2 CPU cores)
    python -m harness.tools.zoo list
"""
from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import sys
import time
from dataclasses import asdict, dataclass

from harness.core.atomic import write_json_atomic, write_text_atomic
from harness.core.paths import ZOO_DIR


@dataclass(frozen=True)
class ZooSpec:
    """Architecture and training recipe of one zoo model."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    steps: int
    lr: float
    batch: int = 256
    save_dtype: str = "float32"  # the largest is stored in bfloat16 to keep the repo small
    seed: int = 0
    mix4: float = 0.0  # share of 4-number problems in pretraining (the ladder); 0: 3-number only
    card_numbers: int = 3  # the task the card scores: 3-number (zoo) or 4-number (ladder) problems


# The ladder: five sizes (41k-1.5M, 36x) trained with ONE recipe on the same data stream, so size is
# the only axis. Pretraining mixes 25% 4-number problems into the 3-number ones for 1200 steps, so
# the post-training task (4-number problems, task=countdown4) starts low (2-24% greedy) with pass@32
# far above it: headroom for RL and ES to find, as the paper's Qwen2.5-3B starts at 10%. Accuracy
# rises over the lower three sizes and is level from 0.3M up (a first 400-step ladder to 3.7M was
# level from 0.75M; 3x the steps did not separate the top, and neither did mix4=0.5: 0.3M/0.75M/1.5M
# at 25.2/23.4/24.0% greedy). The three zoo-* models above are trained to near capacity on 3-number
# problems and stay as they are: the quickstart and the CPU twins use them.
LADDER_RECIPE = dict(steps=1200, lr=2e-3, batch=128, mix4=0.25, card_numbers=4, save_dtype="bfloat16")
LADDER = {
    "ladder-40k": ZooSpec(hidden=40, layers=2, heads=4, kv_heads=2, intermediate=112, **LADDER_RECIPE),
    "ladder-100k": ZooSpec(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=176, **LADDER_RECIPE),
    "ladder-300k": ZooSpec(hidden=96, layers=3, heads=4, kv_heads=2, intermediate=256, **LADDER_RECIPE),
    "ladder-750k": ZooSpec(hidden=128, layers=4, heads=4, kv_heads=2, intermediate=352, **LADDER_RECIPE),
    "ladder-1.5m": ZooSpec(hidden=160, layers=5, heads=4, kv_heads=2, intermediate=448, **LADDER_RECIPE),
}

ZOO = {
    "zoo-100k": ZooSpec(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=176, steps=1500, lr=3e-3),
    "zoo-1m": ZooSpec(hidden=128, layers=4, heads=4, kv_heads=2, intermediate=352, steps=1000, lr=2e-3),
    "zoo-4m": ZooSpec(hidden=256, layers=5, heads=8, kv_heads=4, intermediate=704, steps=400, lr=1e-3,
                      batch=128, save_dtype="bfloat16"),
    **LADDER,
}


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m harness.tools.zoo", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="train one zoo model from scratch and write its card")
    b.add_argument("name", choices=sorted(ZOO))
    b.add_argument("--threads", type=int, default=2)
    c = sub.add_parser("card", help="evaluate a built zoo model and (re)write its CARD.md")
    c.add_argument("name", choices=sorted(ZOO))
    c.add_argument("--threads", type=int, default=2)
    sub.add_parser("list", help="list zoo models and whether they are built")
    return ap


if __name__ == "__main__" and any(a in ("-h", "--help") for a in sys.argv[1:]):
    _parser().parse_args()  # prints the help and exits, before torch and transformers load (5 s)

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, Qwen2Config  # noqa: E402

from harness.core.chartok import build_char_tokenizer  # noqa: E402
from tasks.countdown import _split_of, random_problem  # noqa: E402


def make_model(spec: ZooSpec, vocab_size: int, eos_id: int, pad_id: int):
    cfg = Qwen2Config(vocab_size=vocab_size, hidden_size=spec.hidden, num_hidden_layers=spec.layers,
                      num_attention_heads=spec.heads, num_key_value_heads=spec.kv_heads,
                      intermediate_size=spec.intermediate, max_position_embeddings=512,
                      tie_word_embeddings=True, eos_token_id=eos_id, pad_token_id=pad_id, bos_token_id=None)
    torch.manual_seed(spec.seed)
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)


def training_batch(tok, rng: random.Random, batch: int, mix4: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids and labels; the loss sees only the solution and EOS, never the prompt."""
    seqs, labels = [], []
    while len(seqs) < batch:
        # mix4=0 draws nothing extra, so the shipped zoo's data stream is unchanged
        p = random_problem(rng, 4 if mix4 and rng.random() < mix4 else 3)
        if _split_of(p["nums"], p["target"]) != "train":
            continue  # validation/test problems are never trained on
        prompt = tok(f"{' '.join(map(str, p['nums']))}>{p['target']}:", add_special_tokens=False)["input_ids"]
        answer = tok(p["solution"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        seqs.append(prompt + answer)
        labels.append([-100] * len(prompt) + answer)
    width = max(map(len, seqs))
    ids = torch.full((batch, width), tok.pad_token_id)
    lab = torch.full((batch, width), -100)
    for i, (s, l) in enumerate(zip(seqs, labels)):
        ids[i, :len(s)], lab[i, :len(l)] = torch.tensor(s), torch.tensor(l)
    return ids, lab


def train(name: str, threads: int = 2) -> dict:
    """Train zoo model `name` from scratch, save it under harness/checkpoints/<name>, return stats."""
    spec = ZOO[name]
    torch.set_num_threads(threads)
    tok = build_char_tokenizer()
    model = make_model(spec, len(tok), tok.eos_token_id, tok.pad_token_id)
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=0.01, betas=(0.9, 0.98))
    warmup = 100
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1, (s + 1) / warmup) * (
        0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / spec.steps)))))
    rng = random.Random(f"zoo-train-{spec.seed}")
    model.train()
    start = time.time()
    for step in range(spec.steps):
        ids, lab = training_batch(tok, rng, spec.batch, spec.mix4)
        loss = model(input_ids=ids, attention_mask=(ids != tok.pad_token_id).long(), labels=lab).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step(), sched.step(), opt.zero_grad(set_to_none=True)
        if step % 100 == 0 or step == spec.steps - 1:
            print(f"{name} step {step:5d}/{spec.steps} loss {loss.item():.4f} {time.time() - start:6.0f}s", flush=True)
    wall = time.time() - start
    out = ZOO_DIR / name
    stats = {"name": name, "params": model.num_parameters(), "spec": asdict(spec), "train_wall_s": round(wall, 1),
             "final_loss": round(loss.item(), 4), "torch_threads": threads, "torch": torch.__version__}
    # Built beside, then swapped in: a kill mid-save never leaves a half-written shipped model.
    tmp = out.with_name(f".{name}.building")
    shutil.rmtree(tmp, ignore_errors=True)
    model.eval().to(getattr(torch, spec.save_dtype)).save_pretrained(tmp)
    tok.save_pretrained(tmp)
    write_json_atomic(tmp / "train_stats.json", stats)
    old = out.with_name(f".{name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        out.rename(old)
    tmp.rename(out)
    shutil.rmtree(old, ignore_errors=True)
    return stats


def write_card(name: str, threads: int = 2) -> dict:
    """Evaluate zoo model `name` on the zoo Countdown test split and write its CARD.md."""
    from harness.evaluation.evaluate import EvalConfig, evaluate
    from harness.core.policy import load_policy
    from tasks.countdown import Countdown

    torch.set_num_threads(threads)
    out = ZOO_DIR / name
    stats = json.loads((out / "train_stats.json").read_text())
    cfg = EvalConfig()
    numbers = stats["spec"].get("card_numbers", 3)
    res = evaluate(load_policy(name, device="cpu"), Countdown(numbers=numbers), "test", cfg)
    scores = {k: round(v["mean"], 4) for k, v in res.metrics.items()}
    ci = {k: [round(v["ci_low"], 4), round(v["ci_high"], 4)] for k, v in res.metrics.items()}
    stats["base_scores"], stats["base_scores_ci95"] = scores, ci
    write_json_atomic(out / "train_stats.json", stats)
    spec = stats["spec"]
    rows = "\n".join(f"| {k} | {100 * v:.1f} | [{100 * ci[k][0]:.1f}, {100 * ci[k][1]:.1f}] |"
                     for k, v in scores.items() if k != "greedy_reward")
    write_text_atomic(out / "CARD.md", f"""# {name}

A Qwen2-architecture causal LM with esbench's character tokenizer, trained from scratch by esbench
on procedurally generated Countdown problems (numbers 1-20, integer targets 1-100; zoo *train*
split only) with the compact template `3 7 12>22:` -> `(12+7)+3`: {_data_line(spec)}

Rebuild: `python -m harness.tools.zoo build {name} --threads {stats['torch_threads']}` (trains from scratch, then writes this card)

| | |
|---|---|
| parameters | {stats['params']:,} |
| hidden / layers / heads / kv heads / MLP | {spec['hidden']} / {spec['layers']} / {spec['heads']} / {spec['kv_heads']} / {spec['intermediate']} |
| training | {spec['steps']} steps x {spec['batch']} problems, AdamW lr {spec['lr']}, cosine, seed {spec['seed']} |
| wall time | {stats['train_wall_s']:.0f} s on {stats['torch_threads']} CPU thread(s) (torch {stats['torch']}) |
| final train loss | {stats['final_loss']} |
| stored dtype | {spec['save_dtype']} |

Base scores on the zoo {numbers}-number Countdown test split (first {cfg.n_prompts or 500} problems; greedy, and
{cfg.n_samples} samples at T={cfg.temperature}), in %, with bootstrap 95% CIs over prompts
(`python -m harness model={name} method=base{"" if numbers == 3 else " task=countdown4"}` reproduces them):

| metric | value | 95% CI |
|---|---|---|
{rows}
""")
    return stats


def _data_line(spec: dict) -> str:
    mix4 = spec.get("mix4", 0.0)
    if not mix4:
        return "3-number problems only."
    return (f"{100 * (1 - mix4):.0f}% 3-number and {100 * mix4:.0f}% 4-number problems, stopped early "
            "so that 4-number problems (the ladder's post-training task) leave headroom.")


def main(argv: list[str] | None = None) -> None:
    ap = _parser()
    args = ap.parse_args(argv)
    if args.cmd == "list":
        for n, s in ZOO.items():
            print(f"{n:10s} hidden={s.hidden} layers={s.layers} built={(ZOO_DIR / n / 'config.json').exists()}")
        return
    if args.cmd == "build":
        train(args.name, args.threads)
    print(json.dumps(write_card(args.name, args.threads)["base_scores"], indent=2))


if __name__ == "__main__":
    main()
