"""Deprecated alias: `python -m harness.zoo` is `python -m harness.tools.zoo` (harness/aliases.py)."""
from harness.aliases import forward

if __name__ == "__main__":
    forward("harness.tools.zoo", "harness.zoo")
