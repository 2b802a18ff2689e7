"""How dense are task-improving perturbations around a model's weights?

The "density" reading of the 1.5B question says small models fail under ES because few random
directions around their weights improve the task. This measures it directly. For each sigma, n
random perturbations theta + sigma * eps (ES's own noise, methods/es_core.py: member seed j, the
same n seeds at every sigma, so the curve compares one set of directions at different radii) are
scored with greedy decoding on one fixed prompt batch (the first `prompts` rows of the task's
`split`), against the unperturbed model on the same batch.

Noise level (how "improves" is decided): the paired-bootstrap standard error of the per-prompt
reward difference d_p = r_perturbed(p) - r_base(p): `bootstrap` resamples of the prompts (seeded),
SE = the standard deviation of the resampled means of d. A perturbation improves when
mean(d) > 2 SE (and harms when mean(d) < -2 SE). Greedy decoding makes the base score exact, so the
only noise is which prompts are in the batch: a change on one or two prompts out of 64 does not count.
sigma = 0 therefore gives d = 0, SE = 0 and no improvement.

Reported per model and sigma: the fraction improving and harming with Wilson 95% binomial
intervals, and the distribution of mean(d) (mean, quantiles 5/25/50/75/95, min, max). Written to
outputs/density/<stamp>/{density.json, density.md, density.png} (density vs sigma, one line per model).

    python -m harness.tools.density model=zoo-1m sigmas=[1e-3,3e-3,1e-2,3e-2] n=64 prompts=64
    python -m harness.tools.density models=[zoo-100k,zoo-1m,zoo-4m] sigmas=[1e-3,1e-2] n=32 params=norms
    python -m pytest tests/test_density.py -q

Arguments are key=value (Hydra style, as `python -m harness`): model or models, sigmas, n, prompts,
task (a conf/task name, default countdown), split (validation), seed, params and noise_rank (the ES
variants' tensor subset and low-rank noise), bootstrap, threshold (in SEs), batch_size, threads,
device, out.
"""
from __future__ import annotations

import math
import random
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from pathlib import Path

import numpy as np
import torch

from harness.core import paths
from harness.core.atomic import save_figure_atomic, write_json_atomic, write_text_atomic
from harness.core.errors import UserError
from harness.core.policy import Policy, generate
from methods.es_core import noise_spec, perturb, restore

CONF = paths.CONF_DIR
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


class DensityError(UserError, ValueError):
    """Bad arguments: one line naming the key and the fix."""


@dataclass
class DensityConfig:
    """The measurement's settings (key=value on the command line)."""

    models: list = field(default_factory=lambda: ["zoo-1m"])
    sigmas: list = field(default_factory=lambda: [1e-3, 3e-3, 1e-2, 3e-2])
    n: int = 64                   # perturbations per sigma
    prompts: int = 64             # the fixed batch: the first `prompts` rows of `split`
    task: str = "countdown"       # conf/task/<task>.yaml
    split: str = "validation"
    seed: int = 0                 # member seeds and bootstrap resamples
    params: str = "all"           # ES variants: tensors perturbed (all | norms | norms+attention | last_layer | regex)
    noise_rank: int | None = None  # ES variants: null full-rank, r low-rank
    bootstrap: int = 1000         # resamples for the paired standard error
    threshold: float = 2.0        # improves when mean difference > threshold x SE
    batch_size: int = 256         # sequences per generate() call
    threads: int = 1
    device: str = "auto"
    out: str | None = None        # default outputs/density/<stamp>

    def __post_init__(self):
        self.models = [self.models] if isinstance(self.models, str) else list(self.models)
        self.sigmas = [float(s) for s in ([self.sigmas] if isinstance(self.sigmas, (int, float)) else self.sigmas)]
        if not self.models or not self.sigmas:
            raise DensityError("give at least one model (model=zoo-1m) and one sigma (sigmas=[1e-3,1e-2])")
        if any(s < 0 for s in self.sigmas):
            raise DensityError(f"sigmas={self.sigmas}: every sigma must be >= 0")
        for k in ("n", "prompts", "bootstrap", "batch_size", "threads"):
            if int(getattr(self, k)) < 1:
                raise DensityError(f"{k}={getattr(self, k)} must be >= 1")


def parse_args(argv: list[str]) -> DensityConfig:
    """key=value pairs (values parsed as Hydra/OmegaConf does: 1e-3 is a float, [a,b] a list)."""
    from omegaconf import OmegaConf
    bad = [a for a in argv if "=" not in a or a.startswith("-")]
    if bad:
        raise DensityError(f"argument {bad[0]!r} is not key=value; e.g. model=zoo-1m sigmas=[1e-3,1e-2] n=64")
    try:
        given = OmegaConf.to_container(OmegaConf.from_dotlist(list(argv)), resolve=True)
    except Exception as e:
        raise DensityError(f"cannot parse the arguments ({type(e).__name__}: {str(e).splitlines()[0]})") from None
    if "model" in given:
        given["models"] = given.pop("model")
    valid = [f.name for f in fields(DensityConfig)]
    unknown = [k for k in given if k not in valid]
    if unknown:
        raise DensityError(f"unknown key {unknown[0]!r}; valid: model(s), {', '.join(valid[1:])}")
    return DensityConfig(**given)


# ---- statistics (pure; tests check them against hand values) ----
def wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion k/n (95% by default)."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, center - half), min(1.0, center + half)


def paired_se(d: np.ndarray, resamples: int, rng: np.random.Generator) -> float:
    """Paired-bootstrap standard error of mean(d): std of the means of `resamples` prompt resamples."""
    d = np.asarray(d, dtype=np.float64)
    idx = rng.integers(0, len(d), size=(resamples, len(d)))
    return float(d[idx].mean(axis=1).std())


def classify(delta: float, se: float, threshold: float = 2.0) -> int:
    """+1 improves (delta > threshold x SE), -1 harms, 0 within the batch's noise."""
    if delta > threshold * se:
        return 1
    if delta < -threshold * se:
        return -1
    return 0


def summarize(deltas: list[float], verdicts: list[int]) -> dict:
    """Fractions improving/harming with Wilson intervals, and the distribution of reward changes."""
    n = len(deltas)
    up, down = sum(v == 1 for v in verdicts), sum(v == -1 for v in verdicts)
    q = np.quantile(np.asarray(deltas, dtype=np.float64), QUANTILES) if n else [float("nan")] * len(QUANTILES)
    return {"n": n, "improve": up, "improve_frac": up / n, "improve_ci": list(wilson(up, n)),
            "harm": down, "harm_frac": down / n, "harm_ci": list(wilson(down, n)),
            "delta_mean": statistics.fmean(deltas), "delta_min": min(deltas), "delta_max": max(deltas),
            "delta_quantiles": {f"q{int(100 * a):02d}": float(v) for a, v in zip(QUANTILES, q)}}


MAX_HARM = 0.25  # a sigma harming more directions than this moves ES off the model's skill, not along it


def declared_sigma(sigmas: dict) -> float:
    """The one ES sigma a model declares from its density row, before any ES run (validation only).

    The sigma with the most improving directions, among those harming at most MAX_HARM of them; ties
    (including "none improves") go to the LARGER sigma, because a sigma that changes no greedy answer
    gives ES no reward differences to follow. If every sigma harms more, the smallest.
    """
    rows = sorted(sigmas.values(), key=lambda r: r["sigma"])
    safe = [r for r in rows if r["harm_frac"] <= MAX_HARM and r["sigma"] > 0]
    if not safe:
        return rows[0]["sigma"]
    return max(safe, key=lambda r: (r["improve"], r["sigma"]))["sigma"]


# ---- the measurement ----
def member_seeds(seed: int, n: int) -> list[int]:
    """The n perturbation seeds: the same at every sigma and for every model."""
    rng = random.Random(f"density-{seed}")
    return [rng.getrandbits(31) for _ in range(n)]


def score(policy: Policy, task, prompts: list[str], columns: dict, batch_size: int) -> np.ndarray:
    """Per-prompt greedy reward of the policy's current weights."""
    gen = generate(policy, prompts, greedy=True, max_new_tokens=task.max_new_tokens, batch_size=batch_size)
    return np.asarray(task.reward([x[0] for x in gen.texts], **columns), dtype=np.float64)


@torch.no_grad()
def measure(policy: Policy, task, cfg: DensityConfig, label: str = "") -> dict:
    """Density of improving perturbations around `policy` at every sigma of cfg (see the module docstring)."""
    rows = task.load(cfg.split).to_dict()
    if cfg.prompts > len(rows["prompt"]):
        raise DensityError(f"prompts={cfg.prompts} but the {cfg.split} split has {len(rows['prompt'])} rows; "
                           f"lower prompts to at most {len(rows['prompt'])}")
    prompts = rows["prompt"][:cfg.prompts]
    columns = {k: v[:cfg.prompts] for k, v in rows.items() if k != "prompt"}
    named = list(policy.model.named_parameters())
    spec = noise_spec([n for n, _ in named], [tuple(p.shape) for _, p in named], cfg.params, cfg.noise_rank)
    params = [p for _, p in named]
    master = [p.detach().float().clone() for p in params]
    buf = torch.empty(max(p.numel() for p in params), dtype=torch.float32, device=params[0].device)
    t0 = time.perf_counter()
    base = score(policy, task, prompts, columns, cfg.batch_size)
    seeds = member_seeds(cfg.seed, cfg.n)
    rng = np.random.default_rng(cfg.seed)
    out = {"model": label, "base_reward": float(base.mean()), "prompts": cfg.prompts, "sigmas": {}}
    for sigma in cfg.sigmas:
        deltas, ses, verdicts = [], [], []
        for s in seeds:
            perturb(params, master, s, sigma, buf, spec)
            d = score(policy, task, prompts, columns, cfg.batch_size) - base
            restore(params, master, spec)
            se = paired_se(d, cfg.bootstrap, rng)
            deltas.append(float(d.mean()))
            ses.append(se)
            verdicts.append(classify(float(d.mean()), se, cfg.threshold))
        out["sigmas"][f"{sigma:g}"] = {"sigma": sigma, **summarize(deltas, verdicts),
                                       "se_median": float(np.median(ses)), "deltas": deltas, "ses": ses}
        print(f"density: {label} sigma={sigma:g}: {sum(v == 1 for v in verdicts)}/{cfg.n} improve, "
              f"{sum(v == -1 for v in verdicts)}/{cfg.n} harm", flush=True)
    out["wall_s"] = time.perf_counter() - t0
    return out


def load(model: str, task_name: str, device: str):
    """The policy and task as `python -m harness model=<model> task=<task_name>` would build them."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from harness.core.policy import load_policy
    if not (CONF / "task" / f"{task_name}.yaml").is_file():
        raise DensityError(f"task={task_name!r} is not in conf/task/; use one of "
                           f"{', '.join(sorted(p.stem for p in (CONF / 'task').glob('*.yaml')))}")
    over = [f"model={model}" if (CONF / "model" / f"{model}.yaml").is_file() else f"model.name_or_path={model}",
            f"task={task_name}"]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=over)
    m = cfg.model
    return load_policy(m.name_or_path, m.dtype, m.chat_template, m.get("system_prompt"), device), instantiate(cfg.task)


# ---- outputs ----
def markdown(result: dict) -> str:
    cfg = result["config"]
    lines = [f"# Perturbation density ({cfg['task']} {cfg['split']}, {cfg['prompts']} prompts, n={cfg['n']} per sigma, "
             f"params={cfg['params']}, noise_rank={cfg['noise_rank']})", "",
             f"Improves: mean per-prompt reward change > {cfg['threshold']:g} x its paired-bootstrap SE "
             f"({cfg['bootstrap']} prompt resamples); harms: < -{cfg['threshold']:g} SE. Intervals: Wilson 95%.", "",
             "| model | base reward | sigma | improve | 95% CI | harm | 95% CI | median SE | "
             "delta q05 | q25 | q50 | q75 | q95 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for m in result["models"]:
        for s in m["sigmas"].values():
            q = s["delta_quantiles"]
            lines.append(f"| {m['model']} | {m['base_reward']:.3f} | {s['sigma']:g} | {s['improve']}/{s['n']} "
                         f"({s['improve_frac']:.1%}) | {s['improve_ci'][0]:.1%}-{s['improve_ci'][1]:.1%} | "
                         f"{s['harm']}/{s['n']} | {s['harm_ci'][0]:.1%}-{s['harm_ci'][1]:.1%} | {s['se_median']:.4f} | "
                         + " | ".join(f"{q[k]:+.4f}" for k in ("q05", "q25", "q50", "q75", "q95")) + " |")
    lines += ["", f"Declared sigma per model (`declared_sigma`: most improving directions among sigmas harming at most "
              f"{MAX_HARM:.0%}, ties to the larger): "
              + ", ".join(f"{m['model']} {declared_sigma(m['sigmas']):g}" for m in result["models"]) + ".",
              "", f"    {result['command']}", ""]
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    for m in result["models"]:
        rows = [s for s in m["sigmas"].values() if s["sigma"] > 0]
        if not rows:
            continue
        x = [s["sigma"] for s in rows]
        y = [s["improve_frac"] for s in rows]
        err = [[s["improve_frac"] - s["improve_ci"][0] for s in rows],
               [s["improve_ci"][1] - s["improve_frac"] for s in rows]]
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=m["model"])
    ax.set_xscale("log")
    ax.set_xlabel("sigma")
    ax.set_ylabel("fraction of perturbations that improve")
    ax.set_ylim(bottom=0)
    ax.set_title("Density of improving perturbations (Wilson 95%)")
    ax.legend()
    fig.tight_layout()
    save_figure_atomic(fig, path)
    plt.close(fig)


def run(cfg: DensityConfig, command: str = "") -> tuple[dict, Path]:
    torch.set_num_threads(cfg.threads)
    out_dir = Path(cfg.out or Path("outputs") / "density" / datetime.now().strftime("%Y%m%d-%H%M%S"))
    result = {"config": asdict(cfg), "command": command, "models": []}
    for model in cfg.models:
        policy, task = load(model, cfg.task, cfg.device)
        result["models"].append(measure(policy, task, cfg, label=model))
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out_dir / "density.json", result)
    write_text_atomic(out_dir / "density.md", markdown(result))
    plot(result, out_dir / "density.png")
    return result, out_dir


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    try:
        cfg = parse_args(argv)
        _, out_dir = run(cfg, "python -m harness.tools.density " + " ".join(argv))
    except DensityError as e:
        sys.exit(f"error: {e}")
    except ValueError as e:  # the ES variants' selection errors (VariantError) and model/task errors
        sys.exit(f"error: {str(e).splitlines()[0]}")
    print(f"density: wrote {out_dir}/density.{{json,md,png}}")


if __name__ == "__main__":
    main()
