"""The project's import graph has no cycles, counting imports hidden inside functions too: data flows
one way, cli -> experiment -> run -> (method, evaluation) -> records -> reporting.

    python -m pytest tests/test_imports.py -q -s     # -s prints the graph, one line per module
"""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("harness", "methods", "tasks")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def strip_type_checking(tree: ast.Module) -> ast.Module:
    """Drop `if TYPE_CHECKING:` blocks: imports for annotations only never run, so cannot cycle."""
    tree.body = [n for n in tree.body if not (isinstance(n, ast.If) and getattr(n.test, "id", None) == "TYPE_CHECKING")]
    return tree


def graph() -> dict[str, set[str]]:
    files = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if "checkpoints" not in p.parts]
    modules = {module_name(p): p for p in files}
    edges = {}
    for name, path in modules.items():
        deps = set()
        for node in ast.walk(strip_type_checking(ast.parse(path.read_text()))):
            targets = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       # `from methods import es_population` names a module; `from x.y import f` a name in x.y
                       else [f"{node.module}.{a.name}" for a in node.names]
                       if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
            for t in targets:
                while t and t not in modules:  # `from harness.x import y`: the module is harness.x
                    t = t.rpartition(".")[0]
                if t and t != name and t not in PACKAGES:
                    deps.add(t)
        edges[name] = deps
    return edges


def find_cycle(edges):
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


def test_no_import_cycles():
    edges = graph()
    for n in sorted(edges):
        print(f"{n} -> {', '.join(sorted(edges[n])) or '-'}")
    assert find_cycle(edges) is None, " -> ".join(find_cycle(edges))


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
