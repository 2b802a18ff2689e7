"""Judge MBPP tests in the harness, so a candidate cannot pass one without producing its value.

Most MBPP tests have the shape `assert <call> <op> <expected>` (`==`, `!=`, `<`, `in`, `is None`,
...), `assert math.isclose(<call>, <expected>, rel_tol=...)`, `assert <f>(<args>)` or
`assert not <f>(<args>)`, with `<expected>` a literal or a builtin constructor of literals
(`set([1, 2])`). `plan(test)` parses each test with `ast` into a Check: the sandbox evaluates only
the call expression (tasks/mbpp_runner.py) and returns its value as tagged JSON; `decode` rebuilds
plain Python values (never eval) and `Check.accepts` applies the test's own comparison here. The
expected value never enters the sandbox, nothing the candidate prints is read, a forged result can
only claim a value, and an object whose `__eq__` always returns True arrives as the plain data it
holds (or fails as unserialisable). A test of any other shape falls back to running as a statement
in the sandbox, as the original MBPP harness did; `Check.outside` says which way a test is judged.

    python -m pytest tests/test_task_mbpp.py -q
"""
from __future__ import annotations

import ast
import math
import operator
from dataclasses import dataclass, field
from typing import Any

_OPS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_,
        ast.IsNot: operator.is_not, ast.In: lambda a, b: a in b,
        ast.NotIn: lambda a, b: a not in b}  # each f(left, right) as written in the test
_CONSTRUCTORS = {"set": set, "frozenset": frozenset, "tuple": tuple, "list": list,
                 "sorted": sorted, "dict": dict, "float": float, "int": int, "str": str,
                 "complex": complex, "bool": bool}
_MISSING = object()


@dataclass(frozen=True)
class Check:
    """One test: `src` is what the sandbox runs (an expression when `outside`, else the whole
    test as a statement); the rest, kept here, decides whether the returned value passes."""

    src: str
    outside: bool
    op: Any = None  # value -> expected -> bool, or None for a statement run inside
    expected: Any = None
    value_first: bool = True  # `value op expected`, else `expected op value`
    kwargs: dict = field(default_factory=dict)

    def item(self) -> dict:
        """What the sandbox gets: never `expected`."""
        return {"kind": "value" if self.outside else "assert", "src": self.src}

    def accepts(self, record: dict) -> bool:
        """Whether the sandbox's record for this test passes it."""
        if not self.outside:
            return record.get("passed") is True
        if "value" not in record:
            return False
        try:
            value = decode(record["value"])
            if self.op == "isclose":
                return _is_number(value) and math.isclose(value, self.expected, **self.kwargs)
            args = (value, self.expected) if self.value_first else (self.expected, value)
            return bool(self.op(*args))
        except (TypeError, ValueError, ArithmeticError, RecursionError, MemoryError):
            return False


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


def _segment(src: str, node: ast.AST) -> str:
    return ast.get_source_segment(src, node) or ast.unparse(node)


def _compare(src: str, test: ast.AST) -> Check | None:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _OPS):
        return None
    left, right, op = test.left, test.comparators[0], _OPS[type(test.ops[0])]
    expected, value_node, value_first = literal(right), left, True
    if expected is _MISSING:
        expected, value_node, value_first = literal(left), right, False
    if expected is _MISSING:
        return None
    if op in (operator.is_, operator.is_not) and not isinstance(expected, (bool, type(None))):
        return None  # identity of anything but a singleton means nothing across processes
    return Check(_segment(src, value_node), True, op, expected, value_first)


def _isclose(src: str, test: ast.AST) -> Check | None:
    func = getattr(test, "func", None)
    named = (isinstance(func, ast.Attribute) and func.attr == "isclose"
             and isinstance(func.value, ast.Name) and func.value.id in ("math", "cmath")) \
        or (isinstance(func, ast.Name) and func.id == "isclose")
    if not (named and len(test.args) == 2 and all(k.arg for k in test.keywords)):
        return None
    kwargs = {k.arg: literal(k.value) for k in test.keywords}
    if any(v is _MISSING for v in kwargs.values()) or not kwargs.keys() <= {"rel_tol", "abs_tol"}:
        return None
    a, b = test.args
    expected, value_node = literal(b), a
    if expected is _MISSING:
        expected, value_node = literal(a), b
    if not _is_number(expected):
        return None
    return Check(_segment(src, value_node), True, "isclose", expected, True, kwargs)


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
    return Check(f"bool({_segment(src, call)})", True, operator.eq, not negated)


def plan(test: str) -> Check:
    """How one MBPP test is judged: split into call + comparison when its shape allows, else run
    as a statement inside the sandbox."""
    try:
        tree = ast.parse(test)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return Check(test, False)
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        return Check(test, False)
    node = tree.body[0].test
    return _compare(test, node) or _isclose(test, node) or _truth(test, node) or Check(test, False)


def decode(tagged):
    """Tagged JSON from mbpp_runner.encode -> plain value; ValueError for anything malformed."""
    if not (isinstance(tagged, list) and len(tagged) == 2 and isinstance(tagged[0], str)):
        raise ValueError("malformed value")
    tag, payload = tagged
    if tag == "k":
        return payload if payload is None or isinstance(payload, bool) else _bad("constant")
    scalar = _DECODERS.get(tag)
    if scalar and isinstance(payload, str):
        return scalar(payload)
    if tag == "c" and isinstance(payload, list) and len(payload) == 2:
        return complex(float(payload[0]), float(payload[1]))
    if not isinstance(payload, list):
        raise ValueError(f"malformed {tag!r} value")
    if tag == "d":
        if not all(isinstance(kv, list) and len(kv) == 2 for kv in payload):
            _bad("dict")
        return {decode(k): decode(v) for k, v in payload}
    container = _CONTAINERS.get(tag)
    if container is None:
        raise ValueError(f"unknown tag {tag!r}")
    return container(decode(v) for v in payload)


def _bad(what: str):
    raise ValueError(f"malformed {what}")


def _float(text: str) -> float:
    if len(text) > 40:
        raise ValueError("malformed float")
    return float(text)


def _int(text: str) -> int:
    body = text[1:] if text.startswith("-") else text
    if not body or not all(c in "0123456789abcdef" for c in body):
        raise ValueError("malformed int")
    return int(text, 16)


_DECODERS = {"i": _int, "f": _float, "s": str, "y": bytes.fromhex, "Y": bytearray.fromhex}
_CONTAINERS = {"l": list, "t": tuple, "S": set, "F": frozenset}


def verdict(checks: list[Check], records: tuple, ok: bool) -> list[bool]:
    """Per test: passed? Requires a clean run and exactly one record per test, in order."""
    if not ok or len(records) != len(checks):
        return [False] * len(checks)
    return [r.get("i") == i and c.accepts(r) for i, (c, r) in enumerate(zip(checks, records))]
