"""transformers' continuous batching against the HF engine's batched `generate`, on the CPU.

A fast HF path for nodes where vLLM cannot be installed must first be exact: ES scores every member greedily on
the same prompts, and a member's reward may not depend on which other requests shared its batch. Per model, on
training prompts of its own task (the zoo: compact Countdown; SmolLM2: arithmetic with operands of 2 and 4
digits interleaved, so prompt lengths differ and left padding is exercised), formatted by `policy.format` as
evaluation does:

- the exact reference: unpadded single-prompt `model.generate`, greedy, one prompt at a time;
- the HF engine (harness/engines/hf.py): one left-padded batch of all prompts, greedy;
- continuous batching, greedy: `generate_batch` (a manager built, warmed up, started and stopped per call; its
  stop runs a full gc.collect), and a manager started once and kept running as an engine would hold it
  (add_requests, then its results): without prefix sharing, called twice in turn with the HF engine (the
  ratio: medians of CPU seconds), and with it (transformers' default) twice. Then other schedules: reversed
  order without prefix sharing (with it, add_requests sorts requests by content, so order alone changes
  nothing), at most 4 requests per batch (requests join as others finish), a small token budget per step
  (prefill split across steps). Each is compared token for token (to the first EOS or pad, as the engine
  counts) with the reference and the HF engine, and by the task's rewards;
- one ES member (methods.es.core.perturb, sigma 1e-3, written in place under `manager.pause()`) on the running
  manager without prefix sharing, and on one with it, whose cache still holds pages the base weights computed;
- sampled at temperature 1.0 (evaluation's) with a fixed seed, at --sampled-new-tokens: each path twice in the
  same schedule, then in others (HF: batch size n/4; continuous batching: reversed without prefix sharing, 4
  requests per batch), and a running manager's next call, without and with torch.manual_seed before it.
  Continuous batching has no per-request seed.

The KV cache is sized for the requests (num_blocks; pages of 32 tokens): on the CPU transformers' default sizes
it from the machine's RAM (60% of total less the process's RSS; generation/continuous_batching/cache.py,
utils.py). Timings are ratios within one run at one torch thread, of the process's CPU seconds (the shared
cores' load swings wall seconds 2-4x; wall seconds are kept too); the JSON keeps the load average, machine, git
sha and versions beside them.

    python -m harness.tools.bench_continuous_batching --out results/bench/continuous_batching.json
"""
from __future__ import annotations

import argparse
import logging
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODELS = "zoo-1m,zoo-4m,smollm2-135m-instruct"


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=MODELS)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0, help="the sampled runs' seed")
    ap.add_argument("--sampled-new-tokens", type=int, default=16, help="the sampled runs' new tokens")
    ap.add_argument("--page-size", type=int, default=32, help="continuous batching's KV page (transformers: 256)")
    ap.add_argument("--out", type=Path, default=None, help="write the figures to this JSON file")
    return ap


if __name__ == "__main__" and any(a in ("-h", "--help") for a in sys.argv[1:]):
    _parser().parse_args()

import torch
from transformers import ContinuousBatchingConfig, GenerationConfig

from harness.core.policy import _lengths_to_eos, load_policy
from harness.engines.hf import HFEngine
from methods.es.core import perturb, restore

SIGMA, MEMBER_SEED, TEMPERATURE, REPEATS = 1e-3, 12345, 1.0, 2


def task_rows(model: str, n: int, max_new_tokens: int) -> tuple[str, object, list[dict]]:
    """The model's own task and n of its training prompts (what ES members are scored on)."""
    if model.startswith("zoo"):
        from tasks.countdown import Countdown
        task = Countdown(source="zoo", template="compact", max_new_tokens=max_new_tokens)
        return "countdown (zoo, compact), train split", task, task.load("train").select(range(n)).to_list()
    from tasks.arithmetic import Arithmetic
    two, four = Arithmetic(digits=2), Arithmetic(digits=4)
    a, b = two.load("train").to_list(), four.load("train").to_list()
    rows = [r for pair in zip(a, b) for r in pair][:n]
    return "arithmetic (train split, digits 2 and 4 interleaved)", two, rows


def rewards(task, rows: list[dict], texts: list[str]) -> list[float]:
    cols = {k: [r[k] for r in rows] for k in rows[0] if k != "prompt"}
    return [float(x) for x in task.reward(texts, **cols)]


def trim(ids, eos: int, pad: int) -> list[int]:
    """Tokens up to and including the first EOS or pad, as the HF engine counts them (_lengths_to_eos)."""
    t = torch.tensor([list(ids)]) if len(ids) else torch.zeros((1, 0), dtype=torch.long)
    return list(ids)[:_lengths_to_eos(t, eos, pad)[0]] if len(ids) else []


def clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def since(t0: tuple[float, float]) -> dict:
    """Wall seconds, and this process's CPU seconds (all its threads: continuous batching decodes in a thread of its
    own). With one torch thread the CPU seconds are the work done, whatever else the shared cores run meanwhile."""
    return {"wall_s": time.perf_counter() - t0[0], "cpu_s": time.process_time() - t0[1]}


def single(policy, ids: list[list[int]], T: int) -> tuple[list[list[int]], float]:
    """The exact reference: each prompt alone, unpadded, greedy."""
    tok, out, t0 = policy.tokenizer, [], clock()
    for x in ids:
        s = policy.model.generate(torch.tensor([x]), attention_mask=torch.ones(1, len(x), dtype=torch.long),
                                  max_new_tokens=T, do_sample=False, pad_token_id=tok.pad_token_id,
                                  eos_token_id=tok.eos_token_id)
        out.append(trim(s[0, len(x):].tolist(), tok.eos_token_id, tok.pad_token_id))
    return out, since(t0)


def engine(policy, prompts: list[str], T: int, greedy: bool = True, seed=None, batch_size=None):
    t0 = clock()
    g = HFEngine(policy).generate(prompts, greedy=greedy, temperature=TEMPERATURE, max_new_tokens=T,
                                  batch_size=batch_size or len(prompts), seed=seed)
    return [c[0] for c in g.completion_ids], since(t0)


def cb_config(ids: list[list[int]], T: int, page: int, seed=None, **kw) -> ContinuousBatchingConfig:
    """Sized for these requests: the CPU default would size the cache from the machine's RAM."""
    blocks = sum(math.ceil((len(x) + T) / page) for x in ids) + 2
    return ContinuousBatchingConfig(page_size=page, num_blocks=blocks, use_cuda_graph=False, seed=seed,
                                    max_batch_tokens=kw.pop("max_batch_tokens", sum(map(len, ids)) + len(ids)),
                                    **kw)


def cb(policy, ids: list[list[int]], T: int, cfg, greedy: bool = True, order=None, keep: bool = False):
    """generate_batch on `ids` (in `order`, results back in the original order); keep: a persistent manager."""
    tok = policy.tokenizer
    order = order or list(range(len(ids)))
    gen = gen_config(tok, T, greedy)
    t0 = clock()
    res = policy.model.generate_batch([ids[i] for i in order], generation_config=gen, continuous_batching_config=cfg,
                                      max_new_tokens=T, persistent_manager=keep)
    s = since(t0)
    outs = [r.generated_tokens for r in res.values()]
    if len(outs) != len(ids):
        raise RuntimeError(f"continuous batching returned {len(outs)} of {len(ids)} requests")
    back = [None] * len(ids)
    for pos, i in enumerate(order):
        back[i] = trim(outs[pos], tok.eos_token_id, tok.pad_token_id)
    return back, s


def gen_config(tok, T: int, greedy: bool = True) -> GenerationConfig:
    return GenerationConfig(max_new_tokens=T, do_sample=not greedy, eos_token_id=tok.eos_token_id,
                            pad_token_id=tok.pad_token_id,
                            **({} if greedy else dict(temperature=TEMPERATURE, top_p=1.0, top_k=0)))


def running(policy, T: int, cfg, greedy: bool = True):
    """A manager started once and kept running, as an engine would hold it (no set-up or gc.collect per call)."""
    policy.model.destroy_cached_continuous_batching_manager()
    manager = policy.model.init_continuous_batching(generation_config=gen_config(policy.tokenizer, T, greedy),
                                                     continuous_batching_config=cfg)
    manager.start()
    return manager


def call(policy, manager, ids: list[list[int]], T: int):
    """One engine call on a running manager: add the requests, wait for all of them."""
    tok, t0 = policy.tokenizer, clock()
    rids = manager.add_requests(inputs=ids, max_new_tokens=T)
    done: dict = {}
    while len(done) < len(rids):
        res = manager.get_result(timeout=1)
        if res is None and not manager.is_running():
            raise RuntimeError("the continuous batching loop stopped")
        if res is not None and res.is_finished():
            done[res.request_id] = res
    return [trim(done[i].generated_tokens, tok.eos_token_id, tok.pad_token_id) for i in rids], since(t0)


def same(a: list[list[int]], b: list[list[int]]) -> int:
    return sum(x == y for x, y in zip(a, b))


def first_diff(a: list[list[int]], b: list[list[int]]) -> dict | None:
    """The first prompt whose outputs differ and the token position where they part."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            k = next((j for j, (u, v) in enumerate(zip(x, y)) if u != v), min(len(x), len(y)))
            return {"prompt": i, "token": k}
    return None


def bench(model: str, n: int, T: int, seed: int, page: int, T_sampled: int) -> dict:
    policy = load_policy(model, "float32", chat_template="auto", device="cpu")
    tok = policy.tokenizer
    what, task, rows = task_rows(model, n, T)
    prompts = [r["prompt"] for r in rows]
    ids = [tok(policy.format(p), add_special_tokens=False)["input_ids"] for p in prompts]
    dec = lambda outs: [tok.decode(o, skip_special_tokens=True) for o in outs]  # noqa: E731
    score = lambda outs: rewards(task, rows, dec(outs))  # noqa: E731
    conf = lambda t=T, **kw: cb_config(ids, t, page, **kw)  # noqa: E731
    drop = policy.model.destroy_cached_continuous_batching_manager
    load0 = os.getloadavg()[0]
    r: dict = {"task": what, "prompts": n, "max_new_tokens": T,
               "prompt_tokens": [min(map(len, ids)), max(map(len, ids))], "parameters": policy.model.num_parameters(),
               "attn_implementation": policy.model.config._attn_implementation,
               "page_size": page}
    ref, t_ref = single(policy, ids, T)
    drop()
    # generate_batch: a manager built (with a warm-up forward at the largest batch), started and stopped (gc.collect)
    cold, t_cold = cb(policy, ids, T, conf())
    # a running manager without prefix sharing (pages cached by one call would serve the next after ES changed the
    # weights), timed against the HF engine in turn; then one ES member, its weights written in place under
    # manager.pause(). Then the same with transformers' default (prefix sharing on): a base call, then the member,
    # whose prompts' first pages are still cached from the base weights
    params = list(policy.model.parameters())
    master = [p.detach().clone() for p in params]
    m = running(policy, T, conf(allow_block_sharing=False))
    hf_runs, cb_runs = [], []
    for _ in range(REPEATS):
        hf_runs.append(engine(policy, prompts, T))
        cb_runs.append(call(policy, m, ids, T))
    (hf1, _), (hf2, _), (run1, _), (run2, _) = hf_runs[0], hf_runs[-1], cb_runs[0], cb_runs[-1]
    with m.pause():
        perturb(params, master, MEMBER_SEED, SIGMA)
    m_fresh, _ = call(policy, m, ids, T)
    m.stop(block=True)
    restore(params, master)
    m = running(policy, T, conf())
    shared, t_shared = call(policy, m, ids, T)
    shared2, t_shared2 = call(policy, m, ids, T)  # its prompts' pages cached by the first call
    with m.pause():
        perturb(params, master, MEMBER_SEED, SIGMA)
    m_shared, _ = call(policy, m, ids, T)
    m.stop(block=True)
    drop()
    m_ref, _ = single(policy, ids, T)
    restore(params, master)
    t_hfs, t_cbs = [t for _, t in hf_runs], [t for _, t in cb_runs]
    decoded = sum(map(len, ref))
    med = {k: (statistics.median(t[k] for t in t_hfs), statistics.median(t[k] for t in t_cbs))
           for k in ("cpu_s", "wall_s")}
    r["greedy"] = {
        "decoded_tokens": decoded,
        "seconds": {"single_prompt": t_ref, "hf_engine": t_hfs, "cb_generate_batch": t_cold,
                    "cb_running_manager": t_cbs, "cb_prefix_sharing": [t_shared, t_shared2]},
        # the speed figure: CPU seconds, medians (wall seconds swing 2-4x with the shared cores' load)
        "hf_engine_over_cb_running": med["cpu_s"][0] / med["cpu_s"][1],
        "hf_engine_over_cb_running_wall": med["wall_s"][0] / med["wall_s"][1],
        "hf_engine_over_cb_running_each": [h["cpu_s"] / c["cpu_s"] for h, c in zip(t_hfs, t_cbs)],
        "hf_engine_over_cb_generate_batch": med["cpu_s"][0] / t_cold["cpu_s"],
        "hf_engine_over_cb_prefix_sharing": [med["cpu_s"][0] / t["cpu_s"] for t in (t_shared, t_shared2)],
        "tokens_per_cpu_s": {"hf_engine": decoded / med["cpu_s"][0], "cb_running_manager": decoded / med["cpu_s"][1],
                             "cb_generate_batch": decoded / t_cold["cpu_s"], "single_prompt": decoded / t_ref["cpu_s"]},
        "hf_engine_eq_single": same(hf1, ref), "hf_engine_runs_eq": same(hf1, hf2), "cb_runs_eq": same(run1, run2),
        "reward_sum": {"single_prompt": sum(score(ref)), "hf_engine": sum(score(hf1))},
        "schedules": {},
    }
    r["es_member"] = {"sigma": SIGMA, "member_seed": MEMBER_SEED, "outputs_changed_by_noise": n - same(m_ref, ref),
                      "prefix_sharing_eq_single": same(m_shared, m_ref),
                      "prefix_sharing_eq_base_weights": same(m_shared, ref),
                      "no_prefix_sharing_eq_single": same(m_fresh, m_ref),
                      "reward_sum": {"single_prompt": sum(score(m_ref)), "cb_prefix_sharing": sum(score(m_shared)),
                                     "cb_no_prefix_sharing": sum(score(m_fresh))},
                      "rewards_equal": {"prefix_sharing": score(m_shared) == score(m_ref),
                                        "no_prefix_sharing": score(m_fresh) == score(m_ref)}}
    rev = list(range(n))[::-1]
    small = 2 * max(map(len, ids))
    schedules = {  # prefix sharing (on by default) sorts the requests by content, so order alone changes nothing
        "generate_batch (all at once)": cold, "running manager": run1, "running manager, second call": run2,
        "prefix sharing": shared, "prefix sharing, pages cached": shared2,
        "reversed order, no prefix sharing": cb(policy, ids, T, conf(allow_block_sharing=False), order=rev)[0],
        "max 4 requests per batch": cb(policy, ids, T, conf(max_requests_per_batch=4))[0],
        f"{small} tokens per step": cb(policy, ids, T, conf(max_batch_tokens=small))[0]}
    for name, outs in schedules.items():
        r["greedy"]["schedules"][name] = {
            "eq_single": same(outs, ref), "eq_hf_engine": same(outs, hf1),
            "first_diff_vs_single": first_diff(outs, ref), "reward_sum": sum(score(outs)),
            "rewards_equal_single": score(outs) == score(ref)}
    # sampled: is a fixed seed reproducible, and does a request's sample depend on the schedule?
    S, quarter = T_sampled, max(1, n // 4)
    s_hf1, t_s_hf = engine(policy, prompts, S, greedy=False, seed=seed)
    s_hf2, _ = engine(policy, prompts, S, greedy=False, seed=seed)
    s_hf3, _ = engine(policy, prompts, S, greedy=False, seed=seed, batch_size=quarter)
    m = running(policy, S, conf(S, seed=seed), greedy=False)  # seeds torch's global RNG when its loop starts
    s_run1, t_s_cb = call(policy, m, ids, S)
    s_run2, _ = call(policy, m, ids, S)  # the stream goes on
    torch.manual_seed(seed)
    s_run3, _ = call(policy, m, ids, S)  # reseeded between calls, the loop idle
    m.stop(block=True)
    drop()
    s_cb1, _ = cb(policy, ids, S, conf(S, seed=seed), greedy=False)
    s_cb4, _ = cb(policy, ids, S, conf(S, seed=seed, allow_block_sharing=False), greedy=False, order=rev)
    s_cb5, _ = cb(policy, ids, S, conf(S, seed=seed, max_requests_per_batch=4), greedy=False)
    s_greedy, _ = engine(policy, prompts, S)
    r["sampled"] = {
        "temperature": TEMPERATURE, "seed": seed, "max_new_tokens": S,
        "seconds": {"hf_engine": t_s_hf, "cb_running_manager": t_s_cb},
        "hf_engine_over_cb_running": t_s_hf["cpu_s"] / t_s_cb["cpu_s"],
        "hf_engine_eq_greedy": same(s_hf1, s_greedy),
        "hf_engine_same_seed_eq": same(s_hf1, s_hf2), f"hf_engine_batch_{quarter}_eq": same(s_hf1, s_hf3),
        "cb_same_seed_eq": same(s_run1, s_cb1),  # a running manager's first call against generate_batch's
        "cb_running_second_call_eq": same(s_run1, s_run2), "cb_running_reseeded_call_eq": same(s_run1, s_run3),
        "cb_reversed_no_prefix_sharing_eq": same(s_cb1, s_cb4), "cb_max_4_requests_per_batch_eq": same(s_cb1, s_cb5),
        "cb_eq_hf_engine": same(s_cb1, s_hf1),
        "reward_mean": {"hf_engine": sum(score(s_hf1)) / n, "cb": sum(score(s_cb1)) / n},
        "per_request_seed": False,
    }
    r["load_average"] = [load0, os.getloadavg()[0]]
    return r


def git_sha() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""


def main(argv=None) -> None:
    a = _parser().parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(a.threads)
    logging.getLogger("ContinuousBatchingLogger").setLevel(logging.ERROR)  # "persistent manager" notices
    import transformers
    t0 = clock()
    args = " ".join(argv if argv is not None else sys.argv[1:])
    out = {"command": f"python -m harness.tools.bench_continuous_batching {args}".strip(),
           "git_sha": git_sha(), "machine": f"{platform.machine()} {platform.processor() or platform.system()}, "
                                            f"{os.cpu_count()} CPUs", "torch": torch.__version__,
           "transformers": transformers.__version__, "torch_threads": torch.get_num_threads(),
           "load_average_start": os.getloadavg()[0], "models": {}}
    for model in a.models.split(","):
        print(f"{model} ...", flush=True)
        out["models"][model] = r = bench(model, a.prompts, a.max_new_tokens, a.seed, a.page_size, a.sampled_new_tokens)
        g, s = r["greedy"], r["sampled"]
        sched = ", ".join(f"{k}: {v['eq_single']}/{a.prompts}" for k, v in g["schedules"].items())
        print(f"  greedy, CPU seconds: HF engine over continuous batching (running manager) "
              f"{g['hf_engine_over_cb_running']:.2f}x (wall {g['hf_engine_over_cb_running_wall']:.2f}x), over "
              f"generate_batch {g['hf_engine_over_cb_generate_batch']:.2f}x; "
              f"equal to single-prompt: HF engine {g['hf_engine_eq_single']}/{a.prompts}; continuous batching {sched}")
        e = r["es_member"]
        print(f"  ES member ({e['outputs_changed_by_noise']} outputs changed by the noise): equal to single-prompt "
              f"with prefix sharing {e['prefix_sharing_eq_single']}/{a.prompts}, without "
              f"{e['no_prefix_sharing_eq_single']}/{a.prompts}; rewards {e['reward_sum']}")
        print(f"  sampled: same seed twice equal: HF engine {s['hf_engine_same_seed_eq']}/{a.prompts}, continuous "
              f"batching {s['cb_same_seed_eq']}/{a.prompts}, a running manager's next call "
              f"{s['cb_running_second_call_eq']}/{a.prompts}, reseeded {s['cb_running_reseeded_call_eq']}/{a.prompts}; "
              f"reversed without prefix "
              f"sharing {s['cb_reversed_no_prefix_sharing_eq']}/{a.prompts}, max 4 per batch "
              f"{s['cb_max_4_requests_per_batch_eq']}/{a.prompts}; HF engine at batch {a.prompts // 4} "
              f"{s[f'hf_engine_batch_{max(1, a.prompts // 4)}_eq']}/{a.prompts}", flush=True)
    out["wall_s"] = since(t0)["wall_s"]
    if a.out:
        from harness.core.atomic import write_json_atomic
        a.out.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(a.out, out)
        print(f"wrote {a.out} ({out['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
