"""How dense are task-improving perturbations around a model's weights?

The "density" reading of the 1.5B question says small models fail under ES because few random
directions around their weights improve the task. This measures it directly. For each sigma, n
random perturbations theta + sigma * eps (ES's own noise, methods/es/core.py: member seed j, the
same n seeds at every sigma, so the curve compares one set of directions at different radii) are
scored with greedy decoding on one fixed prompt batch (the first `prompts` rows of the task's
`split`), against the unperturbed model on the same batch. Greedy decoding makes every score exact,
so a direction's only uncertainty is which prompts happen to be in the batch.

Reported per model and sigma (density.md; density.json holds every per-prompt reward, so each
figure can be recomputed from the file):
- the mean per-prompt reward change over directions, in points, with a 95% interval that resamples
  directions and prompts independently (both are samples);
- directions up / down / unchanged by the sign of their net change (no test);
- directions detectably better / worse: a two-sided exact sign test at 5% per direction on the
  prompts whose reward changed (McNemar's exact test when rewards are 0/1), Wilson 95% intervals;
- its minimum detectable effect: the net change (prompts gained minus lost) the test detects with
  80% power, given the median direction's number of changed prompts;
- a power flag: the test rejects only when at least 6 changed prompts all move one way
  (2 x 0.5^6 < 0.05), so a model answering fewer than 6 prompts cannot show a worse direction.
`declared_sigma` picks each model's ES sigma from this table and refuses models without power.
Written to outputs/density/<stamp>/{density.json, density.md, density.png}.

    python -m harness.tools.density model=zoo-1m sigmas=[1e-3,3e-3,1e-2,3e-2] n=64 prompts=64
    python -m harness.tools.density models=[zoo-100k,zoo-1m,zoo-4m] sigmas=[1e-3,1e-2] n=32 params=norms
    python -m pytest tests/test_density.py -q

Arguments are key=value (Hydra style, as `python -m harness`): model or models, sigmas, n, prompts,
task (a conf/task name, default countdown), split (validation), seed, params and noise_rank (the ES
variants' tensor subset and low-rank noise), bootstrap, batch_size, threads, device, out.
"""
from __future__ import annotations

import math
import random
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from pathlib import Path

if __name__ == "__main__" and any(a in ("-h", "--help") for a in sys.argv[1:]):
    print(__doc__)  # the keys and examples, before numpy and torch load (6 s)
    sys.exit(0)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from harness.core import paths
from harness.core.atomic import save_figure_atomic, write_json_atomic, write_text_atomic
from harness.core.errors import UserError
from harness.core.policy import Policy, generate
from harness.reporting.stats import crossed_means, wilson
from methods.es.core import noise_spec, perturb, restore

CONF = paths.CONF_DIR


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
    bootstrap: int = 2000         # resamples (directions and prompts) for the mean change's interval
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
ALPHA = 0.05   # the per-direction test's level, two-sided
POWER = 0.80   # the power at which the minimum detectable effect is quoted
MAX_HARM = 0.25  # a sigma harming more directions than this moves ES off the model's skill, not along it


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test p-value: is a direction better (wins) or worse (losses) on the same prompts?

    Under "no effect" each prompt whose reward changed is a fair coin between better and worse; unchanged
    prompts say nothing about the sign and drop out. For 0/1 rewards this is McNemar's exact test.
    """
    m = wins + losses
    if m == 0:
        return 1.0
    tail = sum(math.comb(m, i) for i in range(min(wins, losses) + 1)) / 2 ** m
    return min(1.0, 2 * tail)


def critical_wins(m: int, alpha: float = ALPHA) -> int | None:
    """The fewest wins of m changed prompts at which sign_test rejects; None when even m of m does not."""
    return next((k for k in range((m + 1) // 2, m + 1) if sign_test(k, m - k) < alpha), None)


MIN_CHANGED = min(m for m in range(1, 64) if critical_wins(m) is not None)  # 6: 2 x 0.5^6 < 0.05 <= 2 x 0.5^5


def mde(m: int, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """Minimum detectable effect of one direction, in net prompts (wins - losses), when m prompts change.

    The sign test rejects "better" from critical_wins(m) wins on; with a true win share q among the m changed
    prompts that happens with probability P(Binomial(m, q) >= c). The MDE is the net change m(2q - 1) at the q
    where this equals `power` (by symmetry the same for "worse"). None when no split of m prompts can reject.
    """
    c = critical_wins(m, alpha)
    if c is None:
        return None

    def reject(q: float) -> float:
        return sum(math.comb(m, i) * q ** i * (1 - q) ** (m - i) for i in range(c, m + 1))
    lo, hi = 0.5, 1.0
    for _ in range(60):  # bisection: reject(q) rises with q
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if reject(mid) < power else (lo, mid)
    return m * (2 * hi - 1)


def crossed_bootstrap(d: np.ndarray, resamples: int, rng: np.random.Generator) -> tuple[float, float]:
    """95% percentile interval of the mean of d (directions x prompts), resampling both independently.

    Both are samples: the directions from ES's noise, the prompts from the task. Resampling directions alone
    would treat the batch as the whole task: losing the same 2 prompts in every direction would look certain.
    """
    means = crossed_means(d, resamples, rng)  # harness/reporting/stats.py: comparisons use it across seeds
    lo, hi = np.quantile(means, [0.025, 0.975])
    return float(lo), float(hi)


def summarize(base: np.ndarray, rewards: np.ndarray, resamples: int, rng: np.random.Generator) -> dict:
    """One cell: base (prompts,) and rewards (directions x prompts) -> signs, tests, mean change, MDE."""
    d = rewards - base
    wins, losses = (d > 0).sum(axis=1), (d < 0).sum(axis=1)
    net = np.round(d.sum(axis=1), 9)  # rewards are rounded to 1e-6: a zero net is exactly zero
    p = [sign_test(int(w), int(l)) for w, l in zip(wins, losses)]
    better = sum(bool(pv < ALPHA and w > l) for pv, w, l in zip(p, wins, losses))  # plain ints: json-safe
    worse = sum(bool(pv < ALPHA and l > w) for pv, w, l in zip(p, wins, losses))
    n, npr = d.shape
    changed = int(np.median(wins + losses))  # the median direction's changed prompts (rounded down)
    shift = mde(changed)
    return {"n": n, "up": int((net > 0).sum()), "down": int((net < 0).sum()), "unchanged": int((net == 0).sum()),
            "better": better, "better_ci": list(wilson(better, n)), "worse": worse, "worse_ci": list(wilson(worse, n)),
            "mean_change": float(d.mean()), "mean_change_ci": list(crossed_bootstrap(d, resamples, rng)),
            "changed_median": changed, "mde_prompts": shift, "mde_points": None if shift is None else 100 * shift / npr,
            "wins": wins.tolist(), "losses": losses.tolist()}


def power_gap(model: dict) -> str:
    """Why no direction of this model could test worse (or better) at all; '' when both can."""
    for side, k in (("harm", model["can_lose"]), ("gain", model["can_gain"])):
        if k < MIN_CHANGED:
            return (f"{side} undetectable: {k} of {model['prompts']} prompts can move that way; all {k} moving gives "
                    f"sign-test p = {sign_test(k, 0):.2g} >= {ALPHA:g} (needs {MIN_CHANGED})")
    return ""


def _choose(cells: list[dict]) -> float | None:
    """The rule on counts: most detectably better among sigmas detectably harming at most MAX_HARM of their
    directions and whose mean change is not detectably below zero (a sigma that costs points on average is no
    search distance, however its directions split at the cut), ties larger."""
    safe = [c for c in cells if c["worse"] <= MAX_HARM * c["n"] and c["sigma"] > 0
            and c.get("mean_change_ci", [0, 0])[1] >= 0]
    return max(safe, key=lambda c: (c["better"], c["sigma"]))["sigma"] if safe else None


def declared_sigma(model: dict) -> dict:
    """The one ES sigma a model declares from its density row, before any ES run (validation only).

    `_choose`'s rule; ties (including "none improves") go to the LARGER sigma, because a sigma that changes no
    greedy answer gives ES no reward differences to follow. Refused (sigma None, with the reason) when the
    model's base accuracy leaves no direction detectable (power_gap: its zero counts would be blindness, not
    safety) or every sigma harms too many. Notes name each single direction whose verdict would change the choice.
    """
    cells = sorted(model["sigmas"].values(), key=lambda c: c["sigma"])
    gap = power_gap(model)
    if gap:
        return {"sigma": None, "reason": gap, "notes": []}
    chosen = _choose(cells)
    if chosen is None:
        return {"sigma": None, "reason": f"every sigma detectably harms more than {MAX_HARM:.0%} of its directions",
                "notes": []}
    notes = []
    for c in cells:
        for key, step in (("worse", 1), ("worse", -1), ("better", 1), ("better", -1)):
            if 0 <= c[key] + step <= c["n"]:
                other = _choose([{**x, key: x[key] + step} if x is c else x for x in cells])
                if other != chosen:
                    notes.append(f"one {'more' if step > 0 else 'fewer'} {key} direction at {c['sigma']:g} would "
                                 f"declare {'none' if other is None else f'{other:g}'}")
    row = next(c for c in cells if c["sigma"] == chosen)
    return {"sigma": chosen, "reason": f"{row['better']} better, {row['worse']}/{row['n']} worse", "notes": notes}


# ---- the measurement ----
def member_seeds(seed: int, n: int) -> list[int]:
    """The n perturbation seeds: the same at every sigma and for every model."""
    rng = random.Random(f"density-{seed}")
    return [rng.getrandbits(31) for _ in range(n)]


def score(policy: Policy, task, prompts: list[str], columns: dict, batch_size: int) -> np.ndarray:
    """Per-prompt greedy reward of the policy's current weights."""
    gen = generate(policy, prompts, greedy=True, max_new_tokens=task.max_new_tokens, batch_size=batch_size)
    return np.asarray(task.reward([x[0] for x in gen.texts], **columns), dtype=np.float64)


def encode(r: np.ndarray) -> str:
    """Per-prompt rewards as one short string ("0 1 0 ..."): density.json keeps every outcome, and one line each."""
    return " ".join(f"{x:g}" for x in r)


def decode(s: str) -> np.ndarray:
    return np.array([float(x) for x in s.split()], dtype=np.float64)


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
    # which prompts can move at all (power_gap): rewards are 0/1 correctness (+0.1 format under the think
    # template), so a prompt can get worse only above 0 and better (in correctness) only below 1
    out = {"model": label, "base_reward": float(base.mean()), "prompts": cfg.prompts, "base_rewards": encode(base),
           "can_lose": int((base > 0).sum()), "can_gain": int((base < 1).sum()), "sigmas": {}}
    for sigma in cfg.sigmas:
        rewards = []
        for s in seeds:
            perturb(params, master, s, sigma, buf, spec)
            rewards.append(score(policy, task, prompts, columns, cfg.batch_size))
            restore(params, master, spec)
        cell = {"sigma": sigma, **summarize(base, np.stack(rewards), cfg.bootstrap, rng),
                "rewards": [encode(r) for r in rewards]}
        out["sigmas"][f"{sigma:g}"] = cell
        print(f"density: {label} sigma={sigma:g}: {cell['up']} up / {cell['down']} down / {cell['unchanged']} "
              f"unchanged; {cell['better']} better, {cell['worse']} worse (sign test)", flush=True)
    out["declared"] = declared_sigma(out)
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
def _pts(x: float) -> str:
    return f"{100 * x:+.1f}"


def markdown(result: dict) -> str:
    cfg = result["config"]
    lines = [f"# Perturbation density ({cfg['task']} {cfg['split']}, {cfg['prompts']} prompts, n={cfg['n']} per sigma, "
             f"params={cfg['params']}, noise_rank={cfg['noise_rank']})", "",
             "- mean change: the per-prompt reward change averaged over directions, in points, with a 95% interval "
             f"resampling directions and prompts independently ({cfg['bootstrap']} resamples); worse / better only "
             "when it excludes 0.",
             "- up / down / same: directions by the sign of their net change (no test).",
             f"- better / worse: a two-sided exact sign test at {ALPHA:g} per direction on the prompts whose reward "
             "changed (McNemar's exact test for 0/1 rewards); Wilson 95% interval on the worse fraction.",
             f"- MDE: the net change (prompts gained minus lost, and in points) the sign test detects with "
             f"{POWER:.0%} power given the median direction's changed prompts; none below {MIN_CHANGED} changed "
             "prompts, where no split can reach p < 0.05.",
             f"- power: 'no' where fewer than {MIN_CHANGED} prompts can move one way (base correct, or base wrong), "
             "so no direction can test worse (or better) however it moves.", "",
             "| model | base correct | sigma | mean change, points [95% CI] | up / down / same | better | worse "
             "| worse 95% CI | changed prompts (median) | MDE prompts (points) | power |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for m in result["models"]:
        gap = power_gap(m)
        for c in m["sigmas"].values():
            lo, hi = c["mean_change_ci"]
            # a difference is named only when its interval excludes 0 (1 decimal alone would hide +0.03)
            verdict = "worse" if hi < 0 else "better" if lo > 0 else "not detected"
            shift = "none" if c["mde_prompts"] is None else f"{c['mde_prompts']:.1f} ({c['mde_points']:.1f})"
            lines.append(f"| {m['model']} | {m['can_lose']}/{m['prompts']} | {c['sigma']:g} | "
                         f"{_pts(c['mean_change'])} [{_pts(lo)}, {_pts(hi)}] {verdict} | "
                         f"{c['up']} / {c['down']} / {c['unchanged']} | {c['better']} | {c['worse']} | "
                         f"{c['worse_ci'][0]:.0%}-{c['worse_ci'][1]:.0%} | "
                         f"{c['changed_median']} | {shift} | {'no' if gap else 'yes'} |")
    lines += ["", f"Declared sigma per model (`declared_sigma`: most detectably better directions among sigmas "
              f"detectably harming at most {MAX_HARM:.0%} of them and whose mean change is not detectably negative, ties to the "
              "larger; none without power):", ""]
    for m in result["models"]:
        d = m["declared"]
        head = f"none ({d['reason']})" if d["sigma"] is None else f"{d['sigma']:g} ({d['reason']})"
        lines.append(f"- {m['model']}: {head}" + "".join(f"; note: {n}" for n in d["notes"]))
    lines += ["", f"    {result['command']}", ""]
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for m in result["models"]:
        rows = [c for c in m["sigmas"].values() if c["sigma"] > 0]
        if not rows:
            continue
        x = [c["sigma"] for c in rows]
        style = "--" if power_gap(m) else "-"  # dashed: a model whose harm cannot be detected
        label = m["model"] + (" (no power)" if power_gap(m) else "")
        mean = [100 * c["mean_change"] for c in rows]
        # max(0, .): a Wilson bound or a bootstrap percentile can sit a rounding error past its point
        left.errorbar(x, mean, yerr=[[max(0.0, v - 100 * c["mean_change_ci"][0]) for v, c in zip(mean, rows)],
                                     [max(0.0, 100 * c["mean_change_ci"][1] - v) for v, c in zip(mean, rows)]],
                      marker="o", capsize=3, linestyle=style, label=label)
        worse = [c["worse"] / c["n"] for c in rows]
        right.errorbar(x, worse, yerr=[[max(0.0, w - c["worse_ci"][0]) for w, c in zip(worse, rows)],
                                       [max(0.0, c["worse_ci"][1] - w) for w, c in zip(worse, rows)]],
                       marker="o", capsize=3, linestyle=style, label=label)
    left.axhline(0, color="grey", lw=0.8)
    right.axhline(MAX_HARM, color="grey", lw=0.8, ls=":")
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_xlabel("sigma")
    left.set_ylabel("mean reward change, points (95% CI)")
    right.set_ylabel("fraction of directions detectably worse")
    right.set_ylim(bottom=0)
    left.set_title("Mean change over directions")
    right.set_title(f"Worse by sign test ({ALPHA:g}), Wilson 95%")
    left.legend(fontsize=8)
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
