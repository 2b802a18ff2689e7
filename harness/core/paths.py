"""Where the project's own files are: its config folder, the zoo's checkpoints, the shipped model shapes.

One definition, so a module that moves between folders cannot point them elsewhere.
"""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]   # the repository (an editable install runs from it)
CONF_DIR = ROOT / "conf"                      # Hydra's config folder
ZOO_DIR = ROOT / "harness" / "checkpoints"    # the zoo and ladder models, one folder each
SHAPES_DIR = ROOT / "harness" / "shapes"      # HF configs of real models (pricing without a download)


def is_zoo(name_or_path: str) -> bool:
    """A bare zoo name (e.g. zoo-1m) whose checkpoint ships in harness/checkpoints."""
    name = str(name_or_path).strip("/")
    return "/" not in name and (ZOO_DIR / name / "config.json").is_file()
