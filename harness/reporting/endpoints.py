"""Declared primary endpoints and exploratory arms: what an experiment is about, said before its runs.

An experiment file names the comparisons it was run to make, and marks any arm added after a result of the
same experiment was seen:

    primary:                                    # A minus B on a test metric; direction: greater | less | any
      - {a: ES sigma=1e-2, b: placebo sigma=1e-2, metric: greedy_acc, direction: greater}
    cells:
      - {label: ES sigma=3e-3, overrides: [...], exploratory: {date: 2026-11-20, reason: "added after ..."}}

`a` and `b` are labels of the file's cells or names of its grids (a grid's row is its point chosen on
validation); `metric` is one the runs report (greedy_acc, pass@k, maj@k, or a summary metric).
findings.md then reads in that order: the primary rows (each with the file's own Benjamini-Hochberg result,
unchanged: the primaries are not given a smaller family), the secondary rows, and apart, every row that
involves an exploratory arm, with its date and reason. A primary entry that names no cell, grid or metric
of the file, or an exploratory tag without a date and a reason, is refused when the file is loaded.

    python -m harness.reporting.findings results/placebo_cpu    # findings.md again, from comparisons.csv
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from harness.core.errors import ConfigError

PRIMARY_KEYS = {"a", "b", "metric", "direction", "test"}
DIRECTIONS = ("greater", "less", "any")
# test: how the primary row is decided. seed_t: a t test over the per-seed paired differences (each seed's
# A minus B on the metric, averaged over prompts), one-sided at 0.05 when a direction is declared.
TESTS = ("seed_t",)
# metrics a primary endpoint may name before any run exists: the evaluation's, and any summary metric
FIXED_METRICS = ("greedy_acc", "mean_reward", "mean_length", "kl_to_base")
PASS_OR_MAJ = re.compile(r"^(pass|maj)@\d+$")
GRID_ROW = " (chosen on validation: "  # comparisons.py names a grid's row "<grid> (chosen on validation: ...)"


@dataclass(frozen=True)
class Primary:
    a: str
    b: str
    metric: str
    direction: str = "any"
    test: str | None = None

    def matches(self, comparison: str, metric: str) -> bool:
        """Whether a comparisons row (its "A vs B" text and metric) is this endpoint."""
        sides = comparison.split(" vs ")
        return metric == self.metric and len(sides) == 2 and _is(sides[0], self.a) and _is(sides[1], self.b)


def _is(side: str, label: str) -> bool:
    """A comparison side is the arm `label`: exactly, as a grid's chosen row, or with the update flag the
    tables add to a row whose ES skipped most updates ("ES [67% skipped]", harness/reporting/aggregate.py)."""
    return side == label or side.startswith(label + GRID_ROW) or side.startswith(label + " [")


@dataclass(frozen=True)
class Declarations:
    primary: tuple[Primary, ...] = ()
    exploratory: dict | None = None   # arm label -> "date: reason"

    def role(self, comparison: str, metric: str) -> str:
        """primary, exploratory (a side is an exploratory arm) or secondary."""
        sides = comparison.split(" vs ")
        if any(_is(s, arm) for s in sides for arm in self.exploratory or {}):
            return "exploratory"
        return "primary" if any(p.matches(comparison, metric) for p in self.primary) else "secondary"


def _labels(cfg) -> list[str]:
    return ([str(c.get("label")) for c in cfg.get("cells") or []]
            + [str(g.get("name")) for g in cfg.get("grids") or []])


def _metrics(cfg) -> set[str]:
    ev = cfg.get("eval") or {}
    return (set(FIXED_METRICS) | {f"pass@{k}" for k in ev.get("pass_ks") or []}
            | {f"maj@{k}" for k in ev.get("maj_ks") or []} | {str(m) for m in cfg.get("summary_metrics") or []}
            | ({str(cfg.get("summary_metric"))} if cfg.get("summary_metric") else set()))


def declarations(cfg, check: bool = True) -> Declarations:
    """The file's declarations (a composed experiment config or its raw YAML); ConfigError when one names
    nothing of the file. `check=False` skips the metric check (a raw YAML without its composed eval)."""
    labels = _labels(cfg)
    out = []
    for i, p in enumerate(cfg.get("primary") or []):
        where = f"primary[{i}]"
        unknown = set(p) - PRIMARY_KEYS
        if unknown or not {"a", "b", "metric"} <= set(p):
            raise ConfigError(f"{where} has keys {sorted(p)}; write {{a: <cell label>, b: <cell label>, "
                              "metric: greedy_acc, direction: greater}} (direction optional)")
        for side in ("a", "b"):
            if str(p[side]) not in labels:
                raise ConfigError(f"{where}.{side}={p[side]!r} is not a cell label or grid name of this file "
                                  f"({', '.join(labels)}); name the arm exactly as its label reads")
        metric, direction = str(p["metric"]), str(p.get("direction", "any"))
        if check and metric not in _metrics(cfg) and not PASS_OR_MAJ.match(metric):
            raise ConfigError(f"{where}.metric={metric!r} is not a metric this file's runs report; use one of "
                              f"{', '.join(sorted(_metrics(cfg)))}")
        if direction not in DIRECTIONS:
            raise ConfigError(f"{where}.direction={direction!r} is unknown; use one of {', '.join(DIRECTIONS)}")
        test = p.get("test")
        if test is not None and str(test) not in TESTS:
            raise ConfigError(f"{where}.test={test!r} is unknown; use one of {', '.join(TESTS)} (or leave it out)")
        out.append(Primary(str(p["a"]), str(p["b"]), metric, direction, None if test is None else str(test)))
    exploratory = {}
    for c in list(cfg.get("cells") or []) + list(cfg.get("grids") or []):
        tag = c.get("exploratory")
        if tag is None:
            continue
        name = str(c.get("label", c.get("name")))
        if not (hasattr(tag, "get") and tag.get("date") and tag.get("reason")):
            raise ConfigError(f"{name!r}: exploratory needs a date and a reason, e.g. exploratory: "
                              "{date: 2026-11-20, reason: added after the sigma 1e-3 arm's result was seen}")
        exploratory[name] = f"{tag.get('date')}: {tag.get('reason')}"
    return Declarations(tuple(out), exploratory or None)


def from_experiment_file(name: str) -> Declarations:
    """The declarations of conf/experiment/<name>.yaml (none when the file does not exist)."""
    from omegaconf import OmegaConf

    from harness.core.paths import CONF_DIR
    path = CONF_DIR / "experiment" / f"{name}.yaml"
    return declarations(OmegaConf.load(path), check=False) if path.is_file() else Declarations()


def from_manifest(man) -> Declarations:
    """The declarations an experiment's manifest (experiment.json) recorded at launch (none when absent)."""
    if man is None:
        return Declarations()
    primary = tuple(Primary(**p) for p in getattr(man, "primary", None) or [])
    return Declarations(primary, getattr(man, "exploratory", None) or None)


def roles(df: pd.DataFrame, decl: Declarations) -> pd.Series:
    """Each comparisons row's role (primary / secondary / exploratory)."""
    return pd.Series([decl.role(str(r["comparison"]), str(r["metric"])) for _, r in df.iterrows()],
                     index=df.index, dtype=object)


def direction_note(df: pd.DataFrame, decl: Declarations) -> dict:
    """Per primary row index: whether its sign is the declared direction (a detection the other way is
    reported as one, and said to be against the declaration)."""
    out = {}
    for i, r in df.iterrows():
        p = next((p for p in decl.primary if p.matches(str(r["comparison"]), str(r["metric"]))), None)
        if p is not None and p.direction != "any" and r["difference"] == r["difference"]:
            agrees = r["difference"] > 0 if p.direction == "greater" else r["difference"] < 0
            out[i] = f"declared {p.direction}: " + ("sign as declared" if agrees else "sign opposite to the declaration")
            if p.test == "seed_t" and str(r["pairing"]).startswith("by seed (") and r["p_value"] == r["p_value"]:
                one = one_sided(float(r["p_value"]), agrees)
                out[i] += (f"; the declared test (seed-level one-sided t at 0.05): p = {one:.4f}, "
                           # met is not detected: a sentence claiming a difference needs this row detected
                           + ("below 0.05: the declared criterion is met; the evidence rule reads the row's "
                              "two-sided interval and BH p" if one < 0.05
                              else "not below 0.05: the declared criterion is not met"))
    return out


def one_sided(p_two: float, agrees: bool) -> float:
    """A t test's one-sided p from its two-sided p and whether the estimate has the declared sign."""
    return p_two / 2 if agrees else 1 - p_two / 2
