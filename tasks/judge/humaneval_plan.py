"""How HumanEval's `check(candidate)` is judged: which of its statements become value tests judged
in the harness, and which must run inside the sandbox.

`plan(test, entry_point)` reads each `check` body with `ast`:
- `assert <call> == <expected>` and the other shapes mbpp_judge.plan splits, and
  `assert abs(<call> - <expected>) < tol` (also `<=`, `math.fabs`), are judged by value when the
  value side names only `candidate` and builtins. A literal expected value is read here; an
  expected expression of builtins and stdlib only is left PENDING (its `expected_src` is computed
  in a clean sandbox run by the task);
- a loop `for x in range(<ints>)` of such asserts is unrolled, and a name bound once to a pure
  expression of literals and builtins is substituted into the asserts that read it;
- statements that cannot fail (`assert True`, a bare `print`, docstrings) are dropped;
- a loop of random inputs whose only use of the candidate is a last `assert candidate(<args>) ==
  <expected>` also gets a sampler (`Plan.sample`), a function that records each call's arguments
  and expected value instead; `sampled_checks` turns what it recorded into value tests;
- everything else runs together, in order, inside the sandbox as one function.

tasks/humaneval.py's module docstring states the rules for readers of the task; this module holds
them, with nothing but mbpp_judge's checks, so the judge can be read (and tested) alone.

    python -m pytest tests/test_task_humaneval.py -q
"""
from __future__ import annotations

import ast
import builtins
import copy
import operator
import textwrap
from dataclasses import dataclass

from tasks.judge import mbpp_judge

_BUILTINS = frozenset(dir(builtins))
_STDLIB = frozenset(__import__("sys").stdlib_module_names)
# Calls a substituted name may hold: builtins without side effects, so evaluating the expression
# at each use equals evaluating it once (a Random(42) or an input() would not).
_PURE = frozenset({"abs", "all", "any", "bool", "chr", "dict", "divmod", "enumerate", "filter",
                   "float", "frozenset", "int", "len", "list", "map", "max", "min", "ord", "pow",
                   "range", "reversed", "round", "set", "sorted", "str", "sum", "tuple", "zip"})
MAX_UNROLL = 50  # iterations of a `for x in range(...)` of asserts unrolled into value tests
_BUNDLE = "_esbench_check"  # the in-sandbox check function; not `check`, which a candidate may use
SAMPLER, _RECORD = "_esbench_sample", "_esbench_record"
SAMPLE_SEED = 0  # random.seed for the clean run that samples random-input tests


@dataclass(frozen=True)
class Plan:
    """How one problem is judged: `checks` in order (outside: a value judged here; inside: the
    statements no value test covers, run as one function in the sandbox), the sandbox `setup`
    (the test module's top level without `check`, then `candidate = <entry_point>`), and the
    check-body statements judged inside (`inside_statements`, 0 when judged wholly by value)."""

    checks: tuple[mbpp_judge.Check, ...]
    setup: str
    inside_statements: int
    sample: str | None = None  # the inside statements as a sampler (see _sampler), else None

    @property
    def by_value(self) -> bool:
        return all(c.outside for c in self.checks)


@dataclass(frozen=True)
class AbsClose:
    """`abs(value - expected) < tol` (or `<=`), the test's own tolerance, applied here."""

    tol: float
    strict: bool = True

    def __call__(self, value, expected) -> bool:
        gap = abs(value - expected)
        return bool(gap < self.tol if self.strict else gap <= self.tol)


def check_def(tree: ast.Module) -> ast.FunctionDef | None:
    """The test's `def check(candidate)` (the last one, as Python would bind it), or None."""
    found = None
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == "check":
            a = stmt.args
            if len(a.posonlyargs) + len(a.args) == 1 and not (a.vararg or a.kwarg
                                                              or a.kwonlyargs):
                found = stmt
            else:
                found = None
    return found


# ---- planning a check body ----

def plan(test: str, entry_point: str) -> Plan:
    """How one problem's `check(candidate)` is judged (unresolved: an expected expression waits
    for its clean sandbox run, HumanEval.plan in tasks/humaneval.py). See the module docstring."""
    tree = ast.parse(test)
    check_fn = check_def(tree)
    others = [s for s in tree.body if s is not check_fn]
    setup = (ast.unparse(ast.Module(others, [])) + "\n" if others else "") \
        + f"candidate = {entry_point}\n"
    arg = (check_fn.args.posonlyargs + check_fn.args.args)[0].arg
    body = [_rename(s, arg) for s in check_fn.body] if arg != "candidate" else check_fn.body
    body = _substitute_lets(body)
    statements = []  # (stmt, Check | None): None = judged inside
    for stmt in body:
        if _no_op(stmt):
            continue
        unrolled = _unroll(stmt)
        if unrolled is not None:
            statements += [(s, _outside(s)) for s in unrolled]
        else:
            statements.append((stmt, _outside(stmt)))
    # A name the inside statements bind is local to check() everywhere in it (Python's scoping),
    # so a value test that reads it must run inside too; repeat until nothing moves.
    while True:
        bound = _bound({id(s) for s, c in statements if c is None}, statements)
        moved = [(s, None if c is not None and _reads(c) & bound else c) for s, c in statements]
        if moved == statements:
            break
        statements = moved
    statements = _drop_unused_lets(statements)
    checks, inside, bundle_at = [], [s for s, c in statements if c is None], None
    for s, c in statements:
        if c is None:
            if bundle_at is None:
                bundle_at = len(checks)
                checks.append(_bundle(inside))
        else:
            checks.append(c)
    return Plan(tuple(checks), setup, len(inside), _sampler(inside))


def _sampler(inside: list[ast.stmt]) -> str | None:
    """The inside statements as a function that returns [(args, expected), ...] instead of
    calling the candidate, when every use of the candidate in them is the last statement of a
    `for` loop, `assert candidate(<args>) == <expected>` with no candidate in args or expected;
    else None. Its clean, seeded run turns a random-input loop into fixed value tests."""
    out, found = [], False
    for stmt in inside:
        if "candidate" not in mbpp_judge.free_names(stmt):
            out.append(stmt)
            continue
        if not (isinstance(stmt, ast.For) and stmt.body and not stmt.orelse):
            return None
        *head, last = stmt.body
        call = getattr(getattr(last, "test", None), "left", None)
        if not (isinstance(last, ast.Assert) and isinstance(last.test, ast.Compare)
                and len(last.test.ops) == 1 and isinstance(last.test.ops[0], ast.Eq)
                and isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                and call.func.id == "candidate" and not call.keywords
                and not any(isinstance(a, ast.Starred) for a in call.args)
                and "candidate" not in set().union(*(mbpp_judge.free_names(a) for a in call.args),
                                                    mbpp_judge.free_names(last.test.comparators[0]))
                and not any("candidate" in mbpp_judge.free_names(h) for h in head)
                and "candidate" not in mbpp_judge.free_names(stmt.iter)):
            return None
        record = ast.parse(f"{_RECORD}.append(((), None))").body[0]
        record.value.args[0].elts = [ast.Tuple(list(call.args), ast.Load()),
                                     last.test.comparators[0]]
        loop = copy.copy(stmt)
        loop.body = [*head, ast.fix_missing_locations(record)]
        out.append(loop)
        found = True
    if not found:
        return None
    lines = "\n".join(ast.unparse(s) for s in [ast.parse(f"{_RECORD} = []").body[0], *out])
    return (f"def {SAMPLER}():\n{textwrap.indent(lines, '    ')}\n"
            f"    return {_RECORD}\n")


def sampled_checks(pairs) -> list[mbpp_judge.Check] | None:
    """[(args, expected), ...] from the sampler's clean run as value tests, or None unless every
    argument is plain data whose repr reads back as the same value."""
    if not isinstance(pairs, list) or not pairs:
        return None
    checks = []
    for pair in pairs:
        if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], tuple)):
            return None
        try:
            if any(type(ast.literal_eval(repr(a))) is not type(a) or ast.literal_eval(repr(a)) != a
                   for a in pair[0]):
                return None
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None
        call = f"candidate({', '.join(repr(a) for a in pair[0])})"
        checks.append(mbpp_judge.Check(call, True, operator.eq, pair[1], test=call))
    return checks


def _rename(stmt: ast.stmt, arg: str) -> ast.stmt:
    """`def check(f)` reads the candidate as `f`: call it `candidate` like the other 163."""
    class Rename(ast.NodeTransformer):
        def visit_Name(self, node):
            return ast.copy_location(ast.Name("candidate", node.ctx), node) \
                if node.id == arg else node
    return ast.fix_missing_locations(Rename().visit(copy.deepcopy(stmt)))


def _no_op(stmt: ast.stmt) -> bool:
    """A statement that cannot fail: a docstring or constant, a bare builtin name (`print`),
    `pass`, or an assert of a true literal (`assert True, "..."`)."""
    if isinstance(stmt, ast.Pass):
        return True
    if isinstance(stmt, ast.Expr):
        v = stmt.value
        return isinstance(v, ast.Constant) or (isinstance(v, ast.Name) and v.id in _BUILTINS)
    if isinstance(stmt, ast.Assert):
        value = mbpp_judge.literal(stmt.test)
        try:
            return value is not mbpp_judge._MISSING and bool(value)
        except Exception:  # noqa: BLE001 - a literal's bool() does not raise, but be sure
            return False
    return False


def _value_ok(node: ast.AST) -> bool:
    """A value side the sandbox may evaluate: it calls the candidate and reads nothing but
    builtins, so no expected value and no name of the test's own hides in it."""
    names = mbpp_judge.free_names(node)
    return "candidate" in names and names <= _BUILTINS | {"candidate"}


def _outside(stmt: ast.stmt) -> mbpp_judge.Check | None:
    """The statement as a value test judged here, or None when it must run inside."""
    if not isinstance(stmt, ast.Assert):
        return None
    src = ast.unparse(ast.Assert(stmt.test))  # the message never matters to the verdict
    check = _abs_close(src, stmt.test) or mbpp_judge.plan(src)
    if not check.outside or not _value_ok(ast.parse(check.src, mode="eval")):
        return None
    return check


def _abs_close(src: str, test: ast.AST) -> mbpp_judge.Check | None:
    """`abs(a - b) < tol` (or `<=`, `math.fabs`): the side that calls the candidate runs in the
    sandbox alone, the other is the expected value, the tolerance is applied here."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], (ast.Lt, ast.LtE))):
        return None
    call, tol = test.left, mbpp_judge.literal(test.comparators[0])
    func = getattr(call, "func", None)
    named = (isinstance(func, ast.Name) and func.id == "abs") or (
        isinstance(func, ast.Attribute) and func.attr == "fabs"
        and isinstance(func.value, ast.Name) and func.value.id == "math")
    if not (named and len(call.args) == 1 and not call.keywords
            and isinstance(call.args[0], ast.BinOp) and isinstance(call.args[0].op, ast.Sub)
            and isinstance(tol, (int, float)) and not isinstance(tol, bool)):
        return None
    a, b = call.args[0].left, call.args[0].right
    value, expected = (a, b) if "candidate" in mbpp_judge.free_names(a) else (b, a)
    if "candidate" in mbpp_judge.free_names(expected):
        return None
    op = AbsClose(float(tol), isinstance(test.ops[0], ast.Lt))
    found = mbpp_judge.literal(expected)
    if found is not mbpp_judge._MISSING:
        if not isinstance(found, (int, float, complex)):
            return None
        return mbpp_judge.Check(ast.unparse(value), True, op, found, test=src)
    if not mbpp_judge.free_names(expected) <= _BUILTINS | _STDLIB:
        return None
    return mbpp_judge.Check(ast.unparse(value), True, op, mbpp_judge.PENDING,
                            expected_src=ast.unparse(expected), test=src)


def _reads(check: mbpp_judge.Check) -> set[str]:
    srcs = [check.src] + ([check.expected_src] if check.expected_src else [])
    return set().union(*(mbpp_judge.free_names(ast.parse(s, mode="eval")) for s in srcs))


def _stored(node: ast.AST) -> set[str]:
    """Names a statement binds anywhere (assignment, loop, import, def, walrus, except)."""
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)
             and isinstance(n.ctx, (ast.Store, ast.Del))}
    for n in ast.walk(node):
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            names.add(n.name)
    return names


def _bound(inside_ids: set[int], statements: list) -> set[str]:
    return set().union(*(_stored(s) for s, _ in statements if id(s) in inside_ids))


def _bundle(statements: list[ast.stmt]) -> mbpp_judge.Check:
    """The statements no value test covers, in order, as one function run in the sandbox."""
    lines = "\n".join(ast.unparse(s) for s in statements)
    src = (f"def {_BUNDLE}(candidate):\n{textwrap.indent(lines, '    ')}\n"
           f"{_BUNDLE}(candidate)\ndel {_BUNDLE}\n")
    return mbpp_judge.Check(src, False, test=src)


# ---- loops and names that hold plain data ----

def _unroll(stmt: ast.stmt) -> list[ast.stmt] | None:
    """`for x in range(<ints>)` whose body is asserts that only read `x`: the asserts, once per
    value of x with x written in; None for any other statement or if some unrolled assert could
    not be judged by value (then the loop runs inside as written)."""
    if not (isinstance(stmt, ast.For) and isinstance(stmt.target, ast.Name) and not stmt.orelse
            and isinstance(stmt.iter, ast.Call) and isinstance(stmt.iter.func, ast.Name)
            and stmt.iter.func.id == "range" and not stmt.iter.keywords
            and all(isinstance(s, ast.Assert) for s in stmt.body)):
        return None
    bounds = [mbpp_judge.literal(a) for a in stmt.iter.args]
    if not 1 <= len(bounds) <= 3 or not all(type(b) is int for b in bounds):
        return None
    values = range(*bounds)
    name = stmt.target.id
    if len(values) > MAX_UNROLL or any(name in _stored(s) for s in stmt.body):
        return None
    out = [_put(s, {name: ast.Constant(v)}) for v in values for s in stmt.body]
    return out if all(_outside(s) is not None for s in out) else None


def _put(stmt: ast.stmt, values: dict[str, ast.expr]) -> ast.stmt:
    """A copy of `stmt` with each name in `values` read replaced by its expression."""
    class Put(ast.NodeTransformer):
        def visit_Name(self, node):
            if isinstance(node.ctx, ast.Load) and node.id in values:
                return ast.copy_location(copy.deepcopy(values[node.id]), node)
            return node
    return ast.fix_missing_locations(Put().visit(copy.deepcopy(stmt)))


def _pure(expr: ast.expr, known: set[str]) -> bool:
    """Literals, operators, comprehensions and calls of _PURE builtins only, reading no name but
    those and `known` ones (names already substituted)."""
    for node in ast.walk(expr):
        if isinstance(node, (ast.Call)) and not (isinstance(node.func, ast.Name)
                                                 and node.func.id in _PURE):
            return False
        if isinstance(node, (ast.Attribute, ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr,
                             ast.Lambda)):
            return False
    return mbpp_judge.free_names(expr) <= (_PURE | known)


def _substitute_lets(body: list[ast.stmt]) -> list[ast.stmt]:
    """`name = <pure expression>` at the top of check(), bound nowhere else in it: its reads in
    later statements become the expression, so tests that read it can be judged by value. The
    assignment stays, marked `_esbench_let`; it is dropped unless an inside statement reads it."""
    stored_count: dict[str, int] = {}
    for stmt in body:
        for name in _stored(stmt):
            stored_count[name] = stored_count.get(name, 0) + 1
    lets: dict[str, ast.expr] = {}
    out = []
    for stmt in body:
        stmt = _put(stmt, lets) if lets and not (_stored(stmt) & lets.keys()) else stmt
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
                and stored_count[stmt.targets[0].id] == 1
                and stmt.targets[0].id not in _BUILTINS and _pure(stmt.value, set(lets))):
            lets[stmt.targets[0].id] = stmt.value
            stmt._esbench_let = True  # noqa: SLF001 - a mark read by _drop_unused_lets
        out.append(stmt)
    return out


def _drop_unused_lets(statements: list) -> list:
    """Substituted assignments that no inside statement reads (all their readers are value
    tests now, or there are none) have nothing left to do."""
    needed = set()
    for s, c in statements:
        if c is None and not getattr(s, "_esbench_let", False):
            needed |= {n.id for n in ast.walk(s) if isinstance(n, ast.Name)}
    return [(s, c) for s, c in statements
            if not (getattr(s, "_esbench_let", False) and s.targets[0].id not in needed)]
