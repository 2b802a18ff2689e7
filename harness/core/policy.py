"""Policy = model + tokenizer + prompt formatting, and batched generation that counts its tokens.

Models load from a zoo name (harness/checkpoints/<name>), a local path, or a hub id; when the hub
cannot be reached a hub id loads from the local cache only (harness/core/hub.py: one short probe), so a
missing model fails in one line within seconds instead of a minute of retries. Generation is
batched HF `generate` with left padding; it returns the texts *and* the token counts the FLOPs
ledger charges (prompt tokens and decoded tokens up to and including EOS, per sequence).
"""
from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import (AutoModelForCausalLM, AutoTokenizer, GenerationConfig, PreTrainedModel,
                          PreTrainedTokenizerBase, PreTrainedTokenizerFast, StoppingCriteria, StoppingCriteriaList)

from harness.core import paths, wheels
from harness.core.engine_kinds import capabilities
from harness.core.errors import UserError
from harness.core.hub import not_cached_message, offline_unless_reachable
from harness.core.progress import progress_bar

log = logging.getLogger(__name__)
ZOO_DIR = paths.ZOO_DIR
GENERIC_TOKENIZERS = ("TokenizersBackend", "PreTrainedTokenizerFast")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "auto": "auto"}


class ModelLoadError(UserError, RuntimeError):
    """A model could not be found or loaded; the message says where we looked and what to do."""


@dataclass
class Policy:
    """A causal LM, its tokenizer and how prompts are shown to it.

    Args:
        model: the causal LM (trained in place by the methods); None from load_prompter (no weights yet).
        tokenizer: its tokenizer; padding side is forced to "left" for batched generation.
        name: the model's name or path, for records.
        chat_template: wrap each prompt as a user turn with the tokenizer's chat template
            (instruct models); False feeds the raw prompt (the zoo's base models).
        system_prompt: optional system turn when chat_template is on.
    """

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    name: str
    chat_template: bool = False
    system_prompt: str | None = None
    bos: str = ""   # the tokenizer's BOS text when it adds one itself (Gemma, Llama); see bos_prefix
    device: str = ""  # the run's device ("cuda", "cpu"; "" = the model's): engines and training run there even
    # when this HF copy waits on the CPU because an engine holds the weights (load_policy's `place`)

    def format(self, prompt: str) -> str:
        """The exact text the model sees for a task prompt."""
        if not self.chat_template:
            return self.bos + prompt
        messages = [{"role": "user", "content": prompt}]
        if self.system_prompt:
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def resolve_model_path(name_or_path: str) -> str:
    """Map a zoo name, wheel model or local path to a directory, or pass a hub id through unchanged."""
    if wheels.is_wheel_model(name_or_path):
        return wheels.resolve(name_or_path)  # fails in one line naming `python -m harness.models get`
    if (ZOO_DIR / name_or_path).is_dir():
        return str(ZOO_DIR / name_or_path)
    p = Path(name_or_path).expanduser()
    if p.exists():
        return str(p)
    looks_local = name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") != 1
    if looks_local:
        zoo = sorted(d.name for d in ZOO_DIR.iterdir() if d.is_dir()) if ZOO_DIR.is_dir() else []
        raise ModelLoadError(
            f"model path {name_or_path!r} does not exist; pass an existing directory, a hub id "
            f"like Qwen/Qwen2.5-1.5B-Instruct, or a zoo model: {', '.join(zoo) or '(none built)'}"
        )
    return name_or_path  # a hub id "org/name"


def cuda_missing(device: str = "cuda") -> str:
    """The one line a run asking for a GPU gets when torch sees none, naming the likely cause."""
    built = torch.version.cuda
    why = (f"this torch is a CUDA {built} build, and CUDA {built.split('.')[0]} wheels need a recent NVIDIA driver "
           f"(CUDA 13: driver >= 580; `nvidia-smi` shows the driver and the CUDA version it supports), so an older "
           "driver, no driver, or CUDA_VISIBLE_DEVICES hiding the GPUs all look like this" if built else
           "this torch is a CPU-only build; install the CUDA build (docs/gpus.md)")
    return (f"device={device} but torch.cuda.is_available() is False: {why}; fix the driver or the install, "
            "or run on the CPU with device=cpu")


def resolve_device(device: str) -> str:
    """"auto" -> cuda when torch sees a GPU, else cpu; "cuda" without a GPU fails in one line (cuda_missing)
    instead of running a GPU campaign on the CPU."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(cuda_missing(device))
    return device


def driver_place(device: str, engine: str, trains: bool, weights_in_driver: bool = True) -> str | None:
    """Where the driver's HF copy of the policy waits: "cpu" when the run is on a GPU and the copy neither
    trains nor generates there, None (the run's device) otherwise.

    On the CPU: ES whose members are scored by engine workers (`weights_in_driver` False: vLLM, or Ray actors
    each with its own model) and an evaluation-only run on engine=vllm. There the copy only names the
    parameters and carries config and tokenizer, and on cuda:0 it would take the weights' bytes from the
    engine that shares that GPU (14.2 GiB at 7B, more than vLLM's start-up check leaves;
    vllm/v1/worker/utils.py request_memory). Evaluation moves it where it is needed
    (harness/engines/__init__.py evaluation_engine). GRPO and PPO train the copy itself: it stays on the GPU.
    """
    if not resolve_device(device).startswith("cuda"):
        return None
    if trains and not weights_in_driver:
        return "cpu"
    if not trains and not capabilities(engine).in_place:  # the engine holds its own copy of the weights
        return "cpu"
    return None


def load_policy(name_or_path: str, dtype: str = "float32", chat_template: bool | str = False,
                system_prompt: str | None = None, device: str = "auto", place: str | None = None) -> Policy:
    """Load a policy from a zoo name, local path or hub id.

    Args:
        name_or_path: zoo name (e.g. "zoo-1m"), a directory, or a hub id.
        dtype: "float32", "bfloat16", "float16" or "auto".
        chat_template: see Policy; "auto" uses the tokenizer's chat template when it has one.
        system_prompt: see Policy.
        device: the run's device: "auto" (cuda if available, else cpu), "cpu" or "cuda" (one line when
            torch sees no GPU: cuda_missing).
        place: where the model's weights go when not on `device` ("cpu": an engine holds them; driver_place).
    """
    if dtype not in DTYPES:
        raise ModelLoadError(f"model.dtype={dtype!r} is unknown; use one of {sorted(DTYPES)}")
    policy = load_prompter(name_or_path, chat_template, system_prompt, device)
    model = _loading(name_or_path, lambda path: AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype]))
    model.to(place or policy.device).eval()
    # Generation settings are the harness's alone, on every engine: the vLLM engine ignores a checkpoint's
    # generation_config.json (generation_config="vllm", harness/engines/vllm.py), and HF generate would apply
    # it (Qwen2.5-Instruct ships repetition_penalty 1.05, which changes greedy outputs); keep only the special
    # tokens, as transformers does for a model without one (GenerationConfig.from_model_config)
    model.generation_config = GenerationConfig.from_model_config(model.config)
    log.info("loaded %s (%s params, %s, %s)", name_or_path, f"{model.num_parameters():,}", dtype,
             place or policy.device)
    policy.model = model
    return policy


def load_prompter(name_or_path: str, chat_template: bool | str = False, system_prompt: str | None = None,
                  device: str = "auto") -> Policy:
    """The policy without its weights (model None): its tokenizer and prompt format, as load_policy sets them.
    What a method's memory check needs before the weights load (the prompts' token counts): a run that cannot
    fit is refused in seconds, not after a multi-GB load (harness/runner/run.py, Method.preflight)."""
    device = resolve_device(device)
    if chat_template not in (True, False, "auto"):
        raise ModelLoadError(f"model.chat_template={chat_template!r} is unknown; use true, false or auto")
    tokenizer = _loading(name_or_path, _load_tokenizer)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if chat_template == "auto":
        chat_template = tokenizer.chat_template is not None
    if chat_template and tokenizer.chat_template is None:
        raise ModelLoadError(f"model.chat_template=true but {name_or_path!r} has no chat template; set it false")
    return Policy(None, tokenizer, name_or_path, chat_template, system_prompt, bos_prefix(tokenizer), device)


def _loading(name_or_path: str, load):
    """load(resolved path), with a load failure as one line naming the fix (a hub id not cached offline, a
    wrong name, a folder without its files)."""
    path = resolve_model_path(name_or_path)
    offline = path == name_or_path and not Path(path).exists() and offline_unless_reachable(name_or_path)
    try:
        return load(path)
    except OSError as e:
        if offline:
            raise ModelLoadError(not_cached_message(name_or_path)) from None
        raise ModelLoadError(
            f"could not load {name_or_path!r} ({type(e).__name__}: {str(e).splitlines()[0]}); "
            "for a hub id check the name and that the hub is reachable (or pre-download it and pass "
            "its local path), for a directory check it holds config.json, weights and tokenizer files"
        ) from None


def bos_prefix(tokenizer: PreTrainedTokenizerBase) -> str:
    """The BOS text a raw prompt needs: every harness call site tokenizes formatted text with
    add_special_tokens=False (a chat template writes its own special tokens), so a base model whose tokenizer
    adds BOS itself (Gemma, Llama) would otherwise never see it; Gemma-3-270M then answers '<h2><h2>...'.
    Empty for tokenizers that add nothing (the zoo's, SmolLM2's)."""
    bos = tokenizer.bos_token
    ids = tokenizer("a", add_special_tokens=True)["input_ids"]
    return bos if bos and ids and ids[0] == tokenizer.bos_token_id else ""


def _load_tokenizer(path: str) -> PreTrainedTokenizerBase:
    """AutoTokenizer, except for a saved generic fast tokenizer (the zoo's char tokenizer).

    transformers 5 picks the tokenizer class from the *model* type, so a char tokenizer saved next
    to a Qwen2 model would come back as Qwen2Tokenizer with Qwen's byte-level pre-tokenizer, which
    silently drops spaces. A tokenizer that declares itself generic is loaded verbatim instead.
    """
    config = Path(path) / "tokenizer_config.json"
    if config.is_file() and json.loads(config.read_text()).get("tokenizer_class") in GENERIC_TOKENIZERS:
        return PreTrainedTokenizerFast.from_pretrained(path)
    return AutoTokenizer.from_pretrained(path)


@dataclass
class Generation:
    """Completions for a list of prompts, `n` per prompt, with the token counts actually used.

    texts[i][j] is completion j of prompt i; prompt_tokens[i] the prompt's length;
    completion_tokens[i][j] the decoded tokens of that completion up to and including EOS, and
    completion_ids[i][j] those tokens (for scoring them under another model, e.g. KL to base).
    batches: one (rows, padded prompt width, tokens decoded) per `generate` call, the shapes that
    really ran (harness.core.flops.padded_generation_flops turns them into executed FLOPs).
    """

    texts: list[list[str]]
    prompt_tokens: list[int]
    completion_tokens: list[list[int]]
    completion_ids: list[list[list[int]]]
    batches: list[tuple[int, int, int]] = field(default_factory=list)


@torch.no_grad()
def generate(policy: Policy, prompts: list[str], *, n: int = 1, greedy: bool = True,
             temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int = 32,
             batch_size: int = 64, seed: int | None = None, progress: str | None = None) -> Generation:
    """Batched generation with left padding.

    Args:
        policy: the model to sample from.
        prompts: task prompts (formatted with `policy.format` here).
        n: completions per prompt (must be 1 when greedy).
        greedy: greedy decoding (temperature/top_p ignored) or sampling.
        temperature, top_p: sampling parameters.
        max_new_tokens: decode at most this many tokens per completion.
        batch_size: sequences per `generate` call (prompts x n are flattened, then chunked).
        seed: seeds torch's RNG before sampling, for reproducible samples.
        progress: a label for a progress bar on stderr (sequences done of all, ETA) when there is more
            than one batch, else of the one batch's decode steps; None (ES members, training) prints nothing.
    """
    if greedy and n != 1:
        raise ValueError("greedy decoding gives one completion per prompt; set n=1 or greedy=False")
    tok, model = policy.tokenizer, policy.model
    if seed is not None:
        torch.manual_seed(seed)
    texts = [policy.format(p) for p in prompts]
    flat = [t for t in texts for _ in range(n)]
    out_text, out_len, out_ids, prompt_len, batches = [], [], [], [], []
    bar = progress_bar(progress, len(flat)) if progress and len(flat) > batch_size else None
    # one batch (500 greedy prompts fit in 512) would show no bar for minutes: count its decode steps instead
    steps = progress_bar(progress, max_new_tokens, unit="step") if progress and bar is None and flat else None
    for start in range(0, len(flat), batch_size):
        chunk = flat[start:start + batch_size]
        enc = tok(chunk, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
        kwargs = dict(do_sample=False) if greedy else dict(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)
        if steps is not None:
            kwargs["stopping_criteria"] = StoppingCriteriaList([_StepTicker(steps)])
        with _heartbeat(model, bar if bar is not None else steps):  # a bar's truth is its count, not its presence
            seqs = model.generate(**enc, max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id,
                                  eos_token_id=tok.eos_token_id, **kwargs)
        new = seqs[:, enc["input_ids"].shape[1]:]
        batches.append((len(chunk), enc["input_ids"].shape[1], new.shape[1]))
        out_text += tok.batch_decode(new, skip_special_tokens=True)
        lengths = _lengths_to_eos(new, tok.eos_token_id, tok.pad_token_id)
        out_len += lengths
        out_ids += [row[:k].tolist() for row, k in zip(new, lengths)]
        prompt_len += enc["attention_mask"].sum(1).tolist()
        if bar is not None:
            bar.update(len(chunk))
    for b in (bar, steps):
        if b is not None:
            b.close()
    return Generation(
        texts=[out_text[i * n:(i + 1) * n] for i in range(len(prompts))],
        prompt_tokens=[prompt_len[i * n] for i in range(len(prompts))],
        completion_tokens=[out_len[i * n:(i + 1) * n] for i in range(len(prompts))],
        completion_ids=[out_ids[i * n:(i + 1) * n] for i in range(len(prompts))],
        batches=batches,
    )


@contextlib.contextmanager
def _heartbeat(model, bar):
    """While `model` generates, let `bar` redraw (its count unchanged, its elapsed time moving) after each decoder
    layer's forward, at most as often as the bar prints (tqdm's mininterval: 0.5 s on a terminal, 30 s in a
    log). A batch's bar moves once per batch or decode step, and the first step is the whole batch's prefill:
    500 prompts of SmolLM2 on one CPU thread took 173 s before the first tick, silent. The layer hooks only
    read the clock; outputs are unchanged. No bar, or a model whose layers are not found: nothing is hooked."""
    decoder = model.get_decoder() if bar is not None and hasattr(model, "get_decoder") else None
    layers = getattr(decoder, "layers", None) or []

    def tick(*_) -> None:  # a forward hook that returns something replaces the layer's output: return None
        bar.update(0)

    handles = [layer.register_forward_hook(tick) for layer in layers]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


class _StepTicker(StoppingCriteria):
    """Ticks a progress bar once per decode step; never stops generation (every row: False)."""

    def __init__(self, bar):
        self.bar = bar

    def __call__(self, input_ids, scores, **kwargs):
        self.bar.update(1)
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def _lengths_to_eos(new: torch.Tensor, eos_id: int, pad_id: int) -> list[int]:
    """Decoded tokens per row, up to and including the first EOS (padding after it is not work)."""
    is_end = (new == eos_id) | (new == pad_id)
    lengths = []
    for row, ends in zip(new, is_end):
        idx = torch.nonzero(ends)
        lengths.append(int(idx[0]) + 1 if len(idx) else row.shape[0])
    return lengths
