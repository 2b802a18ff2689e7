"""Roles: what a cell or grid of an experiment file is, declared beside it, so that the claims ledger finds its
rows by what they are, never by how they are labelled.

    cells:
      - {label: "ES sigma=1e-3 (paper set)", role: es, overrides: [...]}
    grids:
      - {name: GRPO(8), role: grpo, overrides: [...], axes: {...}}

A comparison's side is a column label (harness/reporting/comparisons.py): a cell's label, a cell point's label
("ES sigma=0.003": the cell "ES" at one point of its axes) or a grid's name. Its role is the role of the cell or
grid it comes from. A cell or grid with no role is in no claim's rows; the schema (harness/runner/schema.py)
refuses a role outside ROLES unless the cell's method declares it: ROLES is the closed list the shipped files
keep to, and a method from outside the repository adds its own (MethodFacts.roles, harness/core/method_facts.py:
`roles={"rloo": "RLOO at a group size"}`). A role no claim of conf/claims.yaml reads is accepted, and the
experiment lists it in one line, "in no claim" (unclaimed), where it prints its runs and its tables.
"""
from __future__ import annotations

import re
from pathlib import Path

CLAIMS_FILE = Path(__file__).resolve().parents[2] / "conf" / "claims.yaml"

POINT = re.compile(r"\S+=\S+(?: \S+=\S+)*")  # what a point adds to its cell's label (schema.point_label)

ROLES = {
    "base": "the model as it starts, no training",
    "es": "ES itself at the file's setting: the column the claims call ES (not a variant, numerics or sequential cell)",
    "es_sweep": "a sigma sweep's ES cell (alpha fixed where the file fixes it)",
    "es_tied": "a sigma sweep's ES cell with alpha tied to sigma",
    "es_population": "ES at population N, matched by updates",
    "es_population_flops": "ES at population N, matched by FLOPs",
    "es_antithetic": "ES with antithetic pairs",
    "es_variant": "any other ES variant or arithmetic (a part of the weights, LoRA, low-rank noise, shaping, numerics)",
    "placebo": "ES with its rewards permuted across members (method.fitness=placebo)",
    "grpo": "GRPO at a group size (full weights)",
    "grpo_lora": "GRPO on LoRA adapters",
    "dr_grpo": "Dr. GRPO (GRPO without its length and std normalisations; conf/method/dr_grpo.yaml)",
    "dapo": "DAPO (clip-higher, token-level loss; conf/method/dapo.yaml)",
    "gspo": "GSPO (sequence-level importance ratio; conf/method/gspo.yaml)",
    "rloo": "RLOO (leave-one-out baseline; conf/method/rloo.yaml)",
    "ppo": "PPO",
    "grpo_then_es": "GRPO, then ES from its weights",
    "es_then_grpo": "ES, then GRPO from its weights",
}


def declared(spec: dict) -> dict[str, tuple[str, tuple[str, ...]]]:
    """{cell label or grid name: (role, the last part of each axis key)} for the cells and grids of an experiment
    file that declare a role: a cell "ES" with axes {method.sigma: [...]} is ("es_sweep", ("sigma",))."""
    out = {}
    for entry in [*(spec.get("cells") or []), *(spec.get("grids") or [])]:
        if isinstance(entry, dict) and entry.get("role"):
            keys = tuple(str(k).split(".")[-1] for k in (entry.get("axes") or {}))
            out[str(entry.get("label", entry.get("name")))] = (str(entry["role"]), keys)
    return out


def role_of(column: str, roles: dict[str, tuple[str, tuple[str, ...]]]) -> str:
    """The role of a column label: its cell's or grid's, matched whole, or the cell's whose label is followed by
    exactly its axes' key=value pairs ("ES sigma=0.003" is the cell "ES" with axis method.sigma; "ES full" and
    "ES population=10" are not); "" when no cell declares one."""
    if column in roles:
        return roles[column][0]
    for label, (role, keys) in roles.items():
        rest = column[len(label) + 1:] if column.startswith(label + " ") else ""
        if keys and POINT.fullmatch(rest) and tuple(t.split("=", 1)[0] for t in rest.split(" ")) == keys:
            return role
    return ""


def claimed_roles(path: Path = CLAIMS_FILE) -> set[str]:
    """Every role a claim of conf/claims.yaml names on either side of a check (its checks and its rule's check)."""
    import yaml

    try:
        spec = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return set()
    out: set[str] = set()
    for claim in spec.get("claims") or []:
        checks = [*(claim.get("checks") or []), (claim.get("decide") or {}).get("check") or {}]
        for check in checks:
            out.update(str(r) for side in ("a", "b") for r in (check.get(side) or []))
    return out


def unclaimed(spec: dict) -> str:
    """One line naming the roles of an experiment's cells and grids that are not in ROLES and that no claim
    reads (a plugin's own roles), each with its cells; '' when there are none."""
    known = claimed_roles()
    out: dict[str, list[str]] = {}
    for column, (role, _) in declared(spec).items():
        if role not in ROLES and role not in known:
            out.setdefault(role, []).append(column)
    if not out:
        return ""
    return ("roles in no claim (accepted; conf/claims.yaml reads none of them): "
            + "; ".join(f"{role} ({', '.join(cols)})" for role, cols in out.items()))
