"""A small, safe arithmetic evaluator for model-written equations (never `eval`).

Only non-negative integer literals, + - * /, and parentheses are accepted; everything is computed
in exact rationals (fractions.Fraction). Hostile input is rejected cheaply *before* parsing: a
length cap bounds the work on a megabyte of digits or 10,000 nested parentheses, and the operator
whitelist excludes `**`, names, calls and attribute access.
"""
from __future__ import annotations

import ast
import re
from fractions import Fraction

MAX_CHARS = 128          # a 4-number Countdown equation needs ~25 characters
MAX_DEPTH = 24           # AST nesting bound, far below Python's recursion limit
_ALLOWED_CHARS = re.compile(r"^[0-9+\-*/() ]+$")
_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
        ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b}


class UnsafeExpression(ValueError):
    """The text is not a plain arithmetic expression over integer literals."""


def evaluate(expr: str) -> tuple[Fraction, list[int]]:
    """Evaluate an equation exactly; return its value and the integer literals it uses.

    Args:
        expr: e.g. "(12 + 7) - 3".

    Returns:
        (value, numbers), e.g. (Fraction(16), [12, 7, 3]).

    Raises:
        UnsafeExpression: on anything other than + - * / ( ) and integers, on division by zero,
            or when the text is longer than MAX_CHARS or nested deeper than MAX_DEPTH.

    >>> evaluate("(12 + 7) - 3")
    (Fraction(16, 1), [12, 7, 3])
    """
    expr = expr.strip()
    if not expr or len(expr) > MAX_CHARS or not _ALLOWED_CHARS.match(expr):
        raise UnsafeExpression(f"not a short arithmetic expression: {expr[:40]!r}")
    try:
        tree = ast.parse(expr, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise UnsafeExpression(f"unparsable: {type(e).__name__}") from None
    numbers: list[int] = []
    return _eval(tree.body, numbers, 0), numbers


def _eval(node: ast.AST, numbers: list[int], depth: int) -> Fraction:
    if depth > MAX_DEPTH:
        raise UnsafeExpression("nested too deeply")
    if isinstance(node, ast.Constant) and type(node.value) is int:
        numbers.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left = _eval(node.left, numbers, depth + 1)
        right = _eval(node.right, numbers, depth + 1)
        if isinstance(node.op, ast.Div) and right == 0:
            raise UnsafeExpression("division by zero")
        return _OPS[type(node.op)](left, right)
    raise UnsafeExpression(f"disallowed syntax: {type(node).__name__}")
