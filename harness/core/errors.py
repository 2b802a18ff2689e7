"""The one base class of the errors a user can fix: their config, data, model path or command.

Every such error derives from `UserError` (and keeps its builtin parent, ValueError or RuntimeError,
so callers that catch those still do); the command line catches this one type and prints its
message, one line that names the problem and the fix, instead of a traceback.
"""
from __future__ import annotations

import difflib
from collections.abc import Mapping


class UserError(Exception):
    """A problem the user fixes by changing a setting, a file or a command; the message says how."""


class ConfigError(UserError, ValueError):
    """A composed config is wrong: an unknown key, a wrong type, an impossible combination."""


class Terminated(BaseException):
    """SIGTERM arrived (what `timeout` and Slurm send): the run's record says interrupted, not failed.

    Defined here, not in harness/runner/run.py, so the command line installs its SIGTERM handler
    without importing torch (harness/runner/run.py re-exports it).
    """


def did_you_mean(name: str, valid, listing: str = "valid keys") -> str:
    """The hint after an unknown name: the nearest valid one, or (none near) all of them after `listing`."""
    near = difflib.get_close_matches(str(name), sorted(valid), n=1, cutoff=0.5)
    return f"; did you mean {near[0]!r}?" if near else f"; {listing}: {', '.join(sorted(valid))}"


def unknown_key(key: str, where: str, valid: set[str]) -> ConfigError:
    """The error for a key that is not one of `valid`, naming the nearest valid key (or all of them)."""
    return ConfigError(f"unknown key {key!r} in {where}{did_you_mean(key, valid)}")


def check_keys(node, valid: set[str], where: str) -> None:
    """Raise ConfigError unless `node` is a mapping whose keys are all in `valid` (naming the nearest one)."""
    if not isinstance(node, Mapping):  # a dict or an OmegaConf DictConfig
        raise ConfigError(f"{where} must be a mapping with keys {sorted(valid)}, got {node!r}")
    for k in node:
        if k not in valid:
            raise unknown_key(str(k), where, valid)
