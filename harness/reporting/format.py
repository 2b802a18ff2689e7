"""How numbers read in every table: accuracy-type metrics in %, others to 3 decimals, a fixed order."""
from __future__ import annotations

import math
import re

PERCENT = ("greedy_acc", "pass@", "maj@")
_ORDER = ("greedy_acc", "pass@", "maj@", "mean_reward", "greedy_reward")


def isnan(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def is_percent(metric: str) -> bool:
    return metric.startswith(PERCENT)


def fmt_value(v: float, metric: str) -> str:
    return "-" if isnan(v) else (f"{100 * v:.1f}" if is_percent(metric) else f"{v:.3f}")


def metric_order(names) -> list[str]:
    """greedy_acc, pass@k by k, maj@k by k, rewards, then anything else alphabetically."""
    def rank(m: str) -> tuple:
        for i, prefix in enumerate(_ORDER):
            if m.startswith(prefix):
                return i, int(m[len(prefix):]) if m[len(prefix):].isdigit() else 0, m
        return 9, 0, m
    return sorted(names, key=rank)


_TAG = re.compile(r"<(?=[A-Za-z/!?])")


def md_cell(text) -> str:
    """One markdown table cell from text that may come from a run folder (a model name, a label): a `|` or a
    line break there would forge columns or rows, and an HTML tag would render; each is escaped. Text the
    tables write themselves ("p < 0.05", "←") is unchanged."""
    s = str(text).replace("\\", "\\\\").replace("|", "\\|")
    s = re.sub(r"[\r\n]+", " ", s)
    return _TAG.sub("&lt;", s)


def md_row(cells) -> str:
    """A markdown table row of escaped cells (md_cell)."""
    return "| " + " | ".join(md_cell(c) for c in cells) + " |"
