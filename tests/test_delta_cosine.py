"""The cosine between two ES runs' updates, read from their fp32 masters against the base they started from."""
import json
import math

import pytest
import torch
from safetensors.torch import save_file

from harness.core.errors import UserError
from harness.tools.delta_cosine import cosine


def _run(path, master, seed, status="ok", base="base"):
    (path / "es_checkpoint").mkdir(parents=True)
    save_file(master, str(path / "es_checkpoint" / "master.safetensors"))
    rec = {"status": status, "seed": seed, "budget": {"steps": 16},
           "config": {"model": {"name_or_path": str(base), "dtype": "float32"}, "method": {"population": 30}}}
    (path / "record.json").write_text(json.dumps(rec))
    return path


def test_the_cosine_is_of_the_two_updates_against_the_shared_base(tmp_path):
    base = {"w": torch.tensor([1.0, 2.0, 3.0]), "b": torch.tensor([0.5])}
    (tmp_path / "base").mkdir()
    save_file(base, str(tmp_path / "base" / "model.safetensors"))
    da, db = torch.tensor([1.0, 0.0, 1.0, 0.0]), torch.tensor([1.0, 1.0, 0.0, 0.0])   # cos = 1 / 2
    a = _run(tmp_path / "a", {"w": base["w"] + da[:3], "b": base["b"] + da[3:]}, 10, base=tmp_path / "base")
    b = _run(tmp_path / "b", {"w": base["w"] + db[:3], "b": base["b"] + db[3:]}, 10, base=tmp_path / "base")
    r = cosine(a, b)
    assert r["cosine"] == pytest.approx(0.5) and r["norm_a"] == pytest.approx(math.sqrt(2))
    assert r["null_sd"] == pytest.approx(1 / math.sqrt(30 * 16))


def test_an_unfinished_run_is_refused_in_one_line(tmp_path):
    (tmp_path / "base").mkdir()
    save_file({"w": torch.zeros(2)}, str(tmp_path / "base" / "model.safetensors"))
    a = _run(tmp_path / "a", {"w": torch.ones(2)}, 10, base=tmp_path / "base")
    b = _run(tmp_path / "b", {"w": torch.ones(2)}, 10, status="running", base=tmp_path / "base")
    with pytest.raises(UserError, match="not a finished ES run") as e:
        cosine(a, b)
    assert "\n" not in str(e.value)
