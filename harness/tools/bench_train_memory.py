"""Peak memory of one GRPO training micro-batch on CPU, term by term, to calibrate harness/core/gpu_memory.py.

Builds a Qwen2-shaped model with the real vocabulary (151,936) and Qwen2.5-0.5B's widths (hidden 896,
intermediate 4864, 14 heads, 2 KV heads) but a tiny body (1 and 2 layers), random init (no download), and
runs one micro-batch the way methods/grpo.py's trainer does (TRL 1.12 GRPOTrainer._get_per_token_logps_and_entropies
and accelerate's bf16 wrapping): the fp32 master's forward under torch.autocast(bfloat16) with fp32 outputs
(accelerate's convert_outputs_to_fp32), logits of the completion tokens / temperature, TRL's
selective_log_softmax and no-grad entropies, the GRPO loss, backward, gradient clipping and the AdamW step
(fused, TRL's default optim adamw_torch_fused). `--modes old` runs the trainer before it kept an fp32 master
(bf16 weights under the same bf16 mixed precision: the one results/bench/gpu_check_quick_h200.json measured);
`ppo` the fp32 master with TRL's PPOTrainer's policy loss (every position's logits, the step inside the
micro-batch, the no-grad entropy).

Memory is the process's resident set (VmRSS) and its high-water mark (VmHWM, reset through /proc/self/clear_refs),
each layer count in a fresh child with glibc's mmap threshold fixed at 64 KiB, so every tensor is its own
mapping, counted when written and returned when freed. With every parameter trained the vocabulary-sized
gradients decide a 1-2 layer body's peak ("full" points: the gradients, the AdamW states and step per
parameter); with the embedding frozen ("body" points) the activations and logits do, and their peak (and
what the forward keeps) is fitted by least squares to the terms harness/core/train_memory.py prices:

    peak = intercept + per_layer x layers + per_token x tokens + per_token_layer x tokens x layers
           + per_logit x completion tokens x vocabulary

(per_layer / the layer's matmul parameters: autocast's weight copies). Every point, the fits, the machine and
the command go to --out (results/bench/train_memory.json), rewritten after each mode.

    python -m harness.tools.bench_train_memory --out results/bench/train_memory.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

VOCAB, HIDDEN, INTERMEDIATE, HEADS, KV_HEADS = 151936, 896, 4864, 14, 2
# (sequences, tokens per sequence, completion tokens). body: tokens (up to 4,096 a micro-batch) and completion
# tokens varied apart, so the per-token-layer and per-logit slopes separate from the noise of a resident set;
# full: small, where the gradients decide the peak. About 2 minutes a child on 2 shared cores.
POINTS = {"body": ((4, 256, 32), (8, 256, 32), (16, 256, 32), (16, 128, 32), (8, 256, 128), (4, 256, 192)),
          "full": ((1, 64, 32), (4, 128, 64)),
          # PPO keeps every position's fp32 logits: fewer tokens
          "ppo": ((4, 128, 32), (8, 128, 32), (4, 128, 96), (4, 256, 32))}


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m harness.tools.bench_train_memory", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None, help="write the points and the fit here (JSON)")
    ap.add_argument("--modes", default="current,old,ppo",
                    help="current (GRPO: fp32 master, bf16 autocast), old (GRPO, bf16 weights), ppo (PPO's policy loss)")
    ap.add_argument("--layers", default="1,2", help="layer counts of the tiny body (at least two for the fit)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return ap


def _mem() -> tuple[int, int]:
    """(VmRSS, VmHWM) in bytes."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS", "VmHWM")):
                out[line.split(":")[0]] = int(line.split()[1]) * 1024
    return out["VmRSS"], out["VmHWM"]


def _reset_peak() -> int:
    """Reset the high-water mark to the current resident set (Linux clear_refs 5); returns that resident set."""
    import gc
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _mem()[0]


def child(spec: dict) -> dict:
    """One layer count in one mode: resident bytes after the build and the optimizer's state, then each point's
    peaks above the resident set before it (what gpu_memory.py's terms must cover)."""
    import torch
    from accelerate.utils import convert_outputs_to_fp32
    from transformers import AutoModelForCausalLM, Qwen2Config
    from trl.trainer.utils import entropy_from_logits, selective_log_softmax

    torch.manual_seed(0)
    torch.set_num_threads(spec["threads"])
    old = spec["mode"] == "old"  # ppo: the current precision with PPO's loss
    config = Qwen2Config(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
                         num_hidden_layers=spec["layers"], num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                         tie_word_embeddings=True, max_position_embeddings=4096)
    config._attn_implementation = "sdpa"
    base = _reset_peak()
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16 if old else torch.float32)
    model.train()
    params = sum(p.numel() for p in model.parameters())
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    weights = _mem()[0] - base
    # accelerate's bf16 wrapping of the prepared model (accelerator.prepare, mixed_precision=bf16: TRL's configs
    # default to bf16=True), on the fp32 master and on the old trainer's bf16 weights alike: fp32 logits out
    model.forward = convert_outputs_to_fp32(torch.autocast("cpu", dtype=torch.bfloat16)(model.forward))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=True)

    def micro_batch(b: int, t: int, c: int) -> dict:
        """Forward, GRPO loss and backward of b sequences of t tokens, c of them completion: bytes above the
        resident set before it kept after the loss (what backward reads), at the peak, and after backward."""
        ids = torch.randint(0, VOCAB, (b, t))
        adv, ref = torch.randn(b, 1), torch.zeros(b, c)
        start = _reset_peak()
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), logits_to_keep=c + 1, use_cache=False).logits
        logits = logits[:, :-1, :][:, -c:, :] / 0.7  # TRL: drop the last position, keep the completion, / temperature
        logps = selective_log_softmax(logits, ids[:, -c:])
        with torch.no_grad():
            entropy_from_logits(logits)
        ratio = torch.exp(logps - logps.detach())
        kl = torch.exp(ref - logps) - (ref - logps) - 1  # against fixed reference log-probs (beta 1e-3)
        loss = (-(ratio * adv) + 1e-3 * kl).mean()
        # TRL holds `logits` until its function returns (after the loss, before backward)
        kept = _mem()[0] - start
        forward = _mem()[1] - start
        del logits, logps, ratio, kl
        loss.backward()
        peak = _mem()[1] - start
        del loss
        return {"kept": kept, "forward_peak": forward, "peak": peak, "grads": _reset_peak() - start}

    def ppo_micro_batch(b: int, t: int, c: int) -> dict:
        """TRL's PPOTrainer's policy micro-batch: every position's logits, sliced to the response in place /
        temperature, selective_log_softmax, the clipped loss, backward, the optimizer step (TRL steps inside the
        micro-batch loop) and the no-grad entropy, with the logits alive throughout."""
        ids = torch.randint(0, VOCAB, (b, t))
        adv, old_logps = torch.randn(b, 1), torch.zeros(b, c)
        start = _reset_peak()
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits
        logits = logits[:, t - c - 1:-1]
        logits /= 0.7 + 1e-7
        logps = selective_log_softmax(logits, ids[:, -c:])
        ratio = torch.exp(logps - old_logps)
        loss = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 0.8, 1.2)).mean()
        kept = _mem()[0] - start
        forward = _mem()[1] - start
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            prob = torch.nn.functional.softmax(logits, dim=-1)
            torch.logsumexp(logits, dim=-1) - torch.sum(prob * logits, dim=-1)
            del prob
        peak = _mem()[1] - start
        del logits, logps, ratio, loss
        return {"kept": kept, "forward_peak": forward, "peak": peak, "grads": 0}

    def optimizer_step() -> int:
        before = _reset_peak()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # transformers' Trainer: max_grad_norm 1.0
        opt.step()
        peak = _mem()[1] - before
        opt.zero_grad(set_to_none=True)
        return peak

    micro_batch(1, 16, 8)  # the first step creates AdamW's two states; its peak is not a micro-batch's
    optimizer_step()
    states = _reset_peak() - base - weights
    points = []
    for variant in ("body",) if spec["mode"] == "ppo" else ("full", "body"):
        # body: the embedding (and the tied head) frozen, so the peak is the activations' and the logits', not
        # the vocabulary-sized gradients' (which dominate a 1-2 layer body; they are measured by `full`)
        model.get_input_embeddings().weight.requires_grad_(variant == "full")
        for b, t, c in spec["points"]["ppo" if spec["mode"] == "ppo" else variant]:
            t0 = time.perf_counter()
            out = (ppo_micro_batch if spec["mode"] == "ppo" else micro_batch)(b, t, c)
            step_peak = optimizer_step() if variant == "full" and spec["mode"] != "ppo" else 0
            points.append({"variant": variant, "sequences": b, "tokens": t, "completion_tokens": c, **out,
                           "step_peak": step_peak, "seconds": round(time.perf_counter() - t0, 2)})
    return {"mode": spec["mode"], "layers": spec["layers"], "params": params, "linear_params": linear,
            "weights": weights, "adamw_states": states, "points": points}


def fit(runs: list[dict]) -> dict:
    """Least-squares slopes and intercepts of one mode's body points (see the module docstring), the full
    points' gradients and step per parameter, and each body point's fitted value beside its measurement."""
    import numpy as np
    rows, kept, peak = [], [], []
    for r in runs:
        for p in r["points"]:
            if p["variant"] == "body":
                n, c = p["sequences"] * p["tokens"], p["sequences"] * p["completion_tokens"]
                rows.append([1.0, r["layers"], n, n * r["layers"], c * VOCAB])
                kept.append(p["kept"])
                peak.append(p["peak"])
    x = np.array(rows)
    names = ("intercept", "per_layer", "per_token", "per_token_layer", "per_logit")
    out = {}
    for key, y in (("kept", kept), ("peak", peak)):
        coef, *_ = np.linalg.lstsq(x, np.array(y, dtype=float), rcond=None)
        pred = x @ coef
        out[key] = {**dict(zip(names, map(float, coef))), "fitted": [int(v) for v in pred], "measured": y,
                    "residual_max": float(np.max(np.abs(pred - np.array(y))))}
    full = [(r, p) for r in runs for p in r["points"] if p["variant"] == "full"]
    if not full:
        return out
    out["grads_per_param"] = float(np.mean([p["grads"] / r["params"] for r, p in full]))
    out["step_peak_per_param"] = float(np.max([p["step_peak"] / r["params"] for r, p in full]))
    out["weights_per_param"] = float(np.mean([r["weights"] / r["params"] for r in runs]))
    out["adamw_states_per_param"] = float(np.mean([r["adamw_states"] / r["params"] for r in runs]))
    out["layer_linear_params"] = (runs[-1]["linear_params"] - runs[0]["linear_params"]) / (runs[-1]["layers"] - runs[0]["layers"])
    return out


def main(argv=None) -> int:
    a = _parser().parse_args(argv)
    if a.child:
        print(json.dumps(child(json.loads(a.child))), flush=True)
        return 0
    import torch
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}
    result = {"command": "python -m harness.tools.bench_train_memory " + " ".join(argv if argv is not None else sys.argv[1:]),
              "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs, {platform.platform()}",
              "torch": torch.__version__, "shape": {"vocab": VOCAB, "hidden": HIDDEN, "intermediate": INTERMEDIATE,
                                                     "heads": HEADS, "kv_heads": KV_HEADS, "tied": True},
              "method": "VmHWM - VmRSS per phase (clear_refs 5), MALLOC_MMAP_THRESHOLD_=65536", "modes": {}}
    t0 = time.perf_counter()
    for mode in a.modes.split(","):
        runs = []
        for layers in map(int, a.layers.split(",")):
            spec = {"mode": mode, "layers": layers, "threads": a.threads, "points": POINTS}
            out = subprocess.run([sys.executable, "-m", "harness.tools.bench_train_memory", "--child", json.dumps(spec)],
                                 env=env, capture_output=True, text=True, check=False)
            if out.returncode:
                sys.stderr.write(out.stderr[-3000:])
                return 1
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"{mode} L={layers}: " + ", ".join(f"{p['variant']} {p['sequences']}x{p['tokens']}/"
                                                     f"{p['completion_tokens']} {p['peak'] / 2**20:.0f} MiB"
                                                     for p in runs[-1]["points"]), flush=True)
        result["modes"][mode] = {"runs": runs, "fit": fit(runs)}
        print(mode, json.dumps({k: v for k, v in result["modes"][mode]["fit"].items()}), flush=True)
        if a.out:  # after every mode: a cut run keeps what it measured
            with open(a.out, "w") as f:
                json.dump({**result, "seconds": round(time.perf_counter() - t0, 1)}, f, indent=1)
                f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
