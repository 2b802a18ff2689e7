"""Deprecated alias: `python -m harness.analyze` is `python -m harness.analysis` (harness/aliases.py)."""
from harness.aliases import forward

if __name__ == "__main__":
    forward("harness.analysis", "harness.analyze")
