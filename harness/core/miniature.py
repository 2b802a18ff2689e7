"""A miniature of a real model: its own architecture from harness/shapes/, a tiny random-weight body.

    build_miniature("Qwen/Qwen2.5-7B-Instruct", out)   # -> out/: config.json, safetensors, tokenizer files

What a miniature keeps from its shape (so code that branches on them meets them, as on the real model):
  - the config class and model type (Qwen2ForCausalLM, LlamaForCausalLM), its activation and norm epsilon
  - a tied or untied LM head (tie_word_embeddings), q/k/v biases (Qwen2's, always on; attention_bias and
    mlp_bias where the config has them), sliding-window settings, max_position_embeddings
  - the GQA ratio (num_attention_heads / num_key_value_heads) and the RoPE settings (theta, llama3 scaling)
  - the dtype the checkpoint ships in (its weights are saved in it; model.dtype decides at load, as for the real one)
  - the family's special tokens (BOS/EOS/pad as the real tokenizer names them) and its chat template's turn
    layout and default system prompt
What it changes: 2 layers, one KV head, hidden = GQA ratio x head_dim (vLLM's Qwen2 derives head_dim from
hidden / heads, so hidden is not free), head_dim 16, or 32 for a miniature vLLM will run (vLLM's CPU attention
takes head sizes from 32), intermediate = hidden, random weights (seed 0), and a character vocabulary
(harness/core/chartok.py's characters plus the family's special tokens, about 100 entries) instead of the real
128K-152K BPE one: no shipped tokenizer of these families is available offline. The body is as small as those
rules allow because a rehearsal (harness/runner/rehearse.py) generates thousands of sequences, in bf16 where
the model ships in it, which this project's CPUs emulate: 150K parameters instead of 880K at hidden 224 made
generation about 6x faster.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harness.core.errors import UserError
from harness.core.model_shapes import shape_name
from harness.core.paths import SHAPES_DIR, ZOO_DIR

LAYERS, HEAD_DIM, VLLM_HEAD_DIM = 2, 16, 32
UNK = "<unk>"


class MissingShape(UserError, ValueError):
    """A model with no shipped shape: the message names the file to add."""


@dataclass(frozen=True)
class Family:
    """What a model family's tokenizer carries that code may depend on: its special tokens and chat layout."""

    name: str
    specials: tuple[str, ...]     # special tokens (one token each, never split)
    eos: str
    bos: str | None = None
    pad: str | None = None        # None: the real tokenizer has none (harness/core/policy.py then pads with EOS)
    adds_bos: bool = False        # the tokenizer prepends BOS itself (Llama 3, DeepSeek-R1-Distill)
    template: str = ""            # Jinja chat template: the real one's turn layout, tools left out
    extra: tuple[str, ...] = ()   # added (non-special) tokens, e.g. DeepSeek-R1's <think>


_CHATML = ("{% for m in messages %}"
           "{% if loop.first and m.role != 'system' and DEFAULT %}<|im_start|>system\n{{ DEFAULT }}<|im_end|>\n{% endif %}"
           "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
           "{% endfor %}"
           "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
_LLAMA3 = ("{{ bos_token }}<|start_header_id|>system<|end_header_id|>\n\n"
           "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
           "{% if messages[0].role == 'system' %}{{ messages[0].content }}{% endif %}<|eot_id|>"
           "{% for m in messages if m.role != 'system' %}"
           "<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content }}<|eot_id|>"
           "{% endfor %}"
           "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
_R1 = ("{{ bos_token }}{% for m in messages if m.role == 'system' %}{{ m.content }}{% endfor %}"
       "{% for m in messages if m.role != 'system' %}"
       "{% if m.role == 'user' %}<｜User｜>{{ m.content }}{% else %}<｜Assistant｜>{{ m.content }}<｜end▁of▁sentence｜>{% endif %}"
       "{% endfor %}"
       "{% if add_generation_prompt %}<｜Assistant｜><think>\n{% endif %}")


def _chatml(default_system: str | None) -> str:
    quoted = json.dumps(default_system) if default_system else "none"
    return _CHATML.replace("DEFAULT", quoted)


# Matched on the shape file's stem, first prefix that fits (deepseek-r1-distill-qwen before qwen).
FAMILIES = {
    "deepseek-r1-distill": Family(
        "DeepSeek-R1-Distill", ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"),
        eos="<｜end▁of▁sentence｜>", bos="<｜begin▁of▁sentence｜>", pad="<｜end▁of▁sentence｜>", adds_bos=True,
        template=_R1, extra=("<think>", "</think>")),
    "qwen": Family("Qwen2.5-Instruct", ("<|endoftext|>", "<|im_start|>", "<|im_end|>"), eos="<|im_end|>",
                   pad="<|endoftext|>",
                   template=_chatml("You are Qwen, created by Alibaba Cloud. You are a helpful assistant.")),
    "llama-3": Family("Llama-3-Instruct", ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                           "<|end_header_id|>", "<|eot_id|>"),
                      eos="<|eot_id|>", bos="<|begin_of_text|>", adds_bos=True, template=_LLAMA3),
    "smollm2": Family("SmolLM2-Instruct", ("<|endoftext|>", "<|im_start|>", "<|im_end|>"), eos="<|im_end|>",
                      bos="<|im_start|>", pad="<|im_end|>",
                      template=_chatml("You are a helpful AI assistant named SmolLM, trained by Hugging Face")),
}
# A shape of no known family: ChatML, the most common layout (said in the miniature's card).
GENERIC = Family("generic ChatML", ("<|endoftext|>", "<|im_start|>", "<|im_end|>"), eos="<|im_end|>",
                 pad="<|endoftext|>", template=_chatml(None))


def family_of(shape: str) -> Family:
    return next((f for prefix, f in FAMILIES.items() if shape.startswith(prefix)), GENERIC)


def shape_file(name_or_path: str) -> Path:
    """The shipped shape a model's miniature is built from.

    Raises:
        MissingShape: none ships for it; the message names the file to add and how.
    """
    path = SHAPES_DIR / f"{shape_name(name_or_path)}.json"
    if path.is_file():
        return path
    for folder in (ZOO_DIR / str(name_or_path), Path(str(name_or_path)).expanduser()):
        if (folder / "config.json").is_file():  # a zoo model or a local checkpoint: its own config
            return folder / "config.json"
    raise MissingShape(
        f"model {name_or_path!r} has no shipped shape: add harness/shapes/{shape_name(name_or_path)}.json "
        "holding the fields of its config.json (harness/shapes/README.md), then rehearse again")


def miniature_config(fields: dict, vocab_size: int, head_dim: int = HEAD_DIM) -> dict:
    """The shape's config.json fields with the body made tiny (see the module docstring); quirks kept."""
    cfg = {k: v for k, v in fields.items() if k not in ("architectures", "_name_or_path", "transformers_version")}
    heads = int(cfg.get("num_attention_heads", 1))
    kv = int(cfg.get("num_key_value_heads") or heads)
    ratio = max(1, heads // max(kv, 1))  # the GQA ratio: query heads per KV head
    hidden = ratio * head_dim
    cfg.update(num_hidden_layers=LAYERS, num_attention_heads=ratio, num_key_value_heads=1, hidden_size=hidden,
               intermediate_size=hidden, vocab_size=vocab_size)
    if "head_dim" in cfg:  # an explicit head_dim (Llama): kept explicit, at the miniature's size
        cfg["head_dim"] = head_dim
    if "max_window_layers" in cfg:
        cfg["max_window_layers"] = min(int(cfg["max_window_layers"]), LAYERS)
    for k in ("layer_types",):  # per-layer lists of the real depth
        cfg.pop(k, None)
    return cfg


def miniature_tokenizer(family: Family):
    """The character tokenizer (harness/core/chartok.py's characters) with the family's special tokens and chat template."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, processors
    from transformers import PreTrainedTokenizerFast

    from harness.core.chartok import CHARS

    vocab = {tok: i for i, tok in enumerate([UNK, *CHARS, *family.specials, *family.extra])}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in (UNK, *family.specials)])
    tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in family.extra])
    tok.decoder = decoders.Fuse()
    if family.adds_bos:  # the real tokenizer prepends BOS (harness/core/policy.py bos_prefix reads it)
        tok.post_processor = processors.TemplateProcessing(
            single=f"{family.bos} $A", pair=f"{family.bos} $A {family.bos} $B", special_tokens=[(family.bos, vocab[family.bos])])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token=UNK, eos_token=family.eos, bos_token=family.bos, pad_token=family.pad,
        padding_side="left", clean_up_tokenization_spaces=False, chat_template=family.template)


def build_miniature(name_or_path: str, out: Path, seed: int = 0, for_vllm: bool = False) -> Path:
    """Write a random-weight miniature of `name_or_path`'s shape into `out` (a model folder any engine loads;
    `for_vllm`: with the head size vLLM's CPU attention needs).

    Raises:
        MissingShape: no shape ships for the model.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    source = shape_file(name_or_path)
    fields = json.loads(source.read_text())
    shape = source.stem if source.parent == SHAPES_DIR else Path(source).parent.name
    family = family_of(shape)
    tok = miniature_tokenizer(family)
    cfg = miniature_config(fields, len(tok), VLLM_HEAD_DIM if for_vllm else HEAD_DIM)
    dtype = cfg.pop("torch_dtype", None) or cfg.pop("dtype", None) or "float32"
    ids = {f"{k}_token_id": tok.convert_tokens_to_ids(t) if t else None
           for k, t in (("bos", family.bos), ("eos", family.eos), ("pad", family.pad))}
    cfg.update(ids)
    config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, str(dtype).replace("torch.", "")))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    card = {"miniature_of": str(name_or_path), "shape": str(source), "family": family.name,
            "layers": LAYERS, "head_dim": VLLM_HEAD_DIM if for_vllm else HEAD_DIM, "hidden_size": config.hidden_size, "num_attention_heads": config.num_attention_heads,
            "num_key_value_heads": config.num_key_value_heads, "vocab_size": config.vocab_size,
            "tie_word_embeddings": bool(config.tie_word_embeddings), "dtype": str(dtype),
            "parameters": sum(p.numel() for p in model.parameters())}
    (out / "miniature.json").write_text(json.dumps(card, indent=1) + "\n")
    return out
