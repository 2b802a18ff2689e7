"""Deprecated alias: `python -m harness.launch` is `python -m harness.runner.launch` (harness/aliases.py)."""
from harness.aliases import forward

if __name__ == "__main__":
    forward("harness.runner.launch", "harness.launch")
