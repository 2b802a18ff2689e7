"""Prompt texts for TRL's online trainers that tokenise to exactly the ids evaluation uses.

Evaluation (harness/core/policy.py generate) tokenises `policy.format(prompt)` with add_special_tokens=False:
the formatted text already carries the BOS a tokenizer wants (Policy.bos for raw prompts, the chat template's
own `bos_token` for chat prompts). TRL 1.12's GRPOTrainer (and RLOOTrainer) tokenise a text prompt with
`processing_class(text=prompts)` (trl/trainer/grpo_trainer.py `_tokenize_prompts`), special tokens added, so a
tokenizer that adds BOS (Llama, Gemma) would train on <bos><bos>... prompts it is never evaluated on.

`trl_text_prompts` hands TRL the formatted text less that leading BOS text: TRL's call adds the BOS token back,
and every prompt's ids are then checked to equal evaluation's. Text prompts rather than conversational ones,
because TRL then passes the task's reward plain strings (conversational prompts make the completions message
lists) and raw prompts (model.chat_template=false) have no conversation to give. A tokenizer that adds
nothing (the zoo's char tokenizer, SmolLM2's) gets its prompts back unchanged, the same objects.

    python -m pytest tests/test_grpo_prompts.py -q
"""
from __future__ import annotations

from harness.core.policy import bos_prefix


class PromptTokenError(ValueError):
    """TRL would tokenise a training prompt differently from evaluation."""


def trl_text_prompts(tokenizer, formatted: list[str]) -> list[str]:
    """The texts to give TRL for `formatted` (policy.format's output) so that TRL's prompt ids equal evaluation's.

    Raises:
        PromptTokenError: some prompt still tokenises differently under TRL's call (e.g. a tokenizer that also
            appends EOS, or a chat template that writes no BOS for a tokenizer that adds one), naming the first.
    """
    bos = bos_prefix(tokenizer)
    if not bos:
        texts = formatted
    else:
        texts = [p[len(bos):] if p.startswith(bos) else p for p in formatted]
    trl_ids = tokenizer(text=texts)["input_ids"]  # the call trl/trainer/grpo_trainer.py _tokenize_prompts makes
    eval_ids = tokenizer(formatted, add_special_tokens=False)["input_ids"]  # harness/core/policy.py generate's
    for i, (trl, ev) in enumerate(zip(trl_ids, eval_ids)):
        if trl != ev:
            raise PromptTokenError(
                f"training prompt {i} would be tokenised by TRL as {trl[:6]}... but evaluated as {ev[:6]}... "
                f"({type(tokenizer).__name__}, bos_token={tokenizer.bos_token!r}); give this tokenizer a chat "
                "template that writes its own special tokens, or a post-processor that adds at most a BOS")
    return texts
