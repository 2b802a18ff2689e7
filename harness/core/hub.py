"""The hub, offline: one short probe decides, so a missing model fails in one line within seconds.

With no network and HF_HUB_OFFLINE unset, transformers spent about a minute (46 log lines of
retries) before saying a model was not cached. Here one HEAD request (3 s at most; proxies from the
environment apply) finds the hub unreachable; huggingface_hub is then switched to offline mode for
the process, so a cached model still loads and a missing one fails at once. `check_hub_model` runs
before torch loads (harness/runner/cli.py); harness/core/policy.py calls `offline_unless_reachable` for every
hub id it loads (experiments, analysis).
"""
from __future__ import annotations

import logging
import os
import urllib.error
import urllib.request

log = logging.getLogger("esbench")
PROBE_TIMEOUT_S = 3.0


def hub_reachable(timeout: float = PROBE_TIMEOUT_S) -> bool:
    """One HEAD request to the hub endpoint; any HTTP answer (even 4xx) counts as reachable."""
    from huggingface_hub import constants

    try:
        urllib.request.urlopen(urllib.request.Request(constants.ENDPOINT, method="HEAD"), timeout=timeout)
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):  # URLError: DNS failure, refused, timeout
        return False
    return True


def offline_unless_reachable(hub_id: str, say: bool = True) -> bool:
    """Switch huggingface_hub to offline mode when the hub is unreachable; True when offline (either way).

    The user's HF_HUB_OFFLINE, when set, is left alone (and no probe is made).
    """
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return True
    if os.environ.get("HF_HUB_OFFLINE", "") != "" or hub_reachable():  # "0": the user says online
        return False
    os.environ["HF_HUB_OFFLINE"] = "1"
    constants.HF_HUB_OFFLINE = True  # read at import: the variable alone is too late once imported
    if say:
        log.warning("the hub (%s) is unreachable: loading %s from the local cache only", constants.ENDPOINT, hub_id)
    return True


def not_cached_message(hub_id: str) -> str:
    return (f"model {hub_id!r} is not in the local hub cache and the hub is unreachable (or HF_HUB_OFFLINE=1); "
            f"download it where the hub is reachable (hf download {hub_id}) and pass model=<its folder>, "
            "or check the id")


def check_hub_model(hub_id: str) -> str | None:
    """None when `hub_id` can load (the hub is reachable, or it is cached); else the one-line reason."""
    from huggingface_hub import try_to_load_from_cache

    if not offline_unless_reachable(hub_id, say=False):
        return None
    if isinstance(try_to_load_from_cache(hub_id, "config.json"), str):
        log.warning("the hub is unreachable or HF_HUB_OFFLINE is set: loading %s from the local cache", hub_id)
        return None
    return not_cached_message(hub_id)
