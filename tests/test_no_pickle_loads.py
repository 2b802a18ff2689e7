"""Nothing executable is loaded from a run folder: every torch.load reads weights only."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOAD = re.compile(r"torch\.load\((?P<args>[^)]*)\)", re.S)


def test_every_torch_load_is_weights_only():
    bad = []
    for path in sorted([*ROOT.glob("harness/**/*.py"), *ROOT.glob("methods/**/*.py"), *ROOT.glob("tasks/**/*.py")]):
        for m in LOAD.finditer(path.read_text()):
            if "weights_only=True" not in m.group("args"):
                bad.append(f"{path.relative_to(ROOT)}: {m.group(0)[:80]}")
    assert not bad, "torch.load without weights_only=True unpickles code from a file:\n" + "\n".join(bad)
    assert (ROOT / "methods" / "ppo.py").read_text().count("weights_only=True") >= 1  # the PPO resume path
