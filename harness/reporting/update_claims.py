"""NOTE-076's claims about where ES's update lands, checked against an experiment's ES runs.

NOTE-076 reports (C6, localisation) "normalization parameters are 72 and 80 of the 100 largest updates"
and "117 of 144 maximum-magnitude coordinates are LayerNorm weights", and (C5, functional sparsity)
"77.6-93.0% of nonzero updates fall below" the magnitude of a single ES update. For each ES cell (model
and label: one arithmetic, method.numerics) this reads analysis.json only and says, per claim, in how many
runs the figure reaches NOTE-076's, and in how many it has the size and shape of the random walk of the
update rule (harness/analysis/null.py). That match checks the arithmetic; it cannot tell learning from none
at the iteration counts run here: even a perfect fitness signal (correlation rho = 1 between fitness and
direction) moves the drift ratio to only sqrt(1 + T N rho^2 / d), so clearing the null's 2% tolerance needs
T >= ((1.02)^2 - 1) d / (N rho^2), about 0.04 d / N iterations (1,013 on zoo-1m, 181,147 on SmolLM2-135M), when
the signal keeps one fixed direction. A signal that aligns each step with the displacement so far does better:
each step's cosine with it is at most rho sqrt(N / d), so the squared drift grows by s^2 + 2 rho sqrt(N/d) s |D_t|
a step and the ratio is sqrt(1 + (4/3) rho sqrt(T N / d)), clearing 2% at T >= (3/4 x 0.0404)^2 d / (N rho^2),
about 9.2e-4 d / N (24 on zoo-1m, 4,117 on SmolLM2-135M; a simulation of the
adaptive walk agrees within 1% at T = 10-40). Each cell states its T and both bounds; the smaller,
adaptive one decides whether the figures can tell learning from none. Reaches: norms at least 72 of the top 100; norms more than half of the
maximum-|delta| set (117 of 144 is 81%); the share of nonzero coordinates below NOTE-076's threshold,
"within the magnitude range of a single ES update" (one update's largest |coordinate|, c_d times its RMS:
harness/analysis/null.py), inside 77.6-93.0%. A walk alone puts erf(c_d/sqrt(2T)) there: on zoo-1m inside
77.6-93.0% at T = 8-16. So reaching the figure says nothing by itself: each count is read beside the walk's
share, and C5 is "not testable" where T is below the power line's bound. Analyses made before the range
was computed give the share below one update's RMS instead, a stricter cut (a walk: at most 68.3%).

The section goes into analysis.md and, under MARK, at the end of findings.md (report.py writes it there on
every rewrite; the analysis refreshes it). After an analysis.json was edited or committed alone:

    python -m harness.reporting.update_claims results/numerics_cpu      # rewrites the section of findings.md
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from harness.core.atomic import write_text_atomic
from harness.core.method_facts import ES, family_of
from harness.reporting.stats import range_multiple

MARK = "## NOTE-076's claims about ES's update (from analysis.json)"
TOP_NORMS = 72              # C6: "72 and 80 of the 100 largest updates"
MAX_SET_NORM_SHARE = 0.5    # C6: "117 of 144" (81%): we ask only for a majority
SPARSE = (0.776, 0.930)     # C5: "77.6-93.0% of nonzero updates"


def _cells(runs: list[dict]) -> dict[tuple, list[dict]]:
    out: dict[tuple, list[dict]] = {}
    for r in runs:
        if run_family(r) == ES:
            out.setdefault((r["model"], r["label"]), []).append(r)
    return out


def run_family(run: dict) -> str | None:
    """The family of an analysed run (a run of analysis.json): the one its record kept, which the analysis
    copies (`family`); for an analysis.json older than that, its method's by the name of its conf/method option."""
    return run["family"] if "family" in run else family_of(str(run.get("method")), None)


def _arith(runs: list[dict]) -> str:
    n = runs[0].get("numerics")
    return f"{n['numerics']} {n['dtype']} {n['seeding']}" if n else "exact (fp32 master; not recorded)"


def _walk(runs: list[dict], key: str, sub: str, what: str) -> str:
    """'<what> in k of n' for one null figure (top_k/norm, below/one_step, drift/whole): k runs within the
    walk's tolerance."""
    have = [c for c in (((r.get("null") or {}).get(key) or {}).get(sub) for r in runs) if c and "ok" in c]
    if not have:
        return "no random-walk null to read it against"
    return f"{what} in {sum(bool(c['ok']) for c in have)} of {len(have)}"


def _steps(runs: list[dict]) -> list[tuple[int, int, int, float]]:
    """(T applied updates, N, d updated coordinates, drift tolerance) of each run with a walk null."""
    out = []
    for r in runs:
        null = r.get("null") or {}
        walk, tol = null.get("walk") or {}, ((null.get("drift") or {}).get("whole") or {}).get("tol", 0.02)
        if walk.get("t") and walk.get("n") and null.get("n_updated"):
            out.append((int(walk["t"]), int(walk["n"]), int(null["n_updated"]), float(tol)))
    return out


def power(t: int, n: int, d: int, tol: float = 0.02, adaptive: bool = True) -> tuple[float, int]:
    """(the largest drift ratio a perfect fitness signal (rho = 1) gives after t updates; the t at which it first
    clears 1 + tol). Fixed direction: sqrt(1 + t n / d), ((1 + tol)^2 - 1) d / n. Adaptive (each step aligned with
    the displacement so far, the best case for learning): sqrt(1 + (4/3) sqrt(t n / d)),
    (3/4 ((1 + tol)^2 - 1))^2 d / n."""
    if adaptive:
        return (math.sqrt(1 + 4 / 3 * math.sqrt(t * n / d)),
                math.ceil((0.75 * ((1 + tol) ** 2 - 1)) ** 2 * d / n))
    return math.sqrt(1 + t * n / d), math.ceil(((1 + tol) ** 2 - 1) * d / n)


def _power_line(runs: list[dict]) -> str:
    """What the walk can say at these T: nothing about learning when even rho = 1 stays inside the tolerance."""
    steps = _steps(runs)
    if not steps:
        return ""  # an older analysis.json: no walk, no T (its other lines say there is no null)
    ts = [t for t, *_ in steps]
    best = max(power(t, n, d, tol)[0] for t, n, d, tol in steps)
    need = min(power(t, n, d, tol)[1] for t, n, d, tol in steps)
    fixed = min(power(t, n, d, tol, adaptive=False)[1] for t, n, d, tol in steps)
    tol = steps[0][3]
    can = "cannot" if max(ts) < need else "can"
    return (f"  - power: T = {_span(ts)} applied updates; even a perfect fitness signal (rho = 1) that aligns each "
            f"step with the displacement so far would put the drift ratio at most {best:.4f}x the walk's, and "
            f"clearing its {100 * tol:g}% tolerance needs T >= {need:,} (T >= {fixed:,} for a signal in one fixed "
            f"direction): at this T these figures {can} tell learning from none"
            + (" (a match checks the arithmetic: the update's size and shape)." if can == "cannot" else
               " if the signal is strong and aligned; a match with the walk rules out only such a signal, not a "
               "weaker one."))


def _span(values: list, fmt=str) -> str:
    lo, hi = fmt(min(values)), fmt(max(values))
    return lo if lo == hi else f"{lo} to {hi}"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def lines(runs: list[dict]) -> list[str]:
    """A bullet per ES cell, a sub-bullet per claim (and drift); empty when no ES run was analysed."""
    out = []
    for (model, label), rs in _cells(runs).items():
        n = len(rs)
        k = rs[0]["localisation"]["top_k"]
        norms = [r["localisation"]["top_k_counts"].get("norm", 0) for r in rs]
        sets = [r["localisation"].get("max_set") for r in rs]
        ratios = [c["ratio"] for c in (((r.get("null") or {}).get("drift") or {}).get("whole") for r in rs) if c]
        walk = _walk(rs, "top_k", "norm", "the norm count is the walk's")
        out += [
            f"- {model}, {label} ({_arith(rs)}, {n} run{'s' * (n > 1)}):",
            _power_line(rs),
            f"  - C6, top {k}: norms {_span(norms)}; NOTE-076's 72-80 reached in "
            f"{sum(x >= TOP_NORMS for x in norms)} of {n}; {walk}.",
            _max_set(sets),
            _sparsity(rs),
            f"  - drift ‖delta‖/‖theta0‖: {_span(ratios, lambda x: f'{x:.2f}x')} the walk's; "
            f"{_walk(rs, 'drift', 'whole', 'within the walk' + chr(39) + 's tolerance')}." if ratios
            else "  - drift: no random-walk null to read it against."]
        out = [line for line in out if line]
    unknown = [str(r.get("name") or r.get("label")) for r in runs if run_family(r) is None]
    if unknown:  # said, never dropped: whether these are ES runs is not known here
        out.append(f"- not read: {', '.join(unknown)} (the family of its method is unknown: neither its record nor "
                   "a conf/method option of its name says it, so whether it is an ES run is not known)")
    return out


def _sparsity(rs: list[dict]) -> str:
    """C5 at NOTE-076's threshold, one update's range; older analyses have only its RMS (a stricter cut)."""
    if not all(str(r["sparsity"].get("rule", "")).startswith("one ES update") for r in rs):
        rules = {r["sparsity"].get("rule", "") for r in rs}  # older analyses cut at another step
        return (f"  - C5: this analysis.json cuts at another step ({'; '.join(sorted(rules))}), not one ES update "
                "(rerun python -m harness.analysis).")
    if not all("below_range" in r["sparsity"] for r in rs):
        rms = [r["sparsity"]["below_one_step"] for r in rs]
        return (f"  - C5: this analysis.json predates NOTE-076's threshold, one update's range (rerun python -m "
                f"harness.analysis); below one update's RMS, a stricter cut no walk can take past 68.3%: "
                f"{_span(rms, _pct)}, {_walk(rs, 'below', 'one_step', 'the share is the walk' + chr(39) + 's')}.")
    below = [r["sparsity"]["below_range"] for r in rs]
    steps = _steps(rs)
    walks = [walk_below(t, d) for t, _, d, _ in steps]
    testable = bool(steps) and max(t for t, *_ in steps) >= min(power(t, n, d, tol)[1] for t, n, d, tol in steps)
    return (f"  - C5, nonzero coordinates below one update's range (its largest |coordinate|, "
            f"{_span([range_multiple(d) for *_, d, _ in steps] or [0], lambda c: f'{c:.2f}')}x its RMS): "
            f"{_span(below, _pct)}; inside NOTE-076's 77.6-93.0% in {sum(SPARSE[0] <= b <= SPARSE[1] for b in below)} "
            f"of {len(rs)}; {_walk(rs, 'below', 'range', 'the share is the walk' + chr(39) + 's')}"
            + (f" (the walk puts {_span(walks, _pct)} there at T = {_span([t for t, *_ in steps])})" if steps else "")
            + ("." if testable else ". Not testable at this T: a walk with no learning lands where it lands, and the "
               "power line's T is what a learning signal needs to move it."))


def walk_below(t: int, d: int | None = None) -> float:
    """The share of a t-step Gaussian walk's coordinates below one step's RMS, P(|Z| < 1/sqrt(t)), or, given
    the d coordinates one step updates, below one step's range: P(|Z| < c_d/sqrt(t))."""
    return math.erf((1 if d is None else range_multiple(d)) / math.sqrt(2 * t))


def _max_set(sets: list[dict | None]) -> str:
    if not all(sets):  # analysis.json written before the maximum set was counted
        return "  - C6, maximum-|delta| set: not in this analysis.json (rerun python -m harness.analysis)."
    norms = [s["by_group"].get("norm", 0) for s in sets]
    majority = sum(m > MAX_SET_NORM_SHARE * s["size"] for m, s in zip(norms, sets))
    return (f"  - C6, maximum-|delta| set: size {_span([s['size'] for s in sets])}, norms {_span(norms)}; a norm "
            f"majority (NOTE-076: 117 of 144) in {majority} of {len(sets)}.")


def section(runs: list[dict]) -> list[str]:
    """The section for analysis.md and findings.md (a list of lines; empty without ES runs)."""
    body = lines(runs)
    if not body:
        return []
    return ["", MARK, "",
            "Each claim per ES cell: the runs' range, how many reach NOTE-076's figure, and how many have the "
            "size and shape of the random walk of ES's update rule. That match is a check of the arithmetic, "
            "not evidence that nothing was learned: each cell's power line gives the T at which even a perfect "
            "fitness signal could move these figures off the walk. These are counts of runs, not tests: "
            "nothing here is a difference between cells.", "", *body]


def with_claims(text: str, out_dir: Path) -> str:
    """`text` (a findings.md) with its claims section replaced by the one analysis.json in out_dir gives."""
    text = text.split("\n" + MARK)[0].rstrip("\n") + "\n"
    path = Path(out_dir) / "analysis.json"
    if not path.is_file():
        return text
    sec = section(json.loads(path.read_text()).get("runs", []))
    return text + "\n".join(sec) + "\n" if sec else text


def refresh_findings(out_dir: Path) -> bool:
    """Rewrite findings.md's claims section from analysis.json (False: no findings.md to rewrite)."""
    path = Path(out_dir) / "findings.md"
    if not path.is_file():
        return False
    write_text_atomic(path, with_claims(path.read_text(), out_dir))
    return True


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not (Path(argv[0]) / "analysis.json").is_file():
        print("usage: python -m harness.reporting.update_claims <tables folder holding analysis.json and findings.md>",
              file=sys.stderr)
        return 2
    if not refresh_findings(Path(argv[0])):
        print(f"{argv[0]}: no findings.md to add the claims to; run python -m harness.reporting first",
              file=sys.stderr)
        return 2
    print(f"{Path(argv[0]) / 'findings.md'}: NOTE-076's claims section rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
