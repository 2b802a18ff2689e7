"""Deprecated alias: `python -m harness.tables` is `python -m harness.reporting` (harness/aliases.py)."""
from harness.aliases import forward

if __name__ == "__main__":
    forward("harness.reporting", "harness.tables")
