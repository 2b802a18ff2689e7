"""Weight magnitudes by parameter group: where bf16's grid is coarse before any update lands.

A bf16 weight in [2^e, 2^(e+1)) moves in steps of 2^(e-7), so under the reference code's in-place
arithmetic (method.numerics=inplace) the largest possible |delta| of a coordinate is set by its |w|.
This lists, per group (harness/analysis/groups.py): parameters, median and max |w|, the share with
|w| >= 1/8, 1/2 and 1, and the bf16 ulp at the median, so a localisation figure
(results/numerics/findings.md) can be read against the magnitudes that set it.

    python -m harness.tools.weight_magnitudes smollm2-135m-instruct --out results/numerics/magnitudes_smollm2-135m-instruct.json

Writes the JSON (command, torch, git sha) and a markdown table beside it (.md).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m harness.tools.weight_magnitudes", description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a conf/model name, zoo name or local path")
    ap.add_argument("--out", required=True, type=Path, help="the JSON path; the markdown goes beside it (.md)")
    return ap


if __name__ == "__main__" and any(a in ("-h", "--help") for a in sys.argv[1:]):
    _parser().parse_args()  # prints the help and exits, before the imports below (torch: 7-9 s)

import torch

from harness.analysis.groups import GROUPS, group_label, group_of
from harness.core.atomic import write_json_atomic, write_text_atomic
from harness.tools.numerics_replay import load_model

CUTS = (0.125, 0.5, 1.0)


def bf16_ulp(x: float) -> float:
    """The bf16 spacing above |x| (8 significant bits)."""
    a = torch.tensor([abs(x)], dtype=torch.bfloat16)
    return float(torch.nextafter(a, torch.tensor([float("inf")], dtype=torch.bfloat16)) - a)


@torch.no_grad()
def magnitudes(model) -> dict[str, dict]:
    """Per group: params, median/max |w|, the share at or above each cut, the bf16 ulp at the median."""
    by_group: dict[str, list[torch.Tensor]] = {}
    for name, p in model.named_parameters():  # a tied head appears once, as the embedding
        by_group.setdefault(group_of(name), []).append(p.detach().float().abs().reshape(-1))
    out = {}
    for g in GROUPS:
        if g not in by_group:
            continue
        a = torch.cat(by_group[g])
        med = float(a.median())
        out[g] = {"params": a.numel(), "median_abs": med, "max_abs": float(a.max()),
                  **{f"share_ge_{c:g}": float((a >= c).double().mean()) for c in CUTS},
                  "bf16_ulp_at_median": bf16_ulp(med)}
    return out


def markdown(result: dict) -> str:
    tied = result["tied"]
    lines = [f"# Weight magnitudes by group: {result['model']}", "",
             f"`{result['command']}` (torch {result['torch']}, git {result['git_sha']})", "",
             "| group | params | median abs w | max abs w | >= 1/8 | >= 1/2 | >= 1 | bf16 ulp at median |",
             "|---|---|---|---|---|---|---|---|"]
    for g, r in result["groups"].items():
        lines.append(f"| {group_label(g, tied)} | {r['params']:,} | {r['median_abs']:.3g} | {r['max_abs']:.3g} | "
                     + " | ".join(f"{100 * r[f'share_ge_{c:g}']:.1f}%" for c in CUTS)
                     + f" | {r['bf16_ulp_at_median']:.2g} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    from harness.core.records import git_sha
    argv = sys.argv[1:] if argv is None else argv
    ap = _parser()
    a = ap.parse_args(argv)
    model = load_model(a.model)
    result = {"command": "python -m harness.tools.weight_magnitudes " + " ".join(argv), "torch": torch.__version__,
              "git_sha": git_sha(), "model": a.model,
              "tied": bool(getattr(model.config, "tie_word_embeddings", False)), "groups": magnitudes(model)}
    write_json_atomic(a.out, result)
    write_text_atomic(a.out.with_suffix(".md"), markdown(result))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
