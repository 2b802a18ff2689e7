"""A raw prompt gets the BOS its tokenizer would add (harness/core/policy.py bos_prefix): every call site
tokenizes formatted text with add_special_tokens=False, so a base model like Gemma-3-270M never saw its
<bos> and answered '<h2><h2>...'. Tokenizers that add nothing (the zoo's, SmolLM2's) are unchanged.

    python -m pytest tests/test_bos.py -q
"""
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from harness.core.chartok import build_char_tokenizer
from harness.core.policy import Policy, bos_prefix


def word_tokenizer(adds_bos: bool) -> PreTrainedTokenizerFast:
    vocab = {"<bos>": 0, "<eos>": 1, "<unk>": 2, "What": 3, "is": 4, "2": 5, "?": 6}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    if adds_bos:
        tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 0)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>")


def test_a_tokenizer_that_adds_bos_gets_it_on_raw_prompts_only():
    tok = word_tokenizer(adds_bos=True)
    assert bos_prefix(tok) == "<bos>"
    raw = Policy(None, tok, "m", chat_template=False, bos=bos_prefix(tok))
    text = raw.format("What is 2 ?")
    assert text == "<bos>What is 2 ?"
    assert tok(text, add_special_tokens=False)["input_ids"] == tok("What is 2 ?")["input_ids"] == [0, 3, 4, 5, 6]


def test_tokenizers_that_add_nothing_are_unchanged():
    assert bos_prefix(word_tokenizer(adds_bos=False)) == ""
    assert bos_prefix(build_char_tokenizer()) == ""   # the zoo's
