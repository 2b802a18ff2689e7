"""Every config composes, and every `_target_` binds to its callable's signature without building it.

    python -m pytest tests/test_configs.py -q
"""
import inspect

import pytest
from hydra.utils import get_method
from omegaconf import OmegaConf

from harness.evaluation.evaluate import EvalConfig
from harness.runner.experiment import list_runs
from harness.core.paths import CONF_DIR, SHAPES_DIR

GROUPS = ["model", "task", "method", "budget", "eval"]


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def _bind(node):
    kwargs = {k: v for k, v in OmegaConf.to_container(node, resolve=True).items() if k != "_target_"}
    inspect.signature(get_method(node._target_)).bind(**kwargs)


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in options(g)])
def test_every_option_composes_and_binds(compose, group, option):
    # generic: what model=<hub id or folder> composes to (harness/runner/model_arg.py), so it comes with a name
    cfg = compose(f"{group}={option}", *(["model.name_or_path=Qwen/Qwen2.5-0.5B-Instruct"]
                                         if (group, option) == ("model", "generic") else []))
    for node in (cfg.task, cfg.method):
        _bind(node)
    EvalConfig(**OmegaConf.to_container(cfg.eval, resolve=True))
    assert cfg.model.name_or_path and cfg.budget.kind in ("flops", "samples", "updates")


@pytest.mark.parametrize("experiment", options("experiment"))
def test_every_experiment_run_composes_and_binds(compose, experiment):
    """Every run of the plan (each model x cell/grid point; seeds only change `seed`) composes and binds."""
    cfg = compose(f"experiment={experiment}")
    runs = list_runs(cfg)
    assert runs and [r.index for r in runs] == list(range(len(runs)))
    assert len({r.key for r in runs}) == len(runs), "two runs would share a records folder"
    seen = set()
    for r in runs:
        overrides = tuple(o for o in r.overrides if not o.startswith("seed="))
        if overrides in seen:
            continue
        seen.add(overrides)
        child = compose(f"experiment={experiment}", *overrides)
        _bind(child.method)
        _bind(child.task)
        for key in r.point:
            assert OmegaConf.select(child, key) is not None, f"axis {key} of {r.label} is not a config key"
        EvalConfig(**OmegaConf.to_container(child.eval, resolve=True))
        kind = child.budget.kind
        assert child.budget.get(kind) is not None, f"{r.label} on {r.model} has no budget.{kind}"


@pytest.mark.parametrize("sweep", options("sweep"))
def test_every_sweep_composes_with_an_experiment(compose, sweep):
    cfg = compose("experiment=quickstart", f"sweep={sweep}")
    assert list_runs(cfg)


def test_qiu2025_table1_plan_and_paper_numbers(compose):
    cfg = compose("experiment=qiu2025_table1")
    runs = list_runs(cfg)
    assert len(runs) == 7 * (1 + 1 + 3 * 4)   # models x (base, ES, PPO/GRPO(8)/GRPO(30) grids of 4)
    assert {r.column for r in runs} == {"Original", "ES", "PPO", "GRPO(8)", "GRPO(30)"}
    for model, cols in cfg.paper.items():
        assert model in {r.model for r in runs} and set(cols) == {r.column for r in runs}
    assert cfg.paper["qwen2.5-3b-instruct"]["ES"] == 60.5
    es = compose("experiment=qiu2025_table1", *next(r for r in runs if r.column == "ES").overrides)
    m = es.method
    assert (m.population, m.sigma, m.alpha, m.prompts_per_iteration) == (30, 1e-3, 5e-4, 200)
    # priced from the model's shape (harness/core/model_shapes.py): 3e6 completions of 150 + 300 tokens
    from harness.core.flops import generation_flops
    from harness.core.model_shapes import load_shape
    per_completion = generation_flops(load_shape("Qwen/Qwen2.5-0.5B-Instruct"), [150], [300])
    assert es.budget.kind == "flops" and es.budget.flops == pytest.approx(3e6 * per_completion) == pytest.approx(1.24e18, rel=0.01)
    samples = compose("experiment=qiu2025_table1", "budget=paper_samples", *runs[1].overrides)
    assert samples.budget.kind == "samples" and samples.budget.samples == 3e6   # equal samples: one override


def test_sigma_sweep_varies_sigma_at_fixed_alpha_beside_alpha_tied_to_sigma(compose):
    """Tying alpha to sigma confounds noise scale with step size, so both cells run."""
    cfg = compose("experiment=sigma_sweep")
    alphas = {}
    runs = list_runs(cfg)
    for run in runs:
        if run.method == "es" and run.model == runs[0].model and run.seed == runs[0].seed:
            child = compose("experiment=sigma_sweep", *run.overrides)
            _bind(child.method)
            alphas.setdefault(run.cell, {})[child.method.sigma] = (child.method.alpha, child.method.alpha_per_sigma)
    assert set(alphas["ES"]) == {1e-4, 3e-4, 1e-3, 3e-3}
    assert {a for a, _ in alphas["ES"].values()} == {5e-4} and {r for _, r in alphas["ES"].values()} == {None}
    assert set(alphas["ES alpha tied"]) == {1e-4, 3e-4, 3e-3}   # at 1e-3 it would repeat the fixed-alpha run
    assert {r for _, r in alphas["ES alpha tied"].values()} == {0.5}
    assert cfg.axis_plot.cell == "ES"   # sigma.md plots the sweep at fixed step size


def _children(compose, experiment: str, model: str | None = None) -> dict:
    """{cell: [composed child of each point]} for one model (the first by default) and the first seed."""
    runs = list_runs(compose(f"experiment={experiment}"))
    model = model or runs[0].model
    out = {}
    for r in runs:
        if r.model == model and r.seed == runs[0].seed:
            out.setdefault(r.cell, []).append(compose(f"experiment={experiment}", *r.overrides))
    return out


def test_population_matches_updates_at_300_on_gsm8k_with_equal_flops_as_second_cells(compose):
    """NOTE-076: "On GSM8K at update 300, only N = 30 stays within 0.5% of the N = 30 reference at 0.5B ..."."""
    cells = _children(compose, "population")
    assert {c.method.population for c in cells["ES"]} == {10, 20, 30}
    for child in cells["ES"]:
        assert child.task._target_ == "tasks.gsm8k.GSM8K"
        assert (child.budget.kind, child.budget.updates) == ("updates", 300)
    flops = {c.budget.flops for c in cells["ES equal FLOPs"]}
    assert {c.budget.kind for c in cells["ES equal FLOPs"]} == {"flops"} and len(flops) == 1 and min(flops) > 0
    assert all(c.method.max_iterations >= 900 for c in cells["ES equal FLOPs"])   # N=10 buys ~3x the updates
    assert {r.model for r in list_runs(compose("experiment=population"))} >= {
        "qwen2.5-0.5b-instruct", "qwen2.5-1.5b-instruct", "qwen2.5-3b-instruct"}
    assert "within 0.5% of the N = 30 reference" in (CONF_DIR / "experiment" / "population.yaml").read_text()


def test_es_variants_has_a_model_above_the_boundary_and_splits_updates_in_sequence(compose):
    runs = list_runs(compose("experiment=es_variants"))
    assert {"qwen2.5-0.5b-instruct", "qwen2.5-1.5b-instruct", "qwen2.5-3b-instruct"} <= {r.model for r in runs}
    assert "(either side of the ES boundary)" not in (CONF_DIR / "experiment" / "es_variants.yaml").read_text()
    cells = _children(compose, "es_variants")
    for label in ("GRPO then ES", "ES then GRPO"):
        (seq,) = cells[label]
        assert (seq.budget.kind, seq.budget.updates, seq.method.split_by) == ("updates", 500, "updates")
    assert cells["ES full"][0].budget.kind == "flops"
    (flops,) = [compose("experiment=es_variants", "vars.sequential_split=flops",
                        *r.overrides) for r in runs if r.label == "GRPO then ES"][:1]
    assert (flops.budget.kind, flops.method.split_by) == ("flops", "flops") and flops.budget.flops > 0


def test_gsm8k_passk_two_epochs_of_matched_updates_three_seeds_and_the_notes_held_out_set(compose):
    cfg = compose("experiment=gsm8k_passk")
    assert list(cfg.seeds) == [0, 1, 2]
    assert {"csqa", "hotpotqa", "countdown_think", "gpqa", "mbpp"} <= set(cfg.eval.tasks)
    cells = _children(compose, "gsm8k_passk")
    grpo, es = cells["GRPO"][0], cells["ES"][0]
    for child in (grpo, es):
        assert (child.budget.kind, child.budget.updates) == ("updates", 218)
    assert grpo.method.prompts_per_step == es.method.prompts_per_iteration == 64 and not es.method.fixed_batch
    assert 2 * 6973 / 64 == pytest.approx(218, abs=0.5)   # two epochs of GSM8K's training rows


def test_qiu2025_table1_labels_the_published_protocol(compose):
    cfg = compose("experiment=qiu2025_table1")
    assert "samples-matched" in cfg.paper_note and "budget=paper_samples" in cfg.paper_note
    assert "Qiu et al.'s Table 1" in (CONF_DIR / "budget" / "paper_samples.yaml").read_text()


def test_twins_use_the_zoo_and_every_zoo_size(compose):
    for name in ("qiu2025_table1_cpu", "sigma_sweep_cpu"):
        runs = list_runs(compose(f"experiment={name}"))
        assert {r.model for r in runs} == {"zoo-100k", "zoo-1m", "zoo-4m"}


def test_launcher_config_composes(compose):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    cfg = compose("experiment=smoke", "launcher=submitit_slurm", "hydra.launcher.partition=gpu", hydra=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher") and launcher.partition == "gpu"
    assert {"gpus_per_node", "timeout_min", "mem_gb", "cpus_per_task"} <= set(launcher)
    assert str(cfg.hydra.mode) == "RunMode.MULTIRUN"


def test_every_config_opens_with_its_command():
    for path in CONF_DIR.rglob("*.yaml"):
        head = [ln for ln in path.read_text().splitlines()[:3] if ln.startswith("#")]
        assert any("python -m harness" in ln for ln in head), f"{path} should open with its launch command"


def test_model_hub_id_or_folder_composes_to_the_generic_config(compose, tmp_path):
    """`model=<hub id or folder>` as the README writes it: Hydra alone would look for conf/model/Qwen/...yaml."""
    from harness.runner.model_arg import ModelArgError, rewrite_argv
    from harness.runner.schema import validate
    assert rewrite_argv(["prog", "model=zoo-1m", "method=es"]) == ["prog", "model=zoo-1m", "method=es"]
    argv = rewrite_argv(["prog", "model=Qwen/Qwen2.5-1.5B-Instruct", "method=es"])
    assert argv == ["prog", "model=generic", "model.name_or_path=Qwen/Qwen2.5-1.5B-Instruct", "method=es"]
    cfg = compose(*argv[1:])
    validate(cfg)
    assert (cfg.model.name_or_path, cfg.model.dtype, cfg.model.chat_template) == ("Qwen/Qwen2.5-1.5B-Instruct", "auto", "auto")
    assert (cfg.method.sigma, cfg.method.alpha) == (1e-3, 5e-4)   # the paper's ES set for a real model
    folder = tmp_path / "my model"
    folder.mkdir()
    assert rewrite_argv(["prog", f"model={folder}"])[2] == f"model.name_or_path='{folder}'"   # quoted: a space
    assert compose(*rewrite_argv(["prog", f"model={folder}"])[1:]).model.name_or_path == str(folder)
    with pytest.raises(ModelArgError, match="no folder './no/such/model'"):
        rewrite_argv(["prog", "model=./no/such/model"])
    with pytest.raises(ModelArgError, match="did you mean model=qwen2.5-1.5b-instruct"):
        rewrite_argv(["prog", "model=qwen2.5-1.5b"])
    assert rewrite_argv(["prog", "model=zoo-1m,zoo-4m"])[1] == "model=zoo-1m,zoo-4m"   # a sweep stays Hydra's


def test_a_budget_the_step_cap_cannot_spend_warns_in_one_line(compose, caplog):
    """budget.flops=1e30 used to run silently to max_iterations; shipped settings never warn."""
    import logging
    from types import SimpleNamespace

    from harness.runner.run import warn_unreachable_budget
    task = SimpleNamespace(max_new_tokens=16)
    with caplog.at_level(logging.WARNING, logger="esbench"):
        for method in ("es", "grpo", "ppo"):
            warn_unreachable_budget(compose(f"method={method}"), task)
        for r in list_runs(compose("experiment=quickstart")):
            child = compose("experiment=quickstart", *r.overrides)
            warn_unreachable_budget(child, task)
        assert not caplog.records, [r.getMessage() for r in caplog.records]
        warn_unreachable_budget(compose("method=es", "budget.flops=1e30"), task)
        warn_unreachable_budget(compose("method=grpo", "budget=paper_samples", "budget.samples=1e12"), task)
    es, grpo = (r.getMessage() for r in caplog.records)
    assert es.startswith("budget.flops=1e+30 cannot be spent: method.max_iterations=500 steps buy at most ")
    assert "budget.samples=1e+12 cannot be spent: method.max_steps=1000000 steps buy at most 6.4e+07 samples" in grpo


def test_a_model_file_sets_the_threads_a_run_uses_and_the_command_line_wins(compose):
    assert compose("model=zoo-1m").threads == 1
    assert compose("model=smollm2-135m-instruct", "model.threads=2").threads == 2
    assert compose("model=smollm2-135m-instruct", "model.threads=2", "threads=1").threads == 1


@pytest.mark.parametrize("name", sorted(p.stem for p in SHAPES_DIR.glob("*.json"))
                         + ["zoo-100k", "zoo-1m"])
def test_budgets_read_from_plain_json_match_transformers_configs(name):
    """+dry_run and +plan price every run from the config.json fields without importing transformers;
    the FLOPs must be those of transformers' own config (defaults such as num_key_value_heads included)."""
    from harness.core.flops import generation_flops
    from harness.core.model_shapes import flops_shape, load_shape
    light = flops_shape(name)
    assert not hasattr(light, "to_dict")  # the plain-JSON path, not transformers'
    heavy = load_shape(name)
    assert generation_flops(light, [150], [300]) == generation_flops(heavy, [150], [300])
    # and the memory model +plan prices from it: parameter counts (biases, tied embeddings), KV cache, context
    from harness.core import gpu_memory as gm
    assert gm.model_counts(light) == gm.model_counts(heavy)
    assert gm.kv_cache_bytes(light, 8, 450) == gm.kv_cache_bytes(heavy, 8, 450)
    assert gm.default_max_model_len(light) == gm.default_max_model_len(heavy)


def test_plan_prices_without_importing_torch():
    """+plan answers in seconds: no torch, transformers or trl import (method facts from the light config
    modules, model shapes as plain JSON)."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "harness", "experiment=numerics", "+plan=true"],
                         capture_output=True, text=True, cwd=CONF_DIR.parent, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert not imported & {"torch", "transformers", "trl"}
