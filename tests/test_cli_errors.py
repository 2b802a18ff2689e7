"""The command line's mistakes, answered in one line before Hydra composes and before torch loads; plans that
write nothing; a model path that does not exist, refused without a record.

    python -m pytest tests/test_cli_errors.py -q
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.paths import CONF_DIR
from harness.runner.argv_check import argv_problem, planning_overrides

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers", "trl", "pandas", "matplotlib")


def harness(*args, cwd, importtime=False):
    """`python -m harness ARGS`: (exit code, stdout, stderr lines that are not import timings, modules imported)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, *(["-X", "importtime"] if importtime else []), "-m", "harness", *args],
                       cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    lines = r.stderr.splitlines()
    modules = {ln.rsplit("|", 1)[1].strip() for ln in lines if ln.startswith("import time:")}
    return r.returncode, r.stdout, [ln for ln in lines if not ln.startswith("import time:")], modules


# The issue's forms: before, Hydra's 7-21 lines ("To append to your config use +metod=es").
TYPOS = [
    ("metod=es", "unknown key 'metod' on the command line; did you mean 'method'? config groups: budget, engine,"),
    ("+metod=es", "unknown key 'metod' on the command line; did you mean 'method'?"),
    ("method.sigmaa=1e-3", "unknown key 'sigmaa' in method (method=base, methods.base.Base); method.sigma is a key "
                           "of method=es, not of method=base; method=base takes no keys"),
    ("method.workers=2", "method.workers moved to engine.workers; write engine.workers=2"),
    ("task=gsm9k", "task=gsm9k is not an option of conf/task/; did you mean task=gsm8k? options: arithmetic, "
                   "conciseness, countdown,"),
]


@pytest.mark.parametrize("arg, message", TYPOS)
def test_the_issue_forms_get_one_line_naming_the_fix(arg, message):
    assert argv_problem([arg], CONF_DIR).startswith(message)


@pytest.mark.parametrize("args, message", [
    (["method=es", "method.sigmaa=1e-3"], "unknown key 'sigmaa' in method (method=es, methods.es.ES); did you mean "
                                          "method.sigma?; method=es has keys: alpha, alpha_per_sigma,"),
    (["method=es", "+method.sigmaa=1e-3"], "unknown key 'sigmaa' in method (method=es, methods.es.ES); did you mean "
                                           "method.sigma?"),
    (["+eval.n_prompt=20"], "unknown key 'n_prompt' in eval (eval=default, harness.evaluation.evaluate.EvalConfig); "
                            "did you mean eval.n_prompts?"),
    (["task.n_trian=5"], "unknown key 'n_trian' in task (task=countdown, tasks.countdown.Countdown); did you mean "
                         "task.n_train?"),
    (["budget.flop=1e12"], "unknown key 'flop' in budget (budget=quickstart); did you mean budget.flops?"),
    (["model.dtyp=bfloat16"], "unknown key 'dtyp' in model (model=zoo-1m); did you mean model.dtype?"),
    (["+analysis.top_kk=3"], "unknown key 'top_kk' in analysis; did you mean analysis.top_k?"),
    (["dry_run=true"], "dry_run is a switch the config does not declare; add it with +dry_run=true"),
    (["experiment=quickstrat"], "experiment=quickstrat is not an option of conf/experiment/; did you mean "
                                "experiment=quickstart?"),
    (["-m", "method=es,grpoo"], "method=grpoo is not an option of conf/method/; did you mean method=grpo?"),
    # an experiment file's `override /method:` decides which keys exist, as it does for Hydra
    (["experiment=smoke", "method.sigma=0.1"], "unknown key 'sigma' in method (method=base, methods.base.Base)"),
    (["model.name_or_path=./no/such/model"], "model path './no/such/model' does not exist; pass an existing "
                                             "directory, a hub id like Qwen/Qwen2.5-1.5B-Instruct, or a zoo model: "),
])
def test_keys_and_options_are_read_against_conf(args, message):
    assert argv_problem(args, CONF_DIR).startswith(message)


@pytest.mark.parametrize("args", [
    ["method=es", "method.sigma=1e-3", "method.lora.r=4"], ["method=es", "+method.fixed_batch=true"],
    ["method=sequential", "method.stages.es.sigma=0.1"], ["engine=vllm", "engine.workers=2"],
    ["-m", "method=es,grpo", "method.sigma=0.1"], ["seed=0,1,2"], ["+run_index=3", "+include=[GRPO-LoRA]"],
    ["experiment=qiu2025_table1", "+plan=true", "+plan.gpu=a100"], ["experiment=null"], ["+rehearse=true"],
    ["--cfg", "job"], ["hydra.run.dir=x", "hydra/job_logging=none"], ["+model.revision=main"],
    ["eval.tasks=[gsm8k]", "eval.task_overrides.gsm8k.n_prompts=5"], ["model=generic", "model.name_or_path=org/m"],
    ["experiment=smoke", "models=[zoo-1m]", "seeds=[0,1]"], ["sweep=seeds3", "launcher=submitit_slurm", "stamp=s"],
    ["model.name_or_path=zoo-100k"], ["group=g", "label=l", "results_dir=r", "runs_dir=x"], ["+vars.a=1"],
])
def test_valid_command_lines_pass(args):
    assert argv_problem(args, CONF_DIR) is None


def test_a_config_dir_adds_its_options(tmp_path):
    (tmp_path / "task").mkdir()
    (tmp_path / "task" / "mine.yaml").write_text("_target_: tasks.countdown.Countdown\nn_train: 5\n")
    assert argv_problem(["--config-dir", str(tmp_path), "task=mine", "task.n_train=3"], CONF_DIR) is None
    assert "did you mean task=mine?" in argv_problem(["--config-dir", str(tmp_path), "task=mien"], CONF_DIR)


def test_an_unknown_option_names_every_config_folder_searched(tmp_path):
    """--config-dir and hydra.searchpath folders are searched as Hydra searches them, and the line names each."""
    (tmp_path / "method").mkdir()
    (tmp_path / "method" / "mine.yaml").write_text("_target_: methods.base.Base\n")
    assert argv_problem(["method=rlooo"], CONF_DIR).startswith("method=rlooo is not an option of conf/method/; ")
    assert argv_problem(["--config-dir", str(tmp_path), "method=mien"], CONF_DIR).startswith(
        f"method=mien is not an option of {tmp_path}/method/ or conf/method/; did you mean method=mine? options: base,")
    assert argv_problem([f"hydra.searchpath=[file://{tmp_path}]", "method=mien"], CONF_DIR).startswith(
        f"method=mien is not an option of conf/method/ or {tmp_path}/method/; did you mean method=mine?")
    assert argv_problem([f"hydra.searchpath=[file://{tmp_path}]", "method=mine"], CONF_DIR) is None


def test_a_key_an_option_inherits_from_its_defaults_list_is_accepted():
    """conf/eval/quick.yaml is `defaults: [default]` and three keys: eval.n_prompts comes from default.yaml."""
    assert argv_problem(["eval=quick", "eval.n_prompts=50"], CONF_DIR) is None
    assert argv_problem(["eval=quick", "eval.n_samples=4", "eval.kl_to_base=true"], CONF_DIR) is None
    assert argv_problem(["eval=quick", "eval.n_promptz=50"], CONF_DIR).startswith(
        "unknown key 'n_promptz' in eval (eval=quick, harness.evaluation.evaluate.EvalConfig); did you mean "
        "eval.n_prompts?")


def test_an_inherited_key_of_an_outside_option_too(tmp_path):
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "tiny.yaml").write_text("defaults: [quick]\nn_samples: 2\n")  # quick's, then default's
    (tmp_path / "eval" / "loop.yaml").write_text("defaults: [loop]\n")  # a cycle is not followed forever
    assert argv_problem(["--config-dir", str(tmp_path), "eval=tiny", "eval.n_prompts=5"], CONF_DIR) is None
    assert "unknown key 'n_promptz'" in argv_problem(["--config-dir", str(tmp_path), "eval=loop",
                                                      "eval.n_promptz=5"], CONF_DIR)


def test_planning_writes_no_hydra_files_only_when_asked():
    assert planning_overrides(["experiment=x", "+dry_run=true"]) == planning_overrides(["+plan=true"]) != []
    assert planning_overrides(["experiment=x", "+rehearse=true"]) == planning_overrides(["+rehearse=all"]) != []
    assert planning_overrides(["+dry_run=false"]) == planning_overrides(["method=es"]) == []


@pytest.mark.slow  # a subprocess per form: Python and OmegaConf start-up each time
@pytest.mark.parametrize("arg, message", TYPOS)
def test_each_form_is_one_line_on_the_command_line_before_torch(arg, message, tmp_path):
    rc, _, err, modules = harness(arg, cwd=tmp_path, importtime=True)
    assert rc == 2 and err == [f"esbench: error: {argv_problem([arg], CONF_DIR)}"], err
    assert not any(m in modules for m in HEAVY) and "hydra" not in modules
    assert not (tmp_path / "runs").exists()  # refused before Hydra makes a run folder


@pytest.mark.slow
def test_a_missing_model_path_leaves_no_record_and_no_folder(tmp_path):
    """Before: 19.9 s, then a permanent FAILED row in outputs/adhoc/table.md."""
    rc, _, err, modules = harness("model.name_or_path=./no/such/model", cwd=tmp_path, importtime=True)
    assert rc == 2 and len(err) == 1 and "model path './no/such/model' does not exist" in err[0]
    assert "torch" not in modules and not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_a_model_file_naming_a_missing_folder_is_refused_after_composing_without_a_record(tmp_path):
    conf = tmp_path / "conf"  # a model option naming a folder that is not there, chosen by a file
    for group in ("model", "experiment"):
        (conf / group).mkdir(parents=True)
    (conf / "model" / "gone.yaml").write_text("name_or_path: ./gone/model\ndtype: float32\nchat_template: false\n"
                                              "system_prompt: null\nes_sigma: 0.01\nes_alpha: 0.005\n")
    (conf / "experiment" / "gone.yaml").write_text("# @package _global_\ndefaults:\n  - override /model: gone\n")
    rc, _, err, modules = harness("--config-dir", str(conf), "experiment=gone", "method=base", cwd=tmp_path,
                                  importtime=True)
    assert rc == 2 and err == [next(ln for ln in err if "model path './gone/model' does not exist" in ln)], err
    assert not list((tmp_path / "runs").rglob("*"))  # Hydra's run folder removed: nothing for a table to list
    assert "torch" not in modules


@pytest.mark.slow
def test_dry_run_and_plan_write_nothing(tmp_path):
    """Before: runs/<group>/<stamp>-base/ with .hydra/ and cli.log, under a folder name the plan did not print."""
    for switch in ("+dry_run=true", "+plan=true"):
        rc, out, err, _ = harness("experiment=smoke", switch, "stamp=p", cwd=tmp_path)
        assert rc == 0, err[-5:]
        assert not list(tmp_path.iterdir()), list(tmp_path.rglob("*"))
    assert "7 runs -> runs/smoke/p/" in harness("experiment=smoke", "+dry_run=true", "stamp=p", cwd=tmp_path)[1]


@pytest.mark.slow
def test_dry_run_of_one_run_shows_it_and_runs_nothing(tmp_path):
    """Before: +dry_run=true without an experiment ran the run."""
    rc, out, err, modules = harness("method=es", "+dry_run=true", "stamp=s", cwd=tmp_path, importtime=True)
    assert rc == 0 and "sigma: 0.01" in out and "dry run: one run" in out and "runs/adhoc/s-es/" in out, err
    assert "torch" not in modules and not list(tmp_path.iterdir())
    rc, _, err, _ = harness("method=es", "+plan=true", cwd=tmp_path)
    assert rc == 2 and "+plan=true prices an experiment's runs; add experiment=NAME" in err[-1]


def test_composer_gives_what_compose_gives_for_every_run():
    """Composing each distinct set of group choices once and applying the rest as Hydra does (Composer) gives
    the config compose() gives for the whole command line, run by run (smoke: 7 runs; qiu2025_table1: every
    model and method, one run in four)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from harness.runner.experiment import Composer, list_runs

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for exp, every in (("smoke", 1), ("qiu2025_table1", 4)):
            cli = [f"experiment={exp}", "stamp=t"]
            runs = list_runs(compose(config_name="config", overrides=cli))
            composer = Composer()
            for r in runs[::every]:
                fast = composer([*cli, *r.overrides])
                whole = compose(config_name="config", overrides=[*cli, *r.overrides])
                assert OmegaConf.to_yaml(fast) == OmegaConf.to_yaml(whole), r.label
            assert len(composer._groups) < len(runs[::every]) or exp == "smoke"


def test_composer_reports_a_bad_value_override_as_hydra_does():
    from hydra import initialize_config_dir
    from hydra.errors import HydraException

    from harness.runner.experiment import Composer

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        with pytest.raises(HydraException, match="Could not override 'method.sigmaa'"):
            Composer()(["method=es", "method.sigmaa=1"])


def test_resume_command_names_the_stamp(monkeypatch):
    from omegaconf import OmegaConf

    from harness.runner.cli import resume_command

    monkeypatch.setattr(sys, "argv", ["harness", "method=es", "stamp=old", "model.name_or_path=my model"])
    cmd = resume_command(OmegaConf.create({"stamp": "20261204-101010"}))
    assert cmd == "python -m harness method=es 'model.name_or_path=my model' stamp=20261204-101010"
