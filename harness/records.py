"""Run records: one self-describing JSON per run, written atomically.

A record holds the resolved config, package versions, git sha, seeds, thread count, the FLOPs and
samples used against the budget, wall times, metrics with CIs per split, and a few completions.
Tables (harness/tables.py) are rebuilt from records alone.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import tempfile
from importlib import metadata
from pathlib import Path

SCHEMA_VERSION = 1
RECORD_NAME = "record.json"
_PACKAGES = ("esbench", "torch", "transformers", "trl", "datasets", "hydra-core", "tokenizers")


def versions() -> dict[str, str]:
    """Installed versions of the packages whose behaviour the numbers depend on."""
    out = {"python": platform.python_version()}
    for p in _PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = "not installed"
    return out


def git_sha() -> str:
    """The repo's HEAD sha, with "+dirty" when the tree has uncommitted changes; "unknown" outside git."""
    root = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def write_text_atomic(path: Path, text: str) -> None:
    """Write to a temp file in the same folder, fsync, then rename: readers (and concurrent cluster
    jobs rebuilding the same tables) never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, obj) -> None:
    """Serialise first (a failure leaves the old file untouched), then write atomically."""
    write_text_atomic(path, json.dumps(obj, indent=2, default=str) + "\n")


def write_record(run_dir: Path, record: dict) -> Path:
    """Stamp schema version, versions and git sha onto `record` and write run_dir/record.json."""
    record = {"schema_version": SCHEMA_VERSION, "versions": versions(), "git_sha": git_sha(), **record}
    path = Path(run_dir) / RECORD_NAME
    write_json_atomic(path, record)
    return path


def read_records(root: Path) -> tuple[list[dict], list[str]]:
    """All readable, current-schema, finished records under `root`, plus a warning per skipped file."""
    records, warnings = [], []
    for path in sorted(Path(root).rglob(RECORD_NAME)):
        try:
            rec = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            warnings.append(f"skipped {path}: unreadable ({e})")
            continue
        if rec.get("schema_version") != SCHEMA_VERSION:
            warnings.append(f"skipped {path}: schema_version {rec.get('schema_version')} != {SCHEMA_VERSION} "
                            "(written by another esbench version; rerun it)")
            continue
        rec["_path"] = str(path)
        records.append(rec)
    records.sort(key=lambda r: r.get("started_at", 0))  # tables list runs in the order they ran
    return records, warnings
