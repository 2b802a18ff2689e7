"""The shipped zoo: the char tokenizer round-trips, and every shipped model scores what its card says.

    python -m pytest tests/test_zoo.py -q
"""
import json

import pytest
import torch

from harness.core.chartok import build_char_tokenizer
from harness.evaluation.evaluate import EvalConfig, evaluate
from harness.core.paths import ZOO_DIR
from harness.core.policy import load_policy
from harness.tools.zoo import LADDER, ZOO
from tasks.countdown import Countdown

DEFAULT = "zoo-1m"


def test_char_tokenizer_roundtrip_after_save(tmp_path):
    tok = build_char_tokenizer()
    text = "3 7 12>22: (12+7)+3\n<think> a  b </think>"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text) and tok.decode(ids) == text
    tok.save_pretrained(tmp_path)
    from transformers import AutoTokenizer
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert again.decode(again(text, add_special_tokens=False)["input_ids"]) == text


def test_every_zoo_model_is_shipped_with_a_card():
    for name in ZOO:
        assert (ZOO_DIR / name / "CARD.md").is_file(), f"rebuild it: python -m harness.tools.zoo build {name}"
    total = sum(p.stat().st_size for p in ZOO_DIR.rglob("*.safetensors"))
    assert total < 40e6, f"zoo weights take {total / 1e6:.1f} MB; keep them under 40 MB"


def test_ladder_is_a_ladder():
    """One recipe, size the only axis: parameters rise 30x+ along it, accuracy rises strictly over the
    lower three sizes, and no size falls below the 95% interval of the size under it (zoo-4m, at
    39.6% under zoo-1m's 56.0%, is what this guards against).

    Measured (test greedy, %): 2.0, 14.4, 23.0, 21.0, 24.2. From 0.3M up the sizes are level within
    their intervals, at 400 pretraining steps and at 1200 alike; see the README.
    """
    stats = [json.loads((ZOO_DIR / n / "train_stats.json").read_text()) for n in LADDER]
    params = [s["params"] for s in stats]
    acc = [s["base_scores"]["greedy_acc"] for s in stats]
    low = [s["base_scores_ci95"]["greedy_acc"][0] for s in stats]
    assert params == sorted(params) and params[-1] / params[0] > 30
    assert all(b >= lo for lo, b in zip(low, acc[1:])), f"base greedy accuracy along the ladder: {acc}"
    assert acc[2] > acc[1] > acc[0] and acc[-1] > acc[0] + 0.1, f"base greedy accuracy along the ladder: {acc}"
    assert len({tuple(sorted((k, v) for k, v in s["spec"].items() if k not in LADDER_SHAPE)) for s in stats}) == 1
    for s in stats:  # headroom: pass@32 well above greedy
        assert s["base_scores"]["pass@32"] > s["base_scores"]["greedy_acc"] + 0.05


LADDER_SHAPE = ("hidden", "layers", "heads", "kv_heads", "intermediate")


@pytest.mark.parametrize("name", [DEFAULT, "zoo-100k", "ladder-300k"])
def test_zoo_model_scores_as_its_card_states(name):
    stats = json.loads((ZOO_DIR / name / "train_stats.json").read_text())
    lo, hi = stats["base_scores_ci95"]["greedy_acc"]
    task = Countdown(numbers=stats["spec"].get("card_numbers", 3))
    res = evaluate(load_policy(name, device="cpu"), task, "test", EvalConfig(n_samples=0, pass_ks=[], maj_ks=[]))
    acc = res.metrics["greedy_acc"]["mean"]
    assert lo <= acc <= hi, f"{name}: greedy accuracy {acc:.3f} outside its card's CI [{lo}, {hi}]"
    assert abs(acc - stats["base_scores"]["greedy_acc"]) < 0.02
    if name == DEFAULT:
        assert 0.15 <= acc <= 0.62, "the default model must leave headroom (roughly 15-60% greedy)"


def test_shipped_zoo_tokenizer_keeps_spaces():
    # transformers would otherwise rebuild it as a Qwen2 byte-level tokenizer that drops spaces
    policy = load_policy("zoo-100k", device="cpu")
    text = "12 2 4>96:"
    assert policy.tokenizer(text, add_special_tokens=False)["input_ids"] == \
        build_char_tokenizer()(text, add_special_tokens=False)["input_ids"]
