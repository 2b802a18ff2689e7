"""The code's shape, measured: package-level import arrows, cycles, the largest file and function.

    python -m harness.tools.codemap                   # this checkout
    python -m harness.tools.codemap --root /tmp/old   # another checkout (e.g. a git worktree of an old commit)
    python -m harness.tools.codemap --lines 'methods/es*.py'   # lines of code of some files

Imports are read from the source (ast), those inside functions and under `if TYPE_CHECKING:`
included: an import that only runs for type checkers still ties the two modules together for a
reader. A module's package is its folder (harness.core, methods, ...); tests/test_imports.py holds
the rules the arrows must keep.
"""
from __future__ import annotations

import argparse
import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("harness", "methods", "tasks")


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(module: str, modules: dict) -> str:
    """A module's folder: harness.core.policy -> harness.core; a package's __init__ is its own package."""
    path = modules[module]
    return module if path.name == "__init__.py" else module.rpartition(".")[0] or module


def sources(root: Path = ROOT) -> dict[str, Path]:
    files = [p for pkg in PACKAGES for p in (root / pkg).rglob("*.py") if "checkpoints" not in p.parts]
    return {module_name(root, p): p for p in sorted(files)}


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the project modules it imports (anywhere in its source)."""
    modules = sources(root)
    edges = {}
    for name, path in modules.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       # `from methods import es` names a module; `from x.y import f` a name in x.y
                       else [f"{node.module}.{a.name}" for a in node.names]
                       if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
            for t in targets:
                while t and t not in modules:  # `from harness.x import y`: the module is harness.x
                    t = t.rpartition(".")[0]
                if t and t != name and t not in PACKAGES:
                    deps.add(t)
        edges[name] = deps
    return edges


def package_arrows(root: Path = ROOT) -> Counter:
    """(from package, to package) -> number of module-to-module imports."""
    modules, edges = sources(root), graph(root)
    out = Counter()
    for a, deps in edges.items():
        for b in deps:
            pa, pb = package_of(a, modules), package_of(b, modules)
            if pa != pb:
                out[(pa, pb)] += 1
    return out


def find_cycle(edges: dict) -> list | None:
    state, stack = {}, []

    def visit(n):
        state[n] = "open"
        stack.append(n)
        for m in sorted(edges.get(n, ())):
            if state.get(m) == "open":
                return stack[stack.index(m):] + [m]
            if m not in state and (c := visit(m)):
                return c
        state[n] = "done"
        stack.pop()
        return None
    for n in sorted(edges):
        if n not in state and (c := visit(n)):
            return c
    return None


def largest(root: Path = ROOT) -> tuple[tuple[int, str], tuple[int, str]]:
    """((lines, file), (lines, function)) of the largest file and function (tests excluded)."""
    files, funcs = [], []
    for name, path in sources(root).items():
        text = path.read_text()
        files.append((len(text.splitlines()), str(path.relative_to(root))))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                funcs.append((node.end_lineno - node.lineno + 1, f"{name}.{node.name}"))
    return max(files), max(funcs)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=ROOT)
    ap.add_argument("--lines", nargs="*", help="glob(s) under root: print their line counts and the total")
    a = ap.parse_args(argv)
    if a.lines:
        paths = sorted({p for g in a.lines for p in a.root.glob(g)})
        for p in paths:
            print(f"{len(p.read_text().splitlines()):6d}  {p.relative_to(a.root)}")
        print(f"{sum(len(p.read_text().splitlines()) for p in paths):6d}  total")
        return
    modules, edges = sources(a.root), graph(a.root)
    packages = sorted({package_of(m, modules) for m in modules})
    print(f"{len(modules)} modules in {len(packages)} packages: {', '.join(packages)}")
    print("package arrows (module imports):")
    arrows = package_arrows(a.root)
    for (pa, pb), n in sorted(arrows.items()):
        back = " <- cycle" if (pb, pa) in arrows else ""
        print(f"  {pa} -> {pb}  ({n}){back}")
    cycle = find_cycle(edges)
    print("module cycle:", " -> ".join(cycle) if cycle else "none")
    (fl, fname), (gl, gname) = largest(a.root)
    print(f"largest file: {fname} ({fl} lines); largest function: {gname} ({gl} lines)")


if __name__ == "__main__":
    main()
