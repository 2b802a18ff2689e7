"""A character-level tokenizer for the zoo models, built in code with `tokenizers`.

Every printable ASCII character and newline is one token, so any prompt (including the tagged
Countdown template) tokenizes losslessly. Wrapped in PreTrainedTokenizerFast so HF generate,
TRL and `save_pretrained`/`from_pretrained` treat it like any other tokenizer.
"""
from __future__ import annotations

from tokenizers import Tokenizer, decoders, models
from transformers import PreTrainedTokenizerFast

SPECIALS = ["<pad>", "<eos>", "<unk>"]
CHARS = ["\n"] + [chr(c) for c in range(32, 127)]


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """Return the zoo's character tokenizer (vocabulary: 3 specials + 96 characters)."""
    vocab = {tok: i for i, tok in enumerate(SPECIALS + CHARS)}
    # BPE with no merges = one token per character; no pre-tokenizer so spaces are kept as tokens.
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.decoder = decoders.Fuse()  # join characters back without inserting spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>",
        padding_side="left", clean_up_tokenization_spaces=False,
    )
