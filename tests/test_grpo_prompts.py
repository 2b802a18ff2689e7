"""GRPO trains on the prompt ids evaluation uses, whatever the tokenizer (methods/trl_prompts.py).

TRL 1.12 tokenises text prompts with special tokens; a tokenizer that adds BOS (Llama, Gemma) would otherwise
train on <bos><bos>... prompts. Here a char tokenizer that adds <bos> (built locally, no network) drives a real
GRPO step, and the prompt ids TRL generated from are compared with the policy's evaluation ids.

    python -m pytest tests/test_grpo_prompts.py -q
"""
import pytest
from tokenizers import processors
from transformers import PreTrainedTokenizerFast

from harness.core.chartok import build_char_tokenizer
from harness.core.budget import Ledger
from harness.core.policy import Policy, bos_prefix
from harness.core.steplog import make_ledger
from methods.trl_prompts import PromptTokenError, trl_text_prompts

LLAMA_LIKE = "{{ bos_token }}USER: {{ messages[-1]['content'] }}\nA:"  # the template writes its own BOS text


def bos_char_tokenizer(chat_template: str | None = None) -> PreTrainedTokenizerFast:
    """The zoo's char tokenizer plus a <bos> that it adds to every encoding, as Llama's and Gemma's do."""
    base = build_char_tokenizer()
    inner = base.backend_tokenizer
    inner.add_special_tokens(["<bos>"])
    bos_id = inner.token_to_id("<bos>")
    inner.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A $B",
                                                         special_tokens=[("<bos>", bos_id)])
    tok = PreTrainedTokenizerFast(tokenizer_object=inner, bos_token="<bos>", pad_token="<pad>", eos_token="<eos>",
                                  unk_token="<unk>", padding_side="left", clean_up_tokenization_spaces=False)
    tok.chat_template = chat_template
    return tok


def policy_for(tok, chat: bool):
    from harness.tools.zoo import ZOO, make_model
    model = make_model(ZOO["zoo-100k"], len(tok), tok.eos_token_id, tok.pad_token_id)
    return Policy(model, tok, "bos-test", chat_template=chat, bos=bos_prefix(tok))


@pytest.mark.parametrize("chat", [False, True], ids=["raw", "chat_template"])
def test_formatted_prompts_would_get_two_bos_and_trl_prompts_get_one(chat):
    tok = bos_char_tokenizer(LLAMA_LIKE)
    policy = Policy(None, tok, "m", chat_template=chat, bos=bos_prefix(tok))
    formatted = [policy.format(p) for p in ("1 2 3", "4 5")]
    bos = tok.bos_token_id
    assert all(ids[:2] == [bos, bos] for ids in tok(text=formatted)["input_ids"])  # what TRL got before
    trl_ids = tok(text=trl_text_prompts(tok, formatted))["input_ids"]
    assert trl_ids == tok(formatted, add_special_tokens=False)["input_ids"]
    assert all(ids[0] == bos and ids[1] != bos for ids in trl_ids)


def test_a_tokenizer_that_adds_nothing_gets_its_prompts_back_unchanged():
    tok = build_char_tokenizer()  # the zoo's: GRPO on the zoo is untouched
    formatted = ["What is 1 + 2?", "Use 3 4 5"]
    assert trl_text_prompts(tok, formatted) is formatted


def test_a_tokenizer_that_also_appends_eos_is_refused_in_one_line():
    tok = bos_char_tokenizer()
    bos, eos = tok.bos_token_id, tok.eos_token_id
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<bos> $A <eos>", special_tokens=[("<bos>", bos), ("<eos>", eos)])
    with pytest.raises(PromptTokenError, match="training prompt 0 would be tokenised by TRL as") as err:
        trl_text_prompts(tok, ["<bos>1 2"])
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("chat", [False, True], ids=["raw", "chat_template"])
def test_trl_prompt_ids_equal_the_policys_evaluation_ids(chat, tmp_path, toy_task, monkeypatch):
    """One GRPO step with a BOS-adding tokenizer: every prompt TRL generated from is an evaluation prompt's ids."""
    from trl import GRPOTrainer

    from methods.grpo import GRPO
    tok = bos_char_tokenizer(LLAMA_LIKE)
    policy, task = policy_for(tok, chat), toy_task("digits", n_train=16)
    seen = []
    real = GRPOTrainer._tokenize_prompts

    def spy(self, prompts):
        out = real(self, prompts)
        seen.extend(list(ids) for ids in out[0])
        return out

    monkeypatch.setattr(GRPOTrainer, "_tokenize_prompts", spy)
    ledger = Ledger(limit=1e18)
    ledger.listeners = make_ledger(ledger.kind, ledger.limit, tmp_path, progress=False).listeners
    GRPO(prompts_per_step=2, num_generations=2, max_completion_length=4, learning_rate=1e-3, beta=0.0,
         max_steps=1, checkpoint_every=0).train(policy, task, ledger, tmp_path)
    evaluation = {tuple(tok(policy.format(p), add_special_tokens=False)["input_ids"])
                  for p in task.load("train")["prompt"]}
    assert len(seen) == 4 and all(tuple(ids) in evaluation for ids in seen)
    assert all(ids.count(tok.bos_token_id) == 1 and ids[0] == tok.bos_token_id for ids in seen)
