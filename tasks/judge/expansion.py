"""The expansion-size guard: refuse an answer whose sympy work can be bounded up front and is too big.

tasks/judge/bounded.py's `risky` refuses the shapes that never finish (power towers, huge exponents,
factorials of powers). Shapes that pass it could still keep sympy busy until the 5 s limit: math-verify
expands and simplifies, and that work grows with the expanded size of the answer. Timed on one worker
(2-core machine): `(x+1)^{999}` > 5 s (1,000 terms), `(x+y+z)^{99}` > 5 s (5,151 terms),
`(a+1)(b+1)...(k+1)` > 5 s (1,024 terms), `\\sin(` nested 4 deep 1.9 s, 8 deep > 5 s,
`\\sum_{k=1}^{9999} k^{999}` > 5 s, `\\prod_{k=1}^{999}(x+k)` > 5 s, `\\int_0^1 x^{9999} dx` 2.2 s,
`\\sqrt[999]{2}^{999}` 0.9 s, `\\binom{99999}{50000}` 1.0 s. `costly(text)` reads the answer once
into bracket groups and bounds, group by group:

- terms: what the answer expands to. A sum has as many terms as its non-rational terms (plain
  numbers fold into one), a product multiplies its factors' counts, and a power (t terms)^e has at
  most C(e + t - 1, t - 1), the monomials of degree e in t symbols. A product or power over
  MAX_TERMS terms is refused (`(x+1)^{99}`: 100 terms, 0.2 s; `(x+y+z)^{12}`: 91 terms).
- digits: the length of the numbers it builds (a power multiplies its base's digits by e, n! has
  at most n x digits(n)); over MAX_DIGITS is refused (9999! has 35,660 digits and passes).
- function nesting: sin, log, exp, ... (with or without a backslash) nested deeper than
  MAX_FUNCTION_DEPTH (`\\sin(\\sin(\\sin(1)))`: 0.3 s).
- \\sum and \\prod: both limits must be numbers (a symbol or \\infty sends sympy into symbolic
  summation), with at most MAX_RANGE values between them; the rest of the group is the body, whose
  terms a sum multiplies by the range and a product raises to it. Integrals are refused: their cost
  has no bound.
- root indices (`\\sqrt[n]{}`) over MAX_ROOT_INDEX, binomials whose top is over MAX_BINOMIAL.

An exponent's value is bounded by the product of max(n, 2) over the numbers in it (exact for a plain
integer; `\\frac{9999}{1}` counts as 19,998), and a chained power (`a^b^c`) is refused. The scan is
linear in the answer, which bounded.py caps at MAX_CHARS before this runs.

    python -m pytest tests/test_task_math500.py -q -k guard
"""
from __future__ import annotations

MAX_TERMS = 100  # (x+1)^{99} 0.2 s; (x+1)^{200} 0.6 s, (x+y+z)^{40} (861 terms) 2.6 s
MAX_DIGITS = 100_000  # 9999! (35,660 digits), 2^{2005}, 10^{9999} pass
MAX_FUNCTION_DEPTH = 3  # sin(sin(sin(1))) 0.3 s; four deep 1.9 s
MAX_RANGE = 100  # values a \sum or \prod runs over
MAX_ROOT_INDEX = 100  # \sqrt[99]{2}^{99} 0.05 s; \sqrt[999]{2}^{999} 0.9 s
MAX_BINOMIAL = 9999  # \binom{9999}{5000} 0.06 s; \binom{99999}{50000} 1.0 s
MAX_NESTING = 64  # brackets and arguments: risky() refuses brackets past 8; this bounds recursion
MAX_CHARS = 1000  # as tasks/judge/bounded.py's: what this scan is written for
BIG = 10 ** 18  # every bound is capped here: big enough to exceed each limit

FUNCTIONS = frozenset(
    "sin cos tan cot sec csc arcsin arccos arctan arccot arcsec arccsc sinh cosh tanh coth sech "
    "csch arsinh arcosh artanh arcsinh arccosh arctanh log ln lg exp".split())
BIG_OPERATORS = frozenset({"sum", "prod"})
INTEGRALS = frozenset({"int", "iint", "iiint", "iiiint", "oint", "intop", "idotsint"})
SEPARATORS = frozenset(  # commands that end a term, like + or =
    "pm mp le leq ge geq lt gt ne neq approx sim simeq equiv cong to rightarrow Rightarrow "
    "implies iff in notin cup cap setminus quad qquad vee lor wedge land mid colon".split())
PRODUCTS = frozenset({"cdot", "times", "div", "ast"})
SKIPPED = frozenset({"left", "right", "big", "Big", "bigg", "Bigg", "bigl", "bigr", "Bigl", "Bigr",
                     "biggl", "biggr", "limits", "nolimits", "displaystyle", "textstyle"})
FRACTIONS = frozenset({"frac", "dfrac", "tfrac", "cfrac"})
BINOMIALS = frozenset({"binom", "dbinom", "tbinom"})
_OPEN, _CLOSE = "([{", ")]}"
_ADDITIVE = set("+-=,;:<>|&?.$")


class _Refused(Exception):
    """Raised inside the scan with the reason; `costly` returns the reason."""


class _Info:
    """Bounds for one piece of an answer: terms, digits, value, whether it is a plain rational."""

    __slots__ = ("terms", "digits", "bound", "rational", "symbolic", "integer")

    def __init__(self, terms=1, digits=0, bound=1, rational=False, symbolic=False, integer=False):
        self.terms, self.digits, self.bound = terms, digits, bound
        self.rational, self.symbolic, self.integer = rational, symbolic, integer


def costly(text: str) -> str | None:
    """Why sympy's work on `text` is too big to start (the module docstring's bounds), or None.

    >>> [costly(s) is not None for s in ("(x^2+1)^2", r"\\frac{1}{2}", "(x+1)^{999}", r"\\int_0^1 x dx")]
    [False, False, True, True]
    """
    if len(text) > MAX_CHARS:
        return f"longer than {MAX_CHARS} characters"
    try:
        _sequence(_groups(_tokens(text)), 0, 0)
    except _Refused as e:
        return str(e)
    except RecursionError:  # not reached within MAX_CHARS and MAX_NESTING; a refusal if it were
        return "nested too deep"
    return None


# ---- reading: tokens, then bracket groups ----
def _tokens(text: str) -> list:
    """("num", digits, decimals) | ("word", letters) | ("cmd", name) | ("open"|"close", c) | ("op", c)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            j = i + 1
            while j < n and text[j].isalpha():
                j += 1
            if j > i + 1:
                name, i = text[i + 1:j], j
                if name not in SKIPPED:
                    out.append(("cmd", name))
                continue
            escaped, i = text[i + 1:i + 2], i + 2
            if escaped in ("{", "}"):
                out.append(("open" if escaped == "{" else "close", escaped))
            elif escaped == "\\":
                out.append(("op", ","))  # a LaTeX line break separates like a comma
            continue  # \, \! \; \  are spaces; \$ \% are symbols of no size
        if c.isdigit() or (c == "." and i + 1 < n and text[i + 1].isdigit()):
            j = i
            while j < n and text[j].isdigit():
                j += 1
            whole, frac = text[i:j], ""
            if j + 1 < n and text[j] == "." and text[j + 1].isdigit():
                k = j + 1
                while k < n and text[k].isdigit():
                    k += 1
                frac, j = text[j + 1:k], k
            out.append(("num", whole, frac))
            i = j
        elif c.isalpha():
            j = i
            while j < n and text[j].isalpha():
                j += 1
            out.append(("word", text[i:j]))
            i = j
        elif c in _OPEN or c in _CLOSE:
            out.append(("open" if c in _OPEN else "close", c))
            i += 1
        elif c == "*" and text[i + 1:i + 2] == "*":  # Python's power
            out.append(("op", "^"))
            i += 2
        else:
            if not c.isspace():
                out.append(("op", c))
            i += 1
    return out


def _groups(tokens: list) -> list:
    """Nest the tokens by brackets: ("group", items, opener). Unbalanced brackets are tolerated."""
    stack, openers = [[]], []
    for tok in tokens:
        if tok[0] == "open":
            if len(stack) > MAX_NESTING:
                raise _Refused("brackets nested too deep")
            stack.append([])
            openers.append(tok[1])
        elif tok[0] == "close":
            if len(stack) > 1:
                items, opener = stack.pop(), openers.pop()
                stack[-1].append(("group", items, opener))
        else:
            stack[-1].append(tok)
    while len(stack) > 1:
        items, opener = stack.pop(), openers.pop()
        stack[-1].append(("group", items, opener))
    return stack[0]


# ---- bounding ----
def _cap(x: int) -> int:
    return x if x < BIG else BIG


def _power_terms(terms: int, e: int) -> int:
    """C(e + terms - 1, terms - 1), capped at BIG: the monomials of degree e in `terms` symbols."""
    if terms <= 1:
        return 1
    k = min(terms - 1, e)
    if k > 64:
        return BIG
    out = 1
    for j in range(1, k + 1):
        out = out * (e + terms - j) // j
        if out >= BIG:
            return BIG
    return out


def _check(info: _Info, what: str) -> _Info:
    if info.terms > MAX_TERMS:
        raise _Refused(f"{what} expands to more than {MAX_TERMS} terms")
    if info.digits > MAX_DIGITS:
        raise _Refused(f"{what} builds a number of more than {MAX_DIGITS:,} digits")
    return info


def _is(item, kind: str, value=None) -> bool:
    return item[0] == kind and (value is None or item[1] == value)


def _sequence(items: list, depth: int, fdepth: int) -> _Info:
    """A run of terms joined by +, -, = or commas, each a product of factors."""
    symbolic_terms, rational_terms, digits, bound, symbolic = 0, 0, 0, 1, False
    term, i, n, factors, integer = _Info(rational=True), 0, len(items), 0, False

    def close_term():
        nonlocal symbolic_terms, rational_terms, digits
        if term.rational:
            rational_terms += 1
        else:
            symbolic_terms += term.terms
        digits = max(digits, term.digits)

    while i < n:
        item = items[i]
        if (_is(item, "op") and item[1] in _ADDITIVE) or (_is(item, "cmd") and item[1] in SEPARATORS):
            close_term()
            term, i = _Info(rational=True), i + 1
            continue
        if (_is(item, "op") and item[1] in "*/") or (_is(item, "cmd") and item[1] in PRODUCTS):
            i += 1
            continue
        factor, i = _factor(items, i, depth, fdepth)
        factors, integer = factors + 1, factor.integer
        term = _check(_Info(_cap(term.terms * factor.terms), term.digits + factor.digits,
                            _cap(term.bound * max(factor.bound, 1)),
                            term.rational and factor.rational, term.symbolic or factor.symbolic),
                      "a product")
        bound, symbolic = _cap(bound * max(factor.bound, 1)), symbolic or factor.symbolic
    close_term()
    terms = symbolic_terms + (1 if rational_terms else 0)
    return _Info(max(terms, 1), digits, bound, symbolic_terms == 0, symbolic,
                 integer and factors == 1)  # {5} or {-5}: a plain integer


def _factor(items: list, i: int, depth: int, fdepth: int) -> tuple[_Info, int]:
    """An atom and what follows it: ^exponent, _subscript, ! (factorial), ' (prime)."""
    base, i = _atom(items, i, depth, fdepth)
    powered = False
    while i < len(items):
        item = items[i]
        if _is(item, "op", "^"):
            if powered:
                raise _Refused("a chained power (a^b^c)")
            i += 1
            if i < len(items) and items[i][0] == "op" and items[i][1] in "+-\u2212":
                i += 1  # x^-9999: a parser may take the number after the sign as the exponent
            if i >= len(items):
                return base, i
            exponent, i = _atom(items, i, depth + 1, fdepth)
            e = exponent.bound  # a symbol's is 1: x^n is not expanded
            base = _check(_Info(_power_terms(base.terms, e), _cap(base.digits * e),
                                _cap(base.bound ** min(e, 64)) if base.bound > 1 else 1,
                                base.rational and exponent.integer,  # 2^{1/2} is not rational
                                base.symbolic or exponent.symbolic), "a power")
            powered = True
        elif _is(item, "op", "_"):
            if i + 1 < len(items):
                _, i = _atom(items, i + 1, depth + 1, fdepth)  # an index: refused inside if it explodes
            else:
                i += 1
        elif _is(item, "op", "!"):
            if base.rational:  # after a word it is punctuation ("Wow!"); n! < n^n
                base = _check(_Info(base.terms, _cap(base.bound * max(base.digits, 1)), BIG, True),
                              "a factorial")
            i += 1
        elif _is(item, "op", "'"):
            i += 1
        else:
            break
    return base, i


def _atom(items: list, i: int, depth: int, fdepth: int) -> tuple[_Info, int]:
    """One number, symbol, bracket group, command with its arguments, or function application."""
    if depth > MAX_NESTING:
        raise _Refused("nested too deep")
    item, i = items[i], i + 1
    kind = item[0]
    if kind == "num":
        whole, frac = item[1], item[2]
        value = int(whole) if whole and len(whole) <= 18 else (0 if not whole else BIG)
        return _Info(1, len(whole) + len(frac), max(value + (1 if frac else 0), 2), True,
                     integer=not frac), i
    if kind == "group":
        return _sequence(item[1], depth + 1, fdepth), i
    if kind == "word":
        if item[1].lower() in FUNCTIONS:
            return _function(items, i, depth, fdepth)
        return _Info(symbolic=True), i
    if kind == "op":  # a stray operator where a factor belongs ("^2", "!"): no size
        return _Info(rational=True), i
    name = item[1]
    if name in FUNCTIONS:
        return _function(items, i, depth, fdepth)
    if name == "operatorname":  # \operatorname{sech}(x): a function named by its group
        return _function(items, i + 1 if i < len(items) and _is(items[i], "group") else i, depth,
                         fdepth)
    if name in INTEGRALS:
        raise _Refused("an integral (no bound on its cost)")
    if name in BIG_OPERATORS:
        return _big_operator(name, items, i, depth, fdepth)
    if name == "sqrt":
        if i < len(items) and _is(items[i], "group") and items[i][2] == "[":  # \sqrt[n]{...}
            index = _sequence(items[i][1], depth + 1, fdepth)
            if index.symbolic or index.bound > MAX_ROOT_INDEX:
                raise _Refused(f"a root index over {MAX_ROOT_INDEX}")
            i += 1
        if i >= len(items):
            return _Info(), i
        arg, i = _atom(items, i, depth + 1, fdepth)
        return _check(_Info(arg.terms, arg.digits, arg.bound, False, arg.symbolic), "a root"), i
    if name in FRACTIONS or name in BINOMIALS:
        parts = []
        for _ in range(2):
            if i < len(items) and items[i][0] in ("group", "num", "word", "cmd"):
                part, i = _atom(items, i, depth + 1, fdepth)
                parts.append(part)
        top, bottom = (parts + [_Info(rational=True), _Info(rational=True)])[:2]
        if name in BINOMIALS:
            if top.bound > MAX_BINOMIAL:
                raise _Refused(f"a binomial of a number over {MAX_BINOMIAL}")
            return _Info(1, top.digits * 4, BIG, top.rational and bottom.rational,
                         top.symbolic or bottom.symbolic), i
        return _check(_Info(_cap(top.terms * bottom.terms), top.digits + bottom.digits,
                            _cap(top.bound * bottom.bound), top.rational and bottom.rational,
                            top.symbolic or bottom.symbolic), "a fraction"), i
    return _Info(symbolic=True), i  # \pi, \infty, \text{...}'s command, \circ: a symbol


def _function(items: list, i: int, depth: int, fdepth: int) -> tuple[_Info, int]:
    """sin x, \\sin^2(x), \\log_2 8, \\exp\\exp 1: one level of nesting per name, chains included."""
    if fdepth + 1 > MAX_FUNCTION_DEPTH:
        raise _Refused(f"functions nested more than {MAX_FUNCTION_DEPTH} deep")
    while i + 1 < len(items) and (_is(items[i], "op", "^") or _is(items[i], "op", "_")):
        _, i = _atom(items, i + 1, depth + 1, fdepth)  # \sin^2, \log_2: a power of the value, a base
    if i >= len(items):
        return _Info(symbolic=True), i
    arg, i = _factor(items, i, depth + 1, fdepth + 1)
    return _Info(1, arg.digits, arg.bound, False, True), i


def _big_operator(name: str, items: list, i: int, depth: int, fdepth: int) -> tuple[_Info, int]:
    """\\sum_{k=a}^{b} body / \\prod: the body is the rest of the group."""
    lower = upper = None
    while i + 1 < len(items) and (_is(items[i], "op", "_") or _is(items[i], "op", "^")):
        script = items[i + 1]
        if _is(items[i], "op", "_"):
            lower = script
        else:
            upper = script
        i += 2
    values = _range(lower, upper, depth, fdepth)
    if values is None:
        raise _Refused(f"a \\{name} whose limits are not numbers")
    if values > MAX_RANGE:
        raise _Refused(f"a \\{name} over more than {MAX_RANGE} values")
    body = _sequence(items[i:], depth + 1, fdepth)
    index_digits = len(str(values))
    if name == "sum":  # its terms are the body's, once the index is summed out
        info = _Info(body.terms, body.digits + index_digits, _cap(values * body.bound),
                     body.rational, body.symbolic)
    else:
        info = _Info(_power_terms(body.terms, values), _cap(max(body.digits, index_digits) * values),
                     BIG, body.rational, body.symbolic)
    return _check(info, f"a \\{name}"), len(items)


def _range(lower, upper, depth: int, fdepth: int) -> int | None:
    """How many values `_{k=a}^{b}` can run over, or None when a limit is not made of numbers."""
    if lower is None or upper is None:
        return None
    high = upper[1] if upper[0] == "group" else [upper]
    low = lower[1] if lower[0] == "group" else [lower]
    equals = next((k for k, tok in enumerate(low) if _is(tok, "op", "=")), None)
    if equals is None:
        return None
    low = low[equals + 1:]
    top, bottom = _sequence(high, depth + 1, fdepth), _sequence(low, depth + 1, fdepth)
    if top.symbolic or bottom.symbolic:
        return None
    a, b = _integer(low), _integer(high)
    if a is not None and b is not None:
        return max(b - a + 1, 0)
    return _cap(top.bound + bottom.bound)  # |a| + |b| bounds b - a + 1 otherwise


def _integer(items: list) -> int | None:
    """The value of a limit written as a plain integer ("5", "-3"), else None."""
    sign = -1 if items[:1] and _is(items[0], "op", "-") else 1
    rest = items[1:] if sign < 0 else items
    if len(rest) == 1 and _is(rest[0], "num") and not rest[0][2] and len(rest[0][1]) <= 18:
        return sign * int(rest[0][1])
    return None
