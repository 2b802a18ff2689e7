"""The README and docs/ keep their relative links working, and the README stays a front door.

Every markdown link `[text](path)`, `[text](path#anchor)` or `[text](#anchor)` in README.md and
docs/**/*.md must point to a file or folder that exists in the repository; an anchor into a markdown
file must name one of its headings, slugged as GitHub does (lower-case, punctuation other than - and
_ dropped, spaces to -, a repeated heading gets -1, -2, ...). External links (http, https, mailto)
are not checked. Code blocks and inline code are skipped: a `[x](y)` there is text, not a link.

The docs also match the tree: every repository path docs/architecture.md names, and every one the tests'
docstrings name, exists; its layout block names every module of harness/ and methods/; and no comment,
docstring or doc cites a tracker issue by number (a reader does not have the tracker).
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


# ---- the paths the docs and the tests' docstrings name exist, and the layout lists every module ----

ARCHITECTURE = ROOT / "docs" / "architecture.md"
REPO_PATH = re.compile(r"(?<![\w./<-])((?:harness|methods|conf|tests|tasks|\.ci)/[\w./*-]*)")
NAME_COL = 24  # the layout block's description column
LISTED = ("harness", "methods")  # every module of these is named in the layout block


def repo_paths(text: str) -> list[str]:
    """Tokens naming a file or folder of the repository (a glob like conf/model/zoo-*.yaml included)."""
    return sorted({m.group(1).rstrip(".") for m in REPO_PATH.finditer(text)} - {""})


def exists(path: str, root: Path | None = None) -> bool:
    """The path exists: a glob that matches, a file or folder, or a module named as dir/module(.attribute);
    a placeholder with ... (conf/model/Qwen/...yaml, a path Hydra would look for) is not checked."""
    root = root or ROOT
    if "..." in path:
        return True
    if "*" in path:
        return any(root.glob(path))
    return (root / path).exists() or (root / f"{path.split('.')[0]}.py").is_file()


def docstrings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of the module's, its classes' and its functions' docstrings."""
    import ast
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                out.append((node.body[0].lineno, doc))
    return out


def test_architecture_names_only_paths_that_exist():
    named = repo_paths(ARCHITECTURE.read_text(encoding="utf-8"))
    assert "harness/core/flops.py" in named, "no path found: is the pattern broken?"
    missing = [p for p in named if not exists(p)]
    assert not missing, "docs/architecture.md names paths that do not exist: " + ", ".join(missing)


@pytest.mark.parametrize("path", sorted((ROOT / "tests").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_test_docstrings_name_only_paths_that_exist(path: Path):
    missing = [f"{path.relative_to(ROOT)}:{line}: {p}" for line, doc in docstrings(path) for p in repo_paths(doc)
               if not exists(p)]
    assert not missing, "docstrings name paths that do not exist:\n" + "\n".join(missing)


def layout(text: str) -> tuple[set[str], list[tuple[str, str]]]:
    """The 'Where each thing lives' block read as a tree: the paths of its entries (two spaces of indent per
    level, names before the description column, several names split by commas), and (folder, name) for each
    bare `name.py` in a description, which names a file of the entry's folder (or, for a file entry, of its
    parent)."""
    block = text.split("### Where each thing lives", 1)[1].split("```", 2)[1]
    entries, described, stack, here = set(), [], [], ""
    for line in block.split("\n"):
        if not line.strip():
            continue
        desc = line.strip()
        if line[:NAME_COL].strip():
            depth = (len(line) - len(line.lstrip(" "))) // 2
            names = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
            desc = desc[len(names):]
            stack = stack[:depth]
            here = "".join(stack)
            for name in (n.strip() for n in names.split(",")):
                entries.add(here + name)
                if name.endswith("/") and "," not in names:
                    stack.append(name)
                    here = here + name
        described += [(here, n) for n in re.findall(r"(?<![\w./-])(\w+\.py)\b", desc)]
    return entries, described


def configured_methods(root: Path) -> set[str]:
    """methods/<x>.py files a conf/method/*.yaml's `_target_` names a class of (methods.<x>.Class), and their
    light modules methods/<x>_config.py: the README's recipe, one module and one YAML, is documented by the
    YAML, so adding a method needs no edit of docs/architecture.md."""
    import yaml

    out = set()
    for path in sorted((root / "conf" / "method").glob("*.yaml")):
        try:
            target = str((yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("_target_") or "")
        except (OSError, yaml.YAMLError, AttributeError):
            continue
        parts = target.split(".")
        if len(parts) == 3 and parts[0] == "methods":
            out |= {f"methods/{parts[1]}.py", f"methods/{parts[1]}_config.py"}
    return out


def layout_problems(root: Path) -> list[str]:
    entries, described = layout((root / "docs" / "architecture.md").read_text(encoding="utf-8"))
    named = entries | {folder + name for folder, name in described}
    bad = [f"the layout names {p}, which does not exist" for p in sorted(named) if not exists(p, root)]
    own_yaml = configured_methods(root)
    for top in LISTED:
        for folder in sorted({f.parent for f in (root / top).rglob("*.py")}):
            rel = f"{folder.relative_to(root).as_posix()}/"
            if rel not in entries:
                bad.append(f"the layout has no entry for {rel}")
                continue
            bad += [f"the layout does not name {rel}{f.name}" for f in sorted(folder.glob("*.py"))
                    if f.name not in ("__init__.py", "__main__.py") and f"{rel}{f.name}" not in named
                    and f"{rel}{f.name}" not in own_yaml]
    return bad


def test_layout_matches_the_tree():
    """docs/architecture.md's layout block: every file and folder it names exists, and it names every module of
    harness/ and methods/ (package __init__.py and __main__.py aside; a method module a conf/method YAML names,
    and its light module, are documented by that YAML: configured_methods)."""
    bad = layout_problems(ROOT)
    assert not bad, "docs/architecture.md's layout is out of date:\n" + "\n".join(bad)


def test_layout_reader_catches_what_it_should(tmp_path):
    """A missing file, a module left out and a misplaced description name are reported; the good ones are not."""
    (tmp_path / "docs").mkdir()
    for f in ("harness/core/a.py", "harness/core/b.py", "harness/x.py", "harness/__init__.py", "methods/m.py"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("")
    (tmp_path / "docs" / "architecture.md").write_text(
        "### Where each thing lives\n\n```\n"
        "harness/\n"
        "  x.py                  the x, beside a.py\n"
        "  core/                 base\n"
        "    a.py, gone.py       two names\n"
        "methods/                m.py\n"
        "```\n")
    assert layout_problems(tmp_path) == [
        "the layout names harness/a.py, which does not exist",
        "the layout names harness/core/gone.py, which does not exist",
        "the layout does not name harness/core/b.py"]


def test_the_readme_recipe_for_a_method_needs_no_doc_edit(tmp_path):
    """README's "Add a method": methods/<name>.py plus conf/method/<name>.yaml, nothing else. A copy of the tree's
    layout-relevant files (docs/architecture.md, every module of harness/ and methods/, conf/method/) with exactly
    those two files added passes the layout check; the module alone, with no YAML naming it, does not."""
    import shutil

    (tmp_path / "docs").mkdir()
    shutil.copy(ARCHITECTURE, tmp_path / "docs" / "architecture.md")
    for top in LISTED:
        for f in (ROOT / top).rglob("*"):
            if f.is_file() and "__pycache__" not in f.parts:
                (tmp_path / f.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
                (tmp_path / f.relative_to(ROOT)).touch()
    shutil.copytree(ROOT / "conf", tmp_path / "conf")
    for f in ROOT.iterdir():  # the rest, as it is: paths the layout names (tasks/, results/, ...)
        if not (tmp_path / f.name).exists():
            (tmp_path / f.name).symlink_to(f)
    assert layout_problems(tmp_path) == layout_problems(ROOT)  # the copy reads as the tree does
    (tmp_path / "methods" / "recipe_method.py").write_text("class RandomSearch: ...\n")
    assert "the layout does not name methods/recipe_method.py" in layout_problems(tmp_path)
    (tmp_path / "conf" / "method" / "recipe_method.yaml").write_text(
        "_target_: methods.recipe_method.RandomSearch\nscale: 0.01\n")
    assert layout_problems(tmp_path) == layout_problems(ROOT)
    (tmp_path / "methods" / "recipe_method_config.py").write_text("METHOD_CONFIGS = {}\n")  # its light module too
    assert layout_problems(tmp_path) == layout_problems(ROOT)


def test_path_reader_finds_paths():
    assert repo_paths("see harness/core/flops.py. and conf/model/zoo-*.yaml, `tests/data/`; "
                      "not ../harness/x.py nor a/harness/y.py nor runs/<group>/") == [
        "conf/model/zoo-*.yaml", "harness/core/flops.py", "tests/data/"]


# ---- no tracker numbers: a reader of the code and docs does not have the tracker ----

ISSUE_NUMBER = re.compile(r"[Ii]ssues? #?[0-9]+")
NO_ISSUE_NUMBERS = ("harness", "methods", "conf", "docs", "README.md")
NOT_CHECKED = ("conf/task/", "docs/results/")  # conf/task/ has another owner; docs/results/ records history by date
KEPT: dict[str, tuple[str, ...]] = {}  # file -> lines allowed to cite a number (none today)


def issue_numbers(root: Path) -> list[str]:
    hits = []
    for top in NO_ISSUE_NUMBERS:
        files = [root / top] if (root / top).is_file() else sorted(p for p in (root / top).rglob("*") if p.is_file())
        for path in files:
            rel = path.relative_to(root).as_posix()
            if rel.startswith(NOT_CHECKED) or "__pycache__" in rel:
                continue
            data = path.read_bytes()
            if b"\0" in data:  # weights, images
                continue
            for n, line in enumerate(data.decode("utf-8", errors="replace").split("\n"), 1):
                if ISSUE_NUMBER.search(line) and not any(k in line for k in KEPT.get(rel, ())):
                    hits.append(f"{rel}:{n}: {line.strip()}")
    return hits


def test_no_issue_numbers_in_code_and_docs():
    """Comments, docstrings, YAML comments and Markdown state the reason or the source, not a tracker number."""
    hits = issue_numbers(ROOT)
    assert not hits, "tracker numbers (say what the issue said instead):\n" + "\n".join(hits)


def test_issue_number_check_catches_what_it_should(tmp_path):
    (tmp_path / "harness").mkdir()
    (tmp_path / "conf" / "task").mkdir(parents=True)
    (tmp_path / "harness" / "a.py").write_text("x = 1  # the fix (" + "issue 7)\n# see " + "Issues #12\n# no issue here\n")
    (tmp_path / "conf" / "task" / "t.yaml").write_text("# " + "issue 3\n")
    (tmp_path / "README.md").write_text("Fixed in " + "issue 40.\n")
    assert [h.split(": ")[0] for h in issue_numbers(tmp_path)] == ["harness/a.py:1", "harness/a.py:2", "README.md:1"]
