"""Deprecated alias: `python -m harness.gpu_check` is `python -m harness.tools.gpu_check` (harness/aliases.py)."""
from harness.aliases import forward

if __name__ == "__main__":
    forward("harness.tools.gpu_check", "harness.gpu_check")
