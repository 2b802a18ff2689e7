"""The commit that declared an experiment's primary endpoints, and the refusal when they move after a run."""
import json
import subprocess

import pytest

from harness.core import paths
from harness.runner.declared import DeclarationError, check_unchanged, declaration

PRIMARY = "primary:\n  - {a: ES, b: placebo, metric: greedy_acc, direction: greater, test: seed_t}\n"


def _git(root, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True,
                   capture_output=True)


@pytest.fixture
def repo(tmp_path, monkeypatch):
    (tmp_path / "conf" / "experiment").mkdir(parents=True)
    monkeypatch.setattr(paths, "ROOT", tmp_path)
    monkeypatch.setattr(paths, "CONF_DIR", tmp_path / "conf")
    _git(tmp_path, "init", "-q")
    return tmp_path


def test_the_declaring_commit_is_the_oldest_with_the_primary_as_it_reads(repo):
    f = repo / "conf" / "experiment" / "x.yaml"
    f.write_text("group: x\n")
    _git(repo, "add", "-A"), _git(repo, "commit", "-qm", "no primary yet")
    f.write_text("group: x\n" + PRIMARY)
    assert declaration("x")["commit"] is None          # not committed as it reads: nobody can check it
    _git(repo, "commit", "-qam", "declare")
    declared = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    f.write_text("group: x\nseeds: [1]\n" + PRIMARY)  # a later edit that leaves the primary alone
    _git(repo, "commit", "-qam", "more seeds")
    d = declaration("x")
    assert d["commit"] == declared and d["primary"][0]["b"] == "placebo" and d["date"]


def test_a_primary_changed_after_a_record_is_refused_naming_the_record_and_commit(tmp_path):
    old = {"primary": [{"a": "ES", "b": "placebo", "metric": "greedy_acc"}], "commit": "abc123", "date": "d"}
    (tmp_path / "ES" / "seed10").mkdir(parents=True)
    (tmp_path / "ES" / "seed10" / "record.json").write_text(json.dumps({"status": "ok", "declared": old}))
    check_unchanged(tmp_path, old)                     # the same primary: fine
    new = {**old, "primary": [{"a": "ES", "b": "Original", "metric": "greedy_acc"}]}
    with pytest.raises(DeclarationError, match=r"ES/seed10/record.json ran under the primary endpoints declared in "
                                               r"commit abc123") as e:
        check_unchanged(tmp_path, new)
    assert "\n" not in str(e.value)
