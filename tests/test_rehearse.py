"""+rehearse=true: GPU experiment files run on CPU miniatures of their models (harness/runner/rehearse.py,
harness/core/miniature.py).

    python -m pytest tests/test_rehearse.py -q             # the miniature builder, the subset, the bad-input line
    python -m pytest tests/test_rehearse.py -q -m slow     # every GPU file rehearsed end to end (minutes each)
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHAPES = ROOT / "harness" / "shapes"


def harness(*args, cwd, timeout=3600):
    # PYTHONPATH: run this checkout's code even where another checkout is pip-installed (worktrees)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


# ---- the miniature builder ----
@pytest.mark.parametrize("hub_id, shape", [("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
                                           ("Qwen/Qwen2.5-0.5B-Instruct", "qwen2.5-0.5b"),
                                           ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
                                           ("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "deepseek-r1-distill-qwen-1.5b")])
def test_a_miniature_keeps_its_shapes_architecture_and_quirks(tmp_path, hub_id, shape):
    from transformers import AutoConfig

    from harness.core.miniature import build_miniature
    from harness.core.policy import load_policy

    real = json.loads((SHAPES / f"{shape}.json").read_text())
    out = build_miniature(hub_id, tmp_path / "m")
    cfg = AutoConfig.from_pretrained(out)
    assert type(cfg).__name__ == {"qwen2": "Qwen2Config", "llama": "LlamaConfig"}[real["model_type"]]
    assert cfg.tie_word_embeddings == real["tie_word_embeddings"]
    assert cfg.num_hidden_layers == 2
    ratio = real["num_attention_heads"] // real["num_key_value_heads"]
    assert cfg.num_attention_heads // cfg.num_key_value_heads == ratio  # the GQA ratio
    assert cfg.max_position_embeddings == real["max_position_embeddings"]
    want_rope = real.get("rope_scaling") or {}
    got = cfg.rope_parameters
    assert got["rope_theta"] == real.get("rope_theta", real.get("rope_parameters", {}).get("rope_theta"))
    for k, v in want_rope.items():  # llama3 scaling: factor, frequencies, original context
        assert got[k] == v, k
    policy = load_policy(str(out), "bfloat16", True, None, "cpu")
    model, tok = policy.model, policy.tokenizer
    assert model.dtype.__str__() == "torch.bfloat16"
    names = dict(model.named_parameters())
    assert ("model.layers.0.self_attn.q_proj.bias" in names) == (real["model_type"] == "qwen2")  # Qwen2's q/k/v biases
    assert (model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()) == real["tie_word_embeddings"]
    assert cfg.vocab_size == len(tok) < 120  # a character vocabulary with the family's special tokens
    text = policy.format("What is 2+3?")
    family_eos = {"qwen2.5-7b": "<|im_end|>", "qwen2.5-0.5b": "<|im_end|>", "llama-3.1-8b": "<|eot_id|>",
                  "deepseek-r1-distill-qwen-1.5b": "<｜end▁of▁sentence｜>"}[shape]
    assert tok.eos_token == family_eos and cfg.eos_token_id == tok.eos_token_id
    head = {"qwen2.5-7b": "<|im_start|>system\nYou are Qwen", "qwen2.5-0.5b": "<|im_start|>system\nYou are Qwen",
            "llama-3.1-8b": "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge",
            "deepseek-r1-distill-qwen-1.5b": "<｜begin▁of▁sentence｜><｜User｜>What"}[shape]
    assert text.startswith(head), text
    ids = tok(text, add_special_tokens=False)["input_ids"]
    specials = [t for t in tok.all_special_tokens if t in text]
    assert specials and all(ids.count(tok.convert_tokens_to_ids(t)) >= 1 for t in specials)  # one token each
    assert tok.decode(ids) == text  # lossless: characters and special tokens round-trip


def test_a_model_without_a_shipped_shape_fails_in_one_line_naming_the_file():
    from harness.core.miniature import MissingShape, shape_file

    with pytest.raises(MissingShape) as e:
        shape_file("Qwen/Qwen9-1B-Instruct")
    line = str(e.value)
    assert "\n" not in line
    assert "add harness/shapes/qwen9-1b.json" in line and "config.json" in line


def test_the_rehearsal_names_the_run_whose_model_has_no_shape(tmp_path, compose):
    from harness.core.records import PlannedRun
    from harness.runner.rehearse import RehearsalError, _miniatures

    child = compose("model=generic", "model.name_or_path=Qwen/Qwen9-1B-Instruct")
    run = PlannedRun(3, "qwen9", 0, "ES", "ES", "ES", None, {}, [], "es", "qwen9/ES/seed0")
    with pytest.raises(RehearsalError) as e:
        _miniatures([run], {3: child}, tmp_path)
    assert "harness/shapes/qwen9-1b.json" in str(e.value) and "(run 3, qwen9)" in str(e.value)
    assert not list(tmp_path.iterdir())  # checked before any miniature is built


@pytest.mark.slow  # a subprocess: Python, torch and Hydra start-up
def test_the_command_line_says_the_missing_shape_in_one_line_and_runs_nothing(tmp_path):
    r = harness("experiment=qiu2025_table2_conciseness", "model=Qwen/Qwen9-1B-Instruct", "+rehearse=true",
                cwd=tmp_path, timeout=600)
    assert r.returncode == 2, (r.stdout[-2000:], r.stderr[-2000:])
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("esbench: error:")]
    assert len(errors) == 1 and "add harness/shapes/qwen9-1b.json" in errors[0]
    assert not list(tmp_path.rglob("record.json"))


def test_the_default_subset_keeps_every_model_and_cell_at_one_seed_and_two_grid_points():
    from harness.core.records import PlannedRun
    from harness.runner.rehearse import subset

    runs, i = [], 0
    for model in ("a", "b"):
        for label, grid in [("base", None), ("ES", None), ("G x=1", "G"), ("G x=2", "G"), ("G x=3", "G")]:
            for seed in (0, 1, 2):
                runs.append(PlannedRun(i, model, seed, label.split()[0], label.split()[0], label, grid))
                i += 1
    kept = subset(runs)
    assert [(r.model, r.label, r.seed) for r in kept] == [
        (m, lab, 0) for m in ("a", "b") for lab in ("base", "ES", "G x=1", "G x=3")]
    assert [r.index for r in kept] == sorted(r.index for r in kept)  # plan order


# ---- every GPU experiment file, rehearsed: `python -m pytest -m rehearsal tests/test_rehearse.py` (about an hour
# on 2 cores; .ci/run runs three of them: numerics, qiu2025_table2_conciseness and es_variants) ----
GPU_FILES = {  # file: runs in the default subset (+rehearse=true)
    "qiu2025_table1": 56, "sigma_sweep": 40, "qiu2025_table2_conciseness": 7, "gsm8k_passk": 9,
    "es_variants": 33, "population": 21, "numerics": 8,
}


def _rehearse_file(name, tmp_path):
    r = harness(f"experiment={name}", "+rehearse=true", "stamp=rh", cwd=tmp_path)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    out = tmp_path / "outputs" / "rehearse" / name
    summary = (out / "rehearsal.md").read_text()
    assert f"{GPU_FILES[name]} runs, 0 failed" in summary
    records = [json.loads(p.read_text()) for p in (tmp_path / "runs" / "rehearse" / name / "rh").rglob("record.json")]
    assert len(records) == GPU_FILES[name] and all(rec["status"] == "ok" for rec in records)
    for f in ("table.md", "summary.md", "comparisons.md", "findings.md", "rehearsal.md"):
        assert (out / f).is_file(), f
    assert (tmp_path / "outputs" / "rehearse" / "claims.md").is_file()
    assert not (tmp_path / "runs" / name).exists() or not list((tmp_path / "runs" / name).rglob("record.json"))
    assert "not rehearsed on CPU" in r.stdout
    return r, records


@pytest.mark.rehearsal
def test_rehearse_qiu2025_table1(tmp_path):
    r, records = _rehearse_file("qiu2025_table1", tmp_path)
    assert {rec["model"].rsplit("/", 1)[-1] for rec in records} >= {"Qwen_Qwen2.5-0.5B-Instruct",
                                                                     "meta-llama_Llama-3.1-8B-Instruct"}


@pytest.mark.rehearsal
def test_rehearse_sigma_sweep(tmp_path):
    _rehearse_file("sigma_sweep", tmp_path)
    assert (tmp_path / "outputs" / "rehearse" / "sigma_sweep" / "sigma.md").is_file()


@pytest.mark.rehearsal
def test_rehearse_qiu2025_table2_conciseness(tmp_path):
    _, records = _rehearse_file("qiu2025_table2_conciseness", tmp_path)
    assert all("kl_to_base" in rec["metrics"]["test"] for rec in records)


@pytest.mark.rehearsal
def test_rehearse_gsm8k_passk(tmp_path):
    _, records = _rehearse_file("gsm8k_passk", tmp_path)
    held = {k for rec in records for k in rec["heldout"]}
    assert held == {"csqa", "hotpotqa", "countdown_think", "gpqa", "mbpp"}


@pytest.mark.rehearsal
def test_rehearse_es_variants(tmp_path):
    _rehearse_file("es_variants", tmp_path)


@pytest.mark.rehearsal
def test_rehearse_population(tmp_path):
    _rehearse_file("population", tmp_path)


@pytest.mark.rehearsal
def test_rehearse_numerics(tmp_path):
    _rehearse_file("numerics", tmp_path)
