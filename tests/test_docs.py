"""The README and docs/ keep their relative links working, and the README stays a front door.

Every markdown link `[text](path)`, `[text](path#anchor)` or `[text](#anchor)` in README.md and
docs/**/*.md must point to a file or folder that exists in the repository; an anchor into a markdown
file must name one of its headings, slugged as GitHub does (lower-case, punctuation other than - and
_ dropped, spaces to -, a repeated heading gets -1, -2, ...). External links (http, https, mailto)
are not checked. Code blocks and inline code are skipped: a `[x](y)` there is text, not a link.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 400

FENCE = re.compile(r"^\s{0,3}(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def outside_fences(text: str) -> str:
    """The text with fenced code blocks blanked (line numbers kept)."""
    out, fenced, fence = [], False, ""
    for line in text.split("\n"):
        m = FENCE.match(line)
        if m and (not fenced or m.group(1) == fence):
            fenced, fence = (not fenced), m.group(1)
            out.append("")
            continue
        out.append("" if fenced else line)
    return "\n".join(out)


def prose(text: str) -> str:
    """The text outside fenced code blocks, with inline code blanked too (line numbers kept)."""
    return INLINE_CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), outside_fences(text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in outside_fences(path.read_text(encoding="utf-8")).split("\n"):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[tuple[int, str]]:
    text = prose(path.read_text(encoding="utf-8"))
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in LINK.finditer(text)]


def broken_links(path: Path) -> list[str]:
    bad = []
    for line, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / unquote(file_part)).resolve() if file_part else path
        where = f"{path.relative_to(ROOT)}:{line}: ({target})"
        if ROOT != dest and ROOT not in dest.parents:
            bad.append(f"{where} points outside the repository")
        elif not dest.exists():
            bad.append(f"{where} {dest.relative_to(ROOT)} does not exist")
        elif anchor and dest.suffix == ".md" and unquote(anchor).lower() not in anchors(dest):
            bad.append(f"{where} no heading #{anchor} in {dest.relative_to(ROOT)}")
    return bad


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path):
    assert links(path) or path.name != "README.md", "the README links nothing: is the parser broken?"
    bad = broken_links(path)
    assert not bad, "broken links:\n" + "\n".join(bad)


def test_readme_is_a_front_door():
    n = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert n < README_MAX_LINES, f"README.md has {n} lines; move reference or results text to docs/"


def test_docs_exist():
    for name in ("architecture.md", "gpus.md"):
        assert (ROOT / "docs" / name).is_file()
    assert list((ROOT / "docs" / "results").glob("*.md"))


def test_checker_catches_what_it_should(tmp_path, monkeypatch):
    """Broken files and anchors are reported; good ones, code and external links are not."""
    root = tmp_path
    (root / "docs").mkdir()
    (root / "docs" / "a.md").write_text("# Title\n\n## The 1.5B question, on the zoo\n\n## Run `engine=hf` (default)\n\n## Title\n")
    readme = root / "README.md"
    readme.write_text(
        "[ok](docs/a.md) [ok](docs/a.md#the-15b-question-on-the-zoo) [ok](docs/a.md#run-enginehf-default)\n"
        "[ok](docs/a.md#title-1) [ok](docs/) [ok](#top) [ext](https://example.com/x#y)\n"
        "# Top\n"
        "```\n[in code](nowhere.md)\n```\n`[inline](nowhere.md)`\n"
        "[bad](docs/missing.md) [bad](docs/a.md#nope) ![bad](img/missing.png) [bad](#nope)\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", root)
    bad = broken_links(readme)
    assert len(bad) == 4, bad
    assert all(":8:" in b for b in bad), bad
