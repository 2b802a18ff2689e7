"""Known third-party noise, silenced in one place, so a run's log is what a person reads.

Each entry is a message the libraries print about their *own* internals, once per run (a
quickstart printed 36 copies of one FutureWarning), that no setting of ours can act on:
  - transformers 5 deprecates `gradient_checkpointing`/`is_gradient_checkpointing` in favour of
    `activation_checkpointing`; TRL's trainers still read the old names (FutureWarning per trainer);
  - TRL warns that PPO lives in `trl.experimental` (methods/ppo.py pins trl==1.12.0 for that reason);
  - TRL's PPOTrainer prints "===training policy===" at every train() call;
  - transformers' generate() warns that TRL's PPO passes a generation_config with extra arguments.
Anything else still shows. Called by harness/runner/cli.py once the config is checked, before the libraries load.
"""
from __future__ import annotations

import logging
import os
import warnings

FUTURE_WARNINGS = (r"`(is_)?gradient_checkpointing\w*` is deprecated and will be removed in v6",)
BANNERS = ("===training policy===",)
LOG_MESSAGES = ("Passing `generation_config` together with generation-related arguments",)


class _DropKnown(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not any(m in msg for m in LOG_MESSAGES)


def quiet_known_warnings() -> None:
    """Install the filters (idempotent): warnings, the TRL experimental notice, the PPO banner, log lines."""
    for pattern in FUTURE_WARNINGS:
        warnings.filterwarnings("ignore", message=pattern, category=FutureWarning)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    for name in ("transformers", "transformers.generation.utils"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropKnown) for f in logger.filters):
            logger.addFilter(_DropKnown())


def drop_banners() -> None:
    """accelerate's Accelerator.print without TRL's per-run banners (call once accelerate is imported)."""
    import accelerate

    original = accelerate.Accelerator.print
    if getattr(original, "_esbench_quiet", False):
        return

    def print_(self, *args, **kwargs):
        if len(args) == 1 and str(args[0]) in BANNERS:
            return
        original(self, *args, **kwargs)

    print_._esbench_quiet = True
    accelerate.Accelerator.print = print_
