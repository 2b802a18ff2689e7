"""What made a table: the git shas, package versions, CPU and torch CPU capability of its records.

Written next to the tables as versions.json, so a committed results folder says which code, which
packages and which hardware its numbers came from, and whether one table mixes them (a rerun with an
existing stamp keeps ok records made by older code; two hosts of "the same kind" can dispatch torch
to different kernels). Each value comes with the number of runs it made:

    {"runs": 11, "mixed": ["git_sha"],
     "git_sha": {"3f2a...": 10, "9c1b...+dirty": 1},
     "versions": {"torch": {"2.13.0": 11}, "transformers": {"5.24.0": 11}, ...},
     "cpu": {"model": {"AMD EPYC 9R14": 11}, "capability": {"AVX512": 11}}}

Records written before a field existed count under "unknown".
"""
from __future__ import annotations

from collections import Counter

from harness.core.records import Record

UNKNOWN = "unknown"


def _counts(values) -> dict[str, int]:
    return dict(sorted(Counter(str(v) if v not in (None, "") else UNKNOWN for v in values).items()))


def provenance(records: list[Record]) -> dict:
    """Distinct values, each with its run count, of everything the records say made them."""
    packages = sorted({p for r in records for p in (r.versions or {})})
    cpus = [getattr(r, "cpu", None) or {} for r in records]  # `cpu` is absent from older records
    out = {
        "runs": len(records),
        "git_sha": _counts(r.git_sha for r in records),
        "versions": {p: _counts((r.versions or {}).get(p) for r in records) for p in packages},
        "cpu": {"model": _counts(c.get("model") for c in cpus), "capability": _counts(c.get("capability") for c in cpus)},
    }
    mixed = ["git_sha"] if len(out["git_sha"]) > 1 else []
    mixed += [f"versions.{p}" for p, c in out["versions"].items() if len(c) > 1]
    mixed += [f"cpu.{k}" for k, c in out["cpu"].items() if len(c) > 1]
    return {"runs": out.pop("runs"), "mixed": mixed, **out}


def mixed_warning(prov: dict) -> str | None:
    """One line when the records were made by more than one code version, package set or CPU."""
    if not prov["mixed"]:
        return None
    parts = []
    for key in prov["mixed"]:
        node = prov
        for k in key.split("."):
            node = node[k]
        parts.append(f"{key}: " + ", ".join(f"{v} ({n} runs)" for v, n in node.items()))
    return "the records were made by different " + "; ".join(parts) + " (versions.json)"
