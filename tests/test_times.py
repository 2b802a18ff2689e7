"""The times the README states are each claimed in harness/tools/times.py, and the ones a committed file
backs agree with that file (the command-measured ones are measured by running the script, not here)."""
import re

import pytest

from harness.tools.times import CLAIMS, KINDS, ROOT, STATED, card_seconds, json_seconds, runs_minutes, span_seconds

TIME = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)? ?(?:s|min|minutes|h|hours?)\b")


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: c.text[:40])
def test_every_claim_is_in_its_file(claim):
    assert claim.text in (ROOT / claim.file).read_text(), f"{claim.file} no longer says {claim.text!r}"
    assert bool(claim.cmd) + bool(claim.runs) + bool(claim.card) + bool(claim.json_key) == 1, \
        "one source per claim"
    assert not claim.span or claim.runs, "a span is of a runs.csv"


@pytest.mark.parametrize("claim", [c for c in CLAIMS if c.span], ids=lambda c: c.text[:40])
def test_stated_ranges_match_their_runs(claim):
    lo, hi = (float(x) for x in re.search(r"(\d+)-(\d+) ?(?:s|min)", claim.text).groups())
    unit = 60 if "min" in claim.text else 1
    got = span_seconds(claim.runs, claim.span)
    assert (round(got[0] / unit), round(got[1] / unit)) == (lo, hi), f"{claim.text!r}: the committed runs give {got}"


def test_stated_ranges_are_what_the_rows_hold():
    """Summed by hand: numerics_cpu's nine ES runs took 506-824 s (8.4-13.7 min)."""
    assert tuple(round(x) for x in span_seconds("numerics_cpu", "*")) == (506, 824)


@pytest.mark.parametrize("claim", [c for c in CLAIMS if c.json_key], ids=lambda c: c.text[:40])
def test_json_figures_match_their_file(claim):
    stated = re.search(r"(\d+(?:\.\d+)?) s\b", claim.text).group(1)
    decimals = len(stated.split(".")[1]) if "." in stated else 0
    assert round(json_seconds(claim.json_key), decimals) == float(stated), (claim.text, json_seconds(claim.json_key))


@pytest.mark.parametrize("claim", [c for c in CLAIMS if (c.runs and not c.span) or c.card], ids=lambda c: c.text[:40])
def test_backed_figures_match_their_files(claim):
    stated = float(re.search(r"(\d+(?:\.\d+)?) (?:min(?:utes)?|s)\b", claim.text).group(1))
    actual = runs_minutes(claim.runs) if claim.runs else card_seconds(claim.card, claim.per_prompt)
    assert round(actual) == stated, f"{claim.text!r}: the committed file gives {actual:.1f}"


@pytest.mark.parametrize("path", [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_time_the_readme_and_docs_state_is_claimed(path):
    """Each time figure is a claim with its measurement, or a stated limit, estimate, price or pre-fix figure."""
    rel, text = str(path.relative_to(ROOT)), path.read_text()
    spans = [(m.start(), m.start() + len(c.text)) for c in [*CLAIMS, *STATED] if c.file == rel
             for m in re.finditer(re.escape(c.text), text)]
    loose = [m.group(0) + " in: " + text[max(0, m.start() - 40):m.end()].replace("\n", " ")
             for m in TIME.finditer(text) if not any(a <= m.start() and m.end() <= b for a, b in spans)]
    assert not loose, f"times {rel} states with no claim in harness/tools/times.py:\n" + "\n".join(loose)


@pytest.mark.parametrize("stated", STATED, ids=lambda s: s.text[:40])
def test_every_unmeasured_time_is_in_its_file_with_a_reason(stated):
    assert stated.text in (ROOT / stated.file).read_text(), f"{stated.file} no longer says {stated.text!r}"
    assert stated.kind in KINDS


def test_runs_minutes_sums_wall_seconds():
    """Summed by hand from results/quickstart/runs.csv: 22.1 + 148.8 + 147.6 + 96.8 + 101.8 + 101.7 + 100.2
    + 116.4 + 114.3 + 119.6 + 120.7 = 1190.0 s."""
    assert runs_minutes("quickstart") * 60 == pytest.approx(1190.0, abs=0.06)


def test_the_committed_measurements_cover_every_quick_command_claim():
    """results/bench/times.json (python -m harness.tools.times --out ...) measured each quick command claim with
    the text the file states now, and the stated figure is within a factor of 2 of what it measured."""
    import json
    got = {m["text"]: m for m in json.loads((ROOT / "results" / "bench" / "times.json").read_text())["claims"]}
    for c in (c for c in CLAIMS if c.cmd and not c.slow):
        assert c.text in got, f"{c.text!r} has no committed measurement: rerun python -m harness.tools.times --out"
        stated = float(re.search(r"(\d+(?:\.\d+)?) ?(min|s)\b", c.text).group(1))
        unit = 60 if re.search(r"\d ?min\b", c.text) else 1
        assert 0.5 <= got[c.text]["seconds"] / (stated * unit) <= 2, (c.text, got[c.text]["seconds"])
