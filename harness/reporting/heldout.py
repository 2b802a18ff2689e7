"""Held-out tasks (eval.tasks): the trained policies on other tasks' test splits, as table blocks.

Forgetting is measured, never inferred: every run that evaluated a held-out task gets a row, and
experiments with published held-out numbers (`paper_heldout:`) print "measured (published, Δ)".
"""
from __future__ import annotations

from harness.core.records import Record
from harness.reporting.format import fmt_value, md_row, metric_order

HELDOUT_NOTE = "Accuracy-type metrics in %, mean over test prompts [bootstrap 95% CI]."


def heldout_markdown(records: list[Record]) -> str:
    """One block per held-out task: one row per successful run that evaluated it."""
    names = sorted({n for r in records for n in r.heldout})
    blocks = []
    for name in names:
        done = [r for r in records if name in r.heldout and r.effective_status == "ok"]
        metrics = metric_order({m for r in done for m in r.heldout[name]["metrics"]})
        head = ["model", "run", "seed", *metrics]
        lines = [f"\n## Held-out task: {name} (test split)\n", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in done:
            ms = r.heldout[name]["metrics"]
            cells = [f"{fmt_value(ms[m].mean, m)} [{fmt_value(ms[m].ci_low, m)}, {fmt_value(ms[m].ci_high, m)}]"
                     if m in ms else "-" for m in metrics]
            lines.append(md_row([r.model_key or r.model, r.label, str(r.seed), *cells]))
        blocks.append("\n".join(lines) + f"\n\n{HELDOUT_NOTE}\n")
    return "".join(blocks)


def heldout_paper_markdown(records: list[Record], paper_heldout: dict | None,
                           metrics: tuple[str, ...] = ("pass@1", "pass@16", "pass@32")) -> str:
    """Held-out tasks against published numbers: task -> model -> column -> [values of `metrics`].

    Each cell is "measured (published, Δ)", the measured value a mean over the successful seeds.
    """
    blocks = []
    for task, models in (paper_heldout or {}).items():
        lines = [f"\n## Held-out {task}: measured (published, Δ), test, in %\n",
                 "| model | run | " + " | ".join(metrics) + " |", "|---|---|" + "---|" * len(metrics)]
        for model, cols in models.items():
            for col, published in cols.items():
                done = [r.heldout[task]["metrics"] for r in records if r.effective_status == "ok"
                        and (r.model_key or r.model) == model and (r.column or r.label) == col and task in r.heldout]
                cells = []
                for m, pub in zip(metrics, published):
                    vals = [d[m].mean for d in done if m in d]
                    got = 100 * sum(vals) / len(vals) if vals else None
                    cells.append(f"- (paper {pub:.1f})" if got is None else f"{got:.1f} ({pub:.1f}, {got - pub:+.1f})")
                lines.append(md_row([model, col, *cells]))
        blocks.append("\n".join(lines) + "\n")
    return "".join(blocks)
