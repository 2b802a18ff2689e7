"""Judge MBPP tests in the harness, so a candidate cannot pass one without producing its value.

Most MBPP tests have the shape `assert <call> <op> <expected>` (`==`, `!=`, `<`, `in`, `is None`,
...), `assert math.isclose(<call>, <expected>, rel_tol=...)`, `assert <f>(<args>)` or
`assert not <f>(<args>)`. `plan(test)` parses each test with `ast` into a Check: the sandbox
evaluates only the call expression (tasks/judge/mbpp_runner.py) and returns its value as tagged JSON;
`decode` rebuilds plain Python values (never eval) and the Check applies the test's own
comparison here. `<expected>` is a literal or a builtin constructor of literals (`set([1, 2])`),
read here; or an expression of builtins, stdlib modules and the row's setup names only
(`sys.getsizeof((1, 2))`), which the task computes once per row in a clean sandbox run without
the candidate (`Check.expected_src`, then `resolve`). The expected value never enters the
candidate's sandbox, nothing the candidate prints is read, a forged result can only claim a value,
and an object whose `__eq__` always returns True arrives as the plain data it holds (or fails as
unserialisable). A test of any other shape (or whose expected side needs the candidate's own
names) falls back to running as a statement in the sandbox, as the original MBPP harness did;
`Check.outside` says which way a test is judged.

The judge has limits of its own (`Limits`), because rebuilding a value costs the harness's time:
a candidate's set of ints that all share one plain-int hash (`k * (2**61 - 1)`) builds in linear
time in the sandbox under its own cheap `__hash__` but in quadratic time here (40k items: over a
minute). `decode` therefore counts items, nesting depth and int digits before building anything,
refuses a set or dict whose items pile onto one hash before building it, and checks a wall-clock
deadline as it goes (plain arithmetic, so it works on any thread; no signal). What it cannot
interrupt, the comparison afterwards, is bounded by those same limits. Over a limit the completion
scores 0 and `Verdict.reason`/`Verdict.limit` say why.

`degenerate(checks)` is true when one value passes every test of a row (the value the prompt
shows, say), so `def f(*a, **k): return <value>` would score; the task leaves such rows out.

    python -m pytest tests/test_task_mbpp.py tests/test_mbpp_judge_limits.py -q
"""
from __future__ import annotations

import ast
import builtins
import math
import operator
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from tasks.judge import mbpp_runner

_OPS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_,
        ast.IsNot: operator.is_not, ast.In: lambda a, b: a in b,
        ast.NotIn: lambda a, b: a not in b}  # each f(left, right) as written in the test
_CONSTRUCTORS = {"set": set, "frozenset": frozenset, "tuple": tuple, "list": list,
                 "sorted": sorted, "dict": dict, "float": float, "int": int, "str": str,
                 "complex": complex, "bool": bool}
_CLEAN_NAMES = frozenset(dir(builtins)) | frozenset(sys.stdlib_module_names)
_MISSING = object()
PENDING = None  # Check.expected while expected_src waits for its clean sandbox run


@dataclass(frozen=True)
class Limits:
    """What the judge rebuilds from one completion's values, and for how long.

    items, depth: nodes (all containers and scalars together) in one value, and nesting; the
        runner refuses to send more (mbpp_runner.MAX_NODES, MAX_DEPTH), the judge re-checks.
        MBPP's largest expected value has 257 nodes, depth 3.
    int_hex_digits: one int's size (10,000 hex digits ~ 12,000 decimal); MBPP's largest: 46.
    chars: characters of all strs and bytes in one value together.
    same_hash: items of one set, frozenset or dict sharing one hash; honest values have 1-2.
    seconds: judge wall clock per completion, checked while decoding and between tests.
    """

    items: int = mbpp_runner.MAX_NODES
    depth: int = mbpp_runner.MAX_DEPTH
    int_hex_digits: int = mbpp_runner.MAX_INT_HEX_DIGITS
    chars: int = 1_000_000
    same_hash: int = 32
    seconds: float = 2.0


LIMITS = Limits()


class OverLimit(ValueError):
    """A value beyond the judge's Limits; `kind` names the limit (items, depth, int_digits,
    chars, same_hash, time)."""

    def __init__(self, kind: str, detail: str):
        super().__init__(f"judge limit ({kind}): {detail}")
        self.kind = kind


@dataclass(frozen=True)
class Check:
    """One test: `src` is what the sandbox runs (an expression when `outside`, else the whole
    test as a statement); the rest, kept here, decides whether the returned value passes.
    `expected_src`, when set, is the expected side as an expression to compute in a clean
    sandbox run (`expected` is PENDING until `resolve` fills it in)."""

    src: str
    outside: bool
    op: Any = None  # value -> expected -> bool, or None for a statement run inside
    expected: Any = None
    value_first: bool = True  # `value op expected`, else `expected op value`
    kwargs: dict = field(default_factory=dict)
    expected_src: str | None = None
    test: str = ""  # the test as written, to fall back to when expected_src cannot be computed

    def item(self) -> dict:
        """What the sandbox gets: never `expected`."""
        return {"kind": "value" if self.outside else "assert", "src": self.src}

    def accepts_value(self, value) -> bool:
        """Whether a decoded (plain) value passes this test."""
        if self.expected_src is not None:
            raise ValueError(f"expected value of {self.test!r} not computed yet; resolve() it")
        try:
            if self.op == "isclose":
                return _is_number(value) and math.isclose(value, self.expected, **self.kwargs)
            args = (value, self.expected) if self.value_first else (self.expected, value)
            return bool(self.op(*args))
        except (TypeError, ValueError, ArithmeticError, RecursionError, MemoryError):
            return False

    def accepts(self, record: dict, limits: Limits = LIMITS, deadline: float | None = None) -> bool:
        """Whether the sandbox's record for this test passes it; OverLimit past the limits."""
        if not self.outside:
            return record.get("passed") is True
        if "value" not in record:
            return False
        try:
            value = decode(record["value"], limits, deadline)
        except OverLimit:
            raise
        except (TypeError, ValueError, ArithmeticError, RecursionError, MemoryError):
            return False
        return self.accepts_value(value)



_AST_LOCK = threading.Lock()


def _parse(source: str, mode: str = "exec") -> ast.AST:
    """ast.parse under one lock: the judge plans tests from several threads, and CPython 3.11's AST
    conversion keeps its recursion depth in shared state, so concurrent parses failed at random with
    "SystemError: AST constructor recursion depth mismatch" (gh-106905)."""
    with _AST_LOCK:
        return ast.parse(source, mode=mode)

def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def literal(node: ast.AST):
    """The value of a literal, or of a builtin constructor applied to literals; _MISSING if the
    node is anything else. Only ever builds plain values from the dataset's own test text."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in _CONSTRUCTORS and not node.keywords and len(node.args) <= 2):
        args = [literal(a) for a in node.args]
        if all(a is not _MISSING for a in args):
            try:
                return _CONSTRUCTORS[node.func.id](*args)
            except (TypeError, ValueError, OverflowError):
                return _MISSING
    return _MISSING


def free_names(node: ast.AST) -> set[str]:
    """Names an expression reads that it does not bind itself (comprehension or lambda
    variables)."""
    bound = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)
             and isinstance(n.ctx, ast.Store)}
    bound |= {a.arg for n in ast.walk(node) if isinstance(n, ast.arguments)
              for a in (*n.posonlyargs, *n.args, *n.kwonlyargs, n.vararg, n.kwarg) if a}
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Load)} - bound


def _clean(node: ast.AST, setup_names: frozenset) -> bool:
    """True when the expression needs no candidate code: only builtins, stdlib modules and
    names the row's setup code defines."""
    return free_names(node) <= _CLEAN_NAMES | setup_names


def _segment(src: str, node: ast.AST) -> str:
    return ast.get_source_segment(src, node) or ast.unparse(node)


def _expected_side(src: str, a: ast.AST, b: ast.AST, setup_names: frozenset):
    """(expected, expected_src, value node, value_first) for `a ? b`, or None: a literal side
    first, else a side computable without the candidate (right before left)."""
    for exp, val, value_first in ((b, a, True), (a, b, False)):
        found = literal(exp)
        if found is not _MISSING:
            return found, None, val, value_first
    for exp, val, value_first in ((b, a, True), (a, b, False)):
        if _clean(exp, setup_names):
            return PENDING, _segment(src, exp), val, value_first
    return None


def _compare(src: str, test: ast.AST, setup_names: frozenset) -> Check | None:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _OPS):
        return None
    op = _OPS[type(test.ops[0])]
    side = _expected_side(src, test.left, test.comparators[0], setup_names)
    if side is None:
        return None
    expected, expected_src, value_node, value_first = side
    if expected_src is None and not _identity_ok(op, expected):
        return None
    return Check(_segment(src, value_node), True, op, expected, value_first,
                 expected_src=expected_src, test=src)


def _identity_ok(op, expected) -> bool:
    """Identity of anything but a singleton means nothing across processes."""
    return op not in (operator.is_, operator.is_not) or isinstance(expected, (bool, type(None)))


def _isclose(src: str, test: ast.AST, setup_names: frozenset) -> Check | None:
    func = getattr(test, "func", None)
    named = (isinstance(func, ast.Attribute) and func.attr == "isclose"
             and isinstance(func.value, ast.Name) and func.value.id in ("math", "cmath")) \
        or (isinstance(func, ast.Name) and func.id == "isclose")
    if not (named and len(test.args) == 2 and all(k.arg for k in test.keywords)):
        return None
    kwargs = {k.arg: literal(k.value) for k in test.keywords}
    if any(v is _MISSING for v in kwargs.values()) or not kwargs.keys() <= {"rel_tol", "abs_tol"}:
        return None
    side = _expected_side(src, *test.args, setup_names)
    if side is None:
        return None
    expected, expected_src, value_node, _ = side
    if expected_src is None and not _is_number(expected):
        return None
    return Check(_segment(src, value_node), True, "isclose", expected, True, kwargs,
                 expected_src=expected_src, test=src)


def _truth(src: str, test: ast.AST) -> Check | None:
    """`assert f(x)` / `assert not f(x)`: only a call of a plain name on literal or name
    arguments, so no expected value hides in the part the sandbox evaluates."""
    negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    call = test.operand if negated else test
    simple = lambda a: literal(a) is not _MISSING or isinstance(a, ast.Name)  # noqa: E731
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
            and all(simple(a) for a in call.args)
            and all(k.arg and simple(k.value) for k in call.keywords)):
        return None
    return Check(f"bool({_segment(src, call)})", True, operator.eq, not negated, test=src)


def plan(test: str, setup_names: frozenset = frozenset()) -> Check:
    """How one MBPP test is judged: split into call + comparison when its shape allows, else run
    as a statement inside the sandbox. `setup_names`: names the row's setup code defines, which
    an expected expression may use."""
    try:
        tree = _parse(test)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return Check(test, False, test=test)
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        return Check(test, False, test=test)
    node = tree.body[0].test
    return (_compare(test, node, setup_names) or _isclose(test, node, setup_names)
            or _truth(test, node) or Check(test, False, test=test))


def setup_names(setup: str) -> frozenset:
    """Names a row's setup code binds at top level (none if it does not parse)."""
    try:
        tree = _parse(setup or "")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return frozenset()
    return frozenset(n.id for stmt in tree.body for n in ast.walk(stmt)
                     if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))


def modules_named(checks: list[Check]) -> list[str]:
    """Stdlib modules the checks' expected expressions name, for the clean run to import (the
    original harness found them in the candidate's namespace)."""
    names = set()
    for c in checks:
        if c.expected_src is not None:
            names |= free_names(_parse(c.expected_src, mode="eval"))
    return sorted(n for n in names if n in sys.stdlib_module_names and not hasattr(builtins, n))


def resolve(check: Check, record: dict | None, limits: Limits = LIMITS) -> Check:
    """A Check whose expected expression was computed by a clean sandbox run (`record` is that
    run's record for it): the value filled in, or, when the run gave none (the expression needs
    the candidate's names, or raised), the test as a statement judged inside."""
    if check.expected_src is None:
        return check
    try:
        expected = decode(record["value"], limits) if record and "value" in record else _MISSING
    except (TypeError, ValueError, ArithmeticError, RecursionError, MemoryError):
        expected = _MISSING
    ok = expected is not _MISSING and _identity_ok(check.op, expected) \
        and (check.op != "isclose" or _is_number(expected))
    if not ok:
        return Check(check.test, False, test=check.test)
    return replace(check, expected=expected, expected_src=None)


def degenerate(checks: list[Check]) -> bool:
    """True when one value passes every test: all judged outside, and some test's expected value
    passes all of them (so a function returning that constant scores)."""
    if not checks or not all(c.outside and c.expected_src is None for c in checks):
        return False
    return any(all(c.accepts_value(e) for c in checks) for e in (c.expected for c in checks))


# ---- decoding, within limits ----

class _Budget:
    """Items left and the deadline for one completion, shared by all its values."""

    def __init__(self, limits: Limits, deadline: float | None):
        self.limits, self.left, self.chars = limits, limits.items, limits.chars
        self.deadline = deadline if deadline is not None else time.monotonic() + limits.seconds

    def spend(self, depth: int) -> None:
        self.left -= 1
        if self.left < 0:
            raise OverLimit("items", f"a value has more than {self.limits.items} items")
        if depth > self.limits.depth:
            raise OverLimit("depth", f"a value is nested deeper than {self.limits.depth}")
        if self.left % 1024 == 0:
            self.check_time()

    def spend_chars(self, n: int) -> None:
        self.chars -= n
        if self.chars < 0:
            raise OverLimit("chars", f"a value holds more than {self.limits.chars} characters")

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise OverLimit("time", f"judging took more than {self.limits.seconds} s")


def decode(tagged, limits: Limits = LIMITS, deadline: float | None = None):
    """Tagged JSON from mbpp_runner.encode -> plain value; ValueError for anything malformed,
    OverLimit (a ValueError) past `limits`, raised before the oversized part is built."""
    return _decode(tagged, 0, _Budget(limits, deadline))


def _decode(tagged, depth: int, budget: _Budget):
    budget.spend(depth)
    if not (isinstance(tagged, list) and len(tagged) == 2 and isinstance(tagged[0], str)):
        raise ValueError("malformed value")
    tag, payload = tagged
    if tag == "k":
        return payload if payload is None or isinstance(payload, bool) else _bad("constant")
    if tag == "i" and isinstance(payload, str):
        return _int(payload, budget.limits)
    scalar = _DECODERS.get(tag)
    if scalar and isinstance(payload, str):
        budget.spend_chars(len(payload))
        return scalar(payload)
    if tag == "c" and isinstance(payload, list) and len(payload) == 2:
        return complex(float(payload[0]), float(payload[1]))
    if not isinstance(payload, list):
        raise ValueError(f"malformed {tag!r} value")
    if tag == "d":
        if not all(isinstance(kv, list) and len(kv) == 2 for kv in payload):
            _bad("dict")
        spread = _Spread(budget.limits)
        pairs = [(spread.add(_decode(k, depth + 1, budget)), _decode(v, depth + 1, budget))
                 for k, v in payload]
        return dict(pairs)
    container = _CONTAINERS.get(tag)
    if container is None:
        raise ValueError(f"unknown tag {tag!r}")
    if container in (set, frozenset):
        spread = _Spread(budget.limits)
        return container([spread.add(_decode(v, depth + 1, budget)) for v in payload])
    return container(_decode(v, depth + 1, budget) for v in payload)


class _Spread:
    """Counts the hashes of a set's or dict's keys as they are decoded, and refuses keys that pile
    onto one hash before the set or dict is built: there each such key would be compared with
    every earlier one (quadratic). Counting costs one hash per key, and the counts are keyed by
    distinct hash values, which do not collide with each other."""

    def __init__(self, limits: Limits):
        self.limit, self.counts = limits.same_hash, {}

    def add(self, key):
        h = hash(key)  # TypeError for an unhashable key, as building the set would raise
        self.counts[h] = n = self.counts.get(h, 0) + 1
        if n > self.limit:
            raise OverLimit("same_hash", f"more than {self.limit} items of one set or dict "
                                         "share a hash")
        return key


def _bad(what: str):
    raise ValueError(f"malformed {what}")


def _float(text: str) -> float:
    if len(text) > 40:
        raise ValueError("malformed float")
    return float(text)


def _int(text: str, limits: Limits) -> int:
    body = text[1:] if text.startswith("-") else text
    if len(body) > limits.int_hex_digits:
        raise OverLimit("int_digits", f"an int has more than {limits.int_hex_digits} hex digits")
    if not body or not all(c in "0123456789abcdef" for c in body):
        raise ValueError("malformed int")
    return int(text, 16)


_DECODERS = {"f": _float, "s": str, "y": bytes.fromhex, "Y": bytearray.fromhex}
_CONTAINERS = {"l": list, "t": tuple, "S": set, "F": frozenset}


@dataclass(frozen=True)
class Verdict:
    """How one completion fared: `passed` per test (tests after the first failure are not judged
    and count as failed), `reason` why it failed ("" when every test passed), `limit` the judge
    limit that stopped it (None if none did)."""

    passed: tuple[bool, ...]
    reason: str = ""
    limit: str | None = None

    @property
    def ok(self) -> bool:
        return bool(self.passed) and all(self.passed)


def verdict(checks: list[Check], records: tuple, ok: bool, limits: Limits = LIMITS,
            why_not_ok: str = "the program did not run to its end") -> Verdict:
    """Judge one completion. Requires a clean run (`ok`) and exactly one record per test, in
    order; the whole judgement shares one deadline of `limits.seconds`."""
    failed = lambda i, reason, limit=None: Verdict(  # noqa: E731
        (True,) * i + (False,) * (len(checks) - i), reason, limit)
    if not ok:
        return failed(0, why_not_ok)
    if len(records) != len(checks):
        early = [r.get("load_error") or r.get("setup_error") for r in records[:1]]
        if early and early[0]:
            return failed(0, f"the program failed before the tests: {str(early[0])[:200]}")
        return failed(0, f"{len(records)} test records for {len(checks)} tests")
    deadline = time.monotonic() + limits.seconds
    for i, (check, record) in enumerate(zip(checks, records)):
        if record.get("i") != i:
            return failed(i, f"test {i}: record out of order")
        try:
            if not check.accepts(record, limits, deadline):
                return failed(i, f"test {i}: {_describe(record)}")
            if time.monotonic() > deadline:
                raise OverLimit("time", f"judging took more than {limits.seconds} s")
        except OverLimit as e:
            return failed(i, f"test {i}: {e}", e.kind)
    return Verdict((True,) * len(checks))


def _describe(record: dict) -> str:
    if "error" in record:
        return str(record["error"])[:200]
    return "assert failed" if "passed" in record else "wrong value"
