"""Which commit declared an experiment's primary endpoints, and a refusal when they move after a run.

A result is confirmatory only if its endpoint was fixed before its first run. The experiment file's
`primary:` list counts as declared by the oldest commit from which it has read as it reads now (the
file's git history, newest first); every run of the experiment stores that commit and its date in its
record (`declared`), so a write-up can show the declaration predates the first record's start. Once a
record exists, an experiment whose primary list differs from the one that record ran under is refused
when it loads, naming the record and the commit that declared the old one.

    python -m harness experiment=placebo_real_confirm +dry_run=true     # prints the declaring commit
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from harness.core import paths
from harness.core.errors import UserError


class DeclarationError(UserError, ValueError):
    """The primary endpoints changed after a run of the experiment was recorded."""


def _primary(text: str | None) -> list | None:
    """The `primary:` list of an experiment file's text (None when it has none or does not parse)."""
    try:
        node = yaml.safe_load(text or "") or {}
    except yaml.YAMLError:
        return None
    return node.get("primary") or None if isinstance(node, dict) else None


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=paths.ROOT, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def declaration(experiment: str | None) -> dict | None:
    """{primary, commit, date} of conf/experiment/<experiment>.yaml; None when it declares no primary.

    commit is None when the primary in the working tree is not committed as it reads (a declaration
    no one can check), and "unknown" outside a git checkout.
    """
    if not experiment:
        return None
    path = paths.CONF_DIR / "experiment" / f"{experiment}.yaml"
    if not path.is_file():
        return None
    now = _primary(path.read_text())
    if not now:
        return None
    rel = path.relative_to(paths.ROOT).as_posix()
    history = _git("log", "--format=%H %cI", "--", rel)
    if history is None:
        return {"primary": now, "commit": "unknown", "date": None}
    commit = date = None
    for line in history.split("\n"):
        if not line.strip():
            continue
        sha, when = line.split(" ", 1)
        if _primary(_git("show", f"{sha}:{rel}")) != now:
            break
        commit, date = sha, when.strip()
    return {"primary": now, "commit": commit, "date": date}


def check_unchanged(root: Path, declared: dict | None) -> None:
    """Refuse when a record under `root` (an experiment's stamp folder) ran under another primary list."""
    now = (declared or {}).get("primary")
    for path in sorted(Path(root).glob("**/record.json")):
        try:
            old = (json.loads(path.read_text()).get("declared") or {})
        except (OSError, ValueError, AttributeError):
            continue
        if old and old.get("primary") != now:
            by = old.get("commit") or "an uncommitted file"
            raise DeclarationError(
                f"{path} ran under the primary endpoints declared in commit {by} ({old.get('primary')}); this "
                f"experiment file now declares {now}. A primary cannot change after a run: restore it, or declare "
                "the new one in a new experiment file and run it with a new stamp")
