"""The ES arithmetic's own record in analysis.md: what `method.numerics_record` measured per run.

ES records it (methods/es/numerics.py) under `numerics`: per iteration (StepStats extras) the restore
error of the iteration's first member and the share of coordinates the update changed; at the end (the
train summary) |delta| in ulps of each weight in the working dtype, the share changed and the ties at the
largest |delta|. This module reads it from the record only (no weights), so runs made without the record
(numerics_record false, RL) simply have no row.
"""
from __future__ import annotations

BINS = ("0", "1", "2", "3-4", "5-8", ">8")  # as methods/es/numerics.BINS (importing it would load torch here)


def numerics_of(record) -> dict | None:
    """{numerics, dtype, seeding, iterations, restore (mean share / max RMS / max abs), changed per
    iteration (mean), final ulp histogram, changed share, max |delta| and ties}, or None when unrecorded."""
    final = (record.train.numerics if record.train else None) or {}
    per_step = [s.get("extras", {}).get("numerics") for s in record.steps]
    per_step = [x for x in per_step if x]
    if not final.get("record") or "ulp_histogram" not in final:
        return None
    def mean(key):
        v = [x[key] for x in per_step if x.get(key) is not None]
        return sum(v) / len(v) if v else None
    def most(key):
        v = [x[key] for x in per_step if x.get(key) is not None]
        return max(v) if v else None
    return {"numerics": final.get("numerics"), "dtype": final.get("dtype"),
            "seeding": final.get("noise_seeding", "iid"), "iterations": len(per_step),
            "restore_not_exact_share": mean("restore_not_exact_share"), "restore_rms_max": most("restore_rms"),
            "restore_max_abs": most("restore_max_abs"), "changed_per_iteration": mean("changed_share"),
            "ulp_histogram": final["ulp_histogram"], "coordinates": final.get("coordinates"),
            "changed_share": final.get("changed_share"), "max_abs_delta": final.get("max_abs_delta"),
            "max_abs_delta_ties": final.get("max_abs_delta_ties")}


def section(runs: list[dict]) -> list[str]:
    """The markdown section (empty when no analysed run recorded its arithmetic)."""
    rows = [(r["name"], r["numerics"]) for r in runs if r.get("numerics")]
    if not rows:
        return []
    L = ["", "## ES arithmetic (method.numerics_record)\n",
         "exact: fp32 master, restore by copy (exact by construction, not measured); inplace: the reference "
         "code's arithmetic in the working dtype (methods/es/numerics.py). Restore: the iteration's first "
         "member, share of coordinates not restored bit for bit (mean over iterations) and the largest RMS "
         "and max abs error. Changed: share of coordinates an iteration's update changed (mean), and over "
         "the run. |delta| in ulps of each initial weight in the working dtype: share of coordinates per bin.\n",
         "| run | arithmetic | restore not exact | restore RMS / max | changed per iteration | changed over run | "
         "max abs delta (ties) | " + " | ".join(f"{b} ulp" for b in BINS) + " |",
         "|" + "---|" * (7 + len(BINS))]
    for name, x in rows:
        n = x["coordinates"] or sum(x["ulp_histogram"].values()) or 1
        L.append("| " + " | ".join([
            name, f"{x['numerics']} {x['dtype']} {x['seeding']}", _pct(x["restore_not_exact_share"]),
            f"{_g(x['restore_rms_max'])} / {_g(x['restore_max_abs'])}", _pct(x["changed_per_iteration"]),
            _pct(x["changed_share"]), f"{_g(x['max_abs_delta'])} ({x['max_abs_delta_ties']})",
            *(_pct(x["ulp_histogram"].get(b, 0) / n) for b in BINS)]) + " |")
    return L


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _g(x) -> str:
    return "-" if x is None else f"{x:.3g}"
