"""The model card (harness/tools/model_card.py): headroom flags and units, from synthetic scores.

    python -m pytest tests/test_model_card.py -q
"""
from harness.tools.model_card import card


def entry(task, greedy, prompts=64, samples=32, **more):
    m = {"greedy_acc": {"mean": greedy, "ci_low": greedy - 0.05, "ci_high": greedy + 0.05}}
    m.update({k: {"mean": v, "ci_low": v - 0.05, "ci_high": v + 0.05} for k, v in more.items()})
    return {"task": task, "overrides": {}, "version": 1, "prompts": prompts, "samples": samples, "wall_s": 12.0,
            "metrics": m, "examples": []}


def test_card_rows_flag_headroom_and_keep_units():
    scores = {"model": "smollm2-135m-instruct", "dtype": "float32", "chat_template": True, "prompts": 64,
              "samples": 32, "long": [16, 0], "threads": 1, "torch": "2.13.0", "tasks": {
                  "arithmetic (2 digits, +-)": entry("arithmetic", 0.25, **{"pass@1": 0.2, "pass@16": 0.8, "pass@32": 0.9}),
                  "gsm8k": entry("gsm8k", 0.0, prompts=16, samples=0),
                  "math500": {**entry("math500", 0.0625, prompts=16, samples=0), "metrics": {
                      "greedy_acc": {"mean": 0.0625, "ci_low": 0.0, "ci_high": 0.1875}}},
                  "conciseness": {**entry("conciseness", 0.0), "metrics": {
                      "greedy_acc": {"mean": 0.0, "ci_low": 0.0, "ci_high": 0.0},   # exact match: not its score
                      "greedy_reward": {"mean": -242.0, "ci_low": -300.0, "ci_high": -200.0}}}}}
    text = card(scores)
    assert "| arithmetic (2 digits, +-) | 64 x 32 | 25.0 [20.0, 30.0] | 20.0 [15.0, 25.0] | 80.0 [75.0, 85.0] | 90.0 [85.0, 95.0] | yes | 12 |" in text
    assert "| gsm8k | 16 x 0 | 0.0 [-5.0, 5.0] |  |  |  | no | 12 |" in text
    assert "| conciseness | 64 x 32 | -242 [-300, -200] |" in text   # characters, not %
    assert "| math500 | 16 x 0 | 6.2 [0.0, 18.8] |  |  |  | unclear (its interval reaches 0) |" in text
    assert "dequantised to fp32" in text and "--long 16 0" in text
