"""Trivial answers: functions that pass an MBPP row's tests without solving its problem.

A row is degenerate when one of these passes every test (the function is `def f(*a, **k)`):
- `return <constant>`: one of the row's expected values (all three tests expect the value the
  prompt shows);
- `return a[i]`: an argument (`minimum(1, 2) == 1`), i in 0, 1, 2, -1;
- `return a[i][j]` / `a[i][s]`: a fixed index j in 0, 1, -1 or a fixed slice s in [::-1], [1:],
  [:-1] of an argument (`find_Min([1,2,3,4,5],0,4) == 1` is `a[0][0]`);
- `return not <any of the above but the constant>`.

`trivial_answer(checks)` finds the first one that passes, by evaluating it here, in the harness,
against the row's planned checks (tasks/judge/mbpp_judge.py): the value side of a test is the tested
call with literal arguments, possibly wrapped in a builtin constructor (`set(f(x))`, `bool(f(x))`
for `assert f(x)`), so the answer's value for that test is computed here from the test's own
literals, sent through the runner's encoding as a sandbox value would be, and judged by the
check's own comparison. Nothing runs in the sandbox and no dataset text is eval'ed: only literals
are read (mbpp_judge.literal) and only plain builtins applied. A test whose value side has any
other shape cannot be evaluated, so an answer that needs it is not counted (the check errs
towards keeping a row).

    python -m pytest tests/test_mbpp_judge_limits.py -q -k degenerate
"""
from __future__ import annotations

import ast
import builtins
import operator
from typing import Callable

from tasks.judge import mbpp_judge, mbpp_runner

_WRAPPERS = {**mbpp_judge._CONSTRUCTORS, "bool": bool}  # pure builtins the value side may apply
_BUILTIN_NAMES = frozenset(dir(builtins))
_ARGS = ((0, "a[0]"), (1, "a[1]"), (2, "a[2]"), (-1, "a[-1]"))
_STEPS = ((lambda v: v, ""), (operator.itemgetter(0), "[0]"), (operator.itemgetter(1), "[1]"),
          (operator.itemgetter(-1), "[-1]"), (lambda v: v[::-1], "[::-1]"),
          (lambda v: v[1:], "[1:]"), (lambda v: v[:-1], "[:-1]"))


class _Unknown(Exception):
    """The test's value side has a shape this module cannot evaluate for the answer."""


class _Opaque:
    """Arguments that are not literals (a setup name): only a constant answer can use them."""


def answers(checks: list[mbpp_judge.Check]) -> list[tuple[str, Callable]]:
    """(label, answer) pairs, answer(args tuple) -> value: the row's expected values as
    constants first, then every argument selector and its negation."""
    found = []
    for c in checks:
        label = f"return {c.expected!r}"
        if label not in (f for f, _ in found):
            found.append((label, lambda a, v=c.expected: v))
    for i, arg in _ARGS:
        for step, suffix in _STEPS:
            pick = lambda a, i=i, step=step: step(_args(a)[i])  # noqa: E731
            found.append((f"return {arg}{suffix}", pick))
            found.append((f"return not {arg}{suffix}", lambda a, pick=pick: not pick(a)))
    return found


def trivial_answer(checks: list[mbpp_judge.Check]) -> str | None:
    """The label of the first trivial answer that passes every check ("return a[0][::-1]"),
    or None. Only rows judged wholly by value, with every expected value known, qualify."""
    if not checks or not all(c.outside and c.expected_src is None for c in checks):
        return None
    sides = [_value_side(c) for c in checks]
    if any(s is None for s in sides):
        return None
    for label, answer in answers(checks):
        if all(_passes(c, side, answer) for c, side in zip(checks, sides)):
            return label
    return None


def _args(a):
    if isinstance(a, _Opaque):
        raise _Unknown("arguments are not literals")
    return a


def _value_side(check: mbpp_judge.Check) -> ast.expr | None:
    try:
        return mbpp_judge._parse(check.src, mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None


def _passes(check: mbpp_judge.Check, side: ast.expr, answer: Callable) -> bool:
    """Whether `answer` passes the check, its value computed here and sent through the runner's
    encoding (a value the sandbox could not send fails there too)."""
    try:
        value = _evaluate(side, answer)
    except _Unknown:
        return False
    except Exception:  # noqa: BLE001 - the answer raised on these plain values: a failed test
        return False
    try:
        sent = mbpp_judge.decode(mbpp_runner.encode(value))
    except (mbpp_runner.Unserialisable, ValueError, TypeError, RecursionError):
        return False
    return check.accepts_value(sent)


def _evaluate(node: ast.expr, answer: Callable):
    """The value side with the tested function replaced by `answer`: only the tested call (of a
    non-builtin name), literals, and the _WRAPPERS applied to one evaluated argument."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        name = node.func.id
        if name in _WRAPPERS and len(node.args) == 1 and not node.keywords:
            return _WRAPPERS[name](_evaluate(node.args[0], answer))
        if name not in _BUILTIN_NAMES and not any(isinstance(a, ast.Starred) for a in node.args):
            args = tuple(mbpp_judge.literal(a) for a in node.args)
            return answer(_Opaque() if any(x is mbpp_judge._MISSING for x in args) else args)
        raise _Unknown(f"a call of {name}")
    value = mbpp_judge.literal(node)
    if value is mbpp_judge._MISSING:
        raise _Unknown(type(node).__name__)
    return value
