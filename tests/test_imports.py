"""The import graph keeps its layers, counting imports inside functions and under TYPE_CHECKING too.

    harness.core <- tasks (and tasks.judge), engines, evaluation      (a <- b: b imports a)
    tasks, engines <- methods                        (the runner builds methods by _target_, never imports one)
    evaluation <- reporting <- analysis <- runner <- tools            (tools alone import methods)

    python -m pytest tests/test_imports.py -q -s     # -s prints the package arrows
    python -m harness.tools.codemap                  # the same graph, with counts
"""
from harness.tools.codemap import find_cycle, graph, package_arrows, package_of, sources

LOWER = {"harness.core"}  # the base: imports no other package of the project


def test_no_import_cycles_between_modules():
    cycle = find_cycle(graph())
    assert cycle is None, " -> ".join(cycle)


def test_no_import_cycles_between_packages():
    arrows = package_arrows()
    for (a, b), n in sorted(arrows.items()):
        print(f"{a} -> {b} ({n})")
    packages = {}
    for a, b in arrows:
        packages.setdefault(a, set()).add(b)
    cycle = find_cycle(packages)
    assert cycle is None, " -> ".join(cycle)


def test_harness_imports_methods_only_from_its_tools():
    modules, edges = sources(), graph()
    wrong = sorted(f"{a} -> {b}" for a, deps in edges.items() for b in deps
                   if a.startswith("harness") and not a.startswith("harness.tools")
                   and package_of(b, modules) == "methods")
    assert not wrong, "engines and the runner must not import a method: " + ", ".join(wrong)


def test_core_and_tasks_stay_low():
    modules, edges = sources(), graph()
    for a, deps in edges.items():
        pa = package_of(a, modules)
        for b in deps:
            pb = package_of(b, modules)
            if pa in LOWER:
                assert pb in LOWER, f"{a} imports {b}: harness.core imports nothing above it"
            if pa == "tasks" or pa.startswith("tasks."):  # tasks/ and its tasks/judge/
                assert pb in LOWER or pb == "tasks" or pb.startswith("tasks."), \
                    f"{a} imports {b}: tasks use harness.core only"


def test_the_judge_imports_no_task():
    """tasks/judge/ judges answers for the tasks and never depends on one (nor on tasks.base)."""
    modules, edges = sources(), graph()
    wrong = sorted(f"{a} -> {b}" for a, deps in edges.items() for b in deps
                   if package_of(a, modules) == "tasks.judge" and package_of(b, modules) != "tasks.judge"
                   and package_of(b, modules) not in LOWER)
    assert not wrong, "the judge must not import the tasks: " + ", ".join(wrong)


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
