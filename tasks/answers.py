"""Reading a final answer out of a completion: boxes, relations, hedges (MATH-500, GSM8K, arithmetic).

- `last_boxed(text)`: the argument of the last \\boxed (or \\fbox). A braced argument is read with
  its nested braces; a bare one is one token, as TeX reads it (`\\boxed 5 and \\frac{3}{1}` boxes 5),
  except that a bare number is read whole (`\\boxed 42` is 42).
- `sides(answer)`: the sides of a relation written at the top level of an answer (`=`, `\\approx`,
  `\\sim`, ...), so a grader can ask each of them: `\\boxed{5 = 3}` states both 5 and 3.
- A hedge, two answers offered at once ("18 or 19", "18, 19", "18 or maybe 19", "18 ± 1", "answer:
  18, 19 or 20", `\\boxed{\\pm 18}`, `3 \\vee 5`, `3 \\to 5`, `3 \\\\ 5`), or a denied one ("The answer
  is not 18."), is no answer: the graders score it 0 rather than pick one side. `hedge_after` and
  `hedge_before` find alternatives around plain numbers, `negated` a "not" before one,
  `hedged_latex` alternatives in a box, `hedged_line` in an unboxed answer line ("or" before a
  value: "3 or 5", not "3, or equivalently 3.0"; "not" before the first value).
- `top_level_comma` reads a thousands comma (`10,\\!080`) as part of one number, not a list.

Every function here is linear in its input (the regexes cannot backtrack beyond a bounded window).

    python -m pytest tests/test_task_math500.py tests/test_task_gsm8k.py -q
"""
from __future__ import annotations

import re

RELATIONS = frozenset({"approx", "simeq", "sim", "equiv", "cong", "doteq", "approxeq",
                       "thickapprox", "eqsim"})
# math-verify reads `3 \vee 5` as 5, `3 \to 5` and `3 \\ 5` (a line break) as 5 too
HEDGE_COMMANDS = ("\\vee", "\\lor", "\\to", "\\rightarrow", "\\Rightarrow", "\\implies",
                  "\\mapsto", "\\longrightarrow")
SIGNED = ("\\pm", "\\mp")
MINUS_SIGNS = "-\u2010\u2011\u2012\u2013\u2212\ufe63\uff0d"  # hyphen-minus, hyphens, dashes, minus
WINDOW = 200  # characters around a number that a hedge is looked for in
_NUM = r"[$]?\d[\d.]*"  # no commas: a comma is only ever a separator here, so nothing backtracks
# After a number: a list ("18, 19", "18; 19"), "or" and within a few words another number ("18 or
# maybe 19"), "to"/"and" and a number ("18 to 19"), or a margin ("18 ± 1", "18 +/- 1"). In WINDOW.
_HEDGE_AFTER = re.compile(r"\s*[,;]\s*[" + MINUS_SIGNS + r"]?\$?\d|(?:\s*,\s*" + _NUM
                          + r")*\s*(?:,\s*)?(?:\b(?:or|and/or)\b[^\d\n]{0,24}?|\b(?:and|to)\s+)\$?\d"
                          r"|\s*(?:\u00b1|\u2213|\+\s*/\s*-|\+-|\\pm|\\mp)\s*\$?\d", re.I)
# Before a number: a negation on its line ("The answer is not 18.", "#### not 18").
_NEGATED = re.compile(r"(?:\bnot\b|n't\b|\bnever\b)[^\d\n]{0,24}$", re.I)
_HEDGE_BEFORE = re.compile(r"\d\s*(?:,\s*)?\b(?:or|and/or)\s+\$?$", re.I)
_OR = re.compile(r"\bor\b", re.I)
_NOT = re.compile(r"^[^\d\n]{0,40}?(?:\bnot\b|n't\b)", re.I)  # "is not 18.", not "18, not 19"
_OR_VALUE = re.compile(r"\bor\s+\$?(?:[-\d\\(\u2212]|[a-z]\s*=)", re.I)  # "or 5", "or x = 5"
_DECIMALS = re.compile(r"\.(\d+)")
_BARE_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def last_boxed(text: str) -> str | None:
    """The argument of the last \\boxed{...} (or \\fbox{...}), nested braces included, else None.

    >>> last_boxed(r"so \\boxed{\\frac{1}{2}} and finally \\boxed{\\dfrac{3}{4}}")
    '\\\\dfrac{3}{4}'
    >>> last_boxed(r"\\boxed 5 and \\frac{3}{1}")
    '5'
    """
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    i, n = start + (6 if text.startswith("\\boxed", start) else 5), len(text)
    if i < n and text[i].isalpha():  # \boxedx is another command
        return None
    while i < n and text[i].isspace():
        i += 1
    if i >= n or text[i] in "}$":
        return None
    if text[i] != "{":  # a bare argument: one token
        number = _BARE_NUMBER.match(text, i)
        if number:
            return number.group(0)
        if text[i] == "\\":
            j = i + 1
            while j < n and text[j].isalpha():
                j += 1
            return text[i:max(j, i + 2)]
        return text[i]
    depth = 0
    for j in range(i, n):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1:j]
    return None  # unbalanced: the answer was cut off


def sides(answer: str) -> list[str]:
    """The answer split at relations outside any bracket (`=`, `\\approx`, `\\sim`, ...), stripped.

    >>> sides(r"x = \\frac{6}{2} \\approx 3.0"), sides(r"f(x=1) = 2"), sides("5")
    (['x', '\\\\frac{6}{2}', '3.0'], ['f(x=1)', '2'], ['5'])
    """
    out, depth, last, i, n = [], 0, 0, 0, len(answer)
    while i < n:
        c = answer[i]
        if c == "\\":
            j = i + 1
            while j < n and answer[j].isalpha():
                j += 1
            if depth == 0 and answer[i + 1:j] in RELATIONS:
                out.append(answer[last:i])
                last = j
            i = max(j, i + 2)
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth = max(depth - 1, 0)
        elif c == "=" and depth == 0:
            out.append(answer[last:i])
            last = i + 1
        i += 1
    out.append(answer[last:])
    return [s.strip() for s in out]


def is_name(side: str) -> bool:
    """A side that names what the answer is (`x`, `f(x)`, `AB`, `\\theta`): no digit in it."""
    return bool(side) and not any(c.isdigit() for c in side)


_THOUSANDS = re.compile(r"(?<=\d),(?:\\!)?(?=\d{3}(?!\d))")  # 10,\!080 and 32,348: one number


def top_level_comma(answer: str) -> bool:
    """True when the answer is a list (`1, 2`), not one value (`10,\\!080`: a thousands comma) or
    a tuple `(3, \\frac{\\pi}{2})`."""
    depth = 0
    for c in _THOUSANDS.sub("", answer):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth = max(depth - 1, 0)
        elif c == "," and depth == 0:
            return True
    return False


def single_value(gold: str) -> bool:
    """A gold answer that is one value: no list, no \\pm, no relation. Hedge rules apply to it."""
    return not (top_level_comma(gold) or any(s in gold for s in SIGNED) or len(sides(gold)) > 1
                or _OR.search(gold))


def hedged_latex(answer: str, signs: bool = False) -> bool:
    """True when a boxed answer or an answer line offers alternatives: the word "or", \\vee, \\lor
    (and \\pm, \\mp when `signs`: for a grader whose answers are single numbers)."""
    marks = HEDGE_COMMANDS + (SIGNED if signs else ())
    rows = "\\\\" in answer and "\\begin" not in answer  # `3 \\ 5`; a matrix's rows are no hedge
    return rows or any(m in answer for m in marks) or bool(_OR.search(answer))


def hedged_line(line: str) -> bool:
    """True when an unboxed answer line offers alternatives ("or" before a value, \\vee, \\lor, \\to)
    or denies its value ("is not 18")."""
    return any(m in line for m in HEDGE_COMMANDS) or bool(_OR_VALUE.search(line)) \
        or bool(_NOT.match(line))


def answer_line(text: str) -> str:
    """The rest of the line after the last "answer" in `text` (math-verify's anchors: "the final
    answer is", "answer:"), else the last non-blank line: where an unboxed answer is read."""
    at = text.lower().rfind("answer")
    if at >= 0:
        return text[at + len("answer"):].split("\n", 1)[0]
    lines = [line for line in text[-4 * WINDOW:].split("\n") if line.strip()]
    return lines[-1] if lines else ""


def hedge_after(text: str, end: int) -> bool:
    """True when the number ending at `end` is followed by alternatives: "18 or 19", "18, 19 or 20"."""
    return _HEDGE_AFTER.match(text[end:end + WINDOW]) is not None


def negated(text: str, start: int) -> bool:
    """True when the number starting at `start` is denied on its line: "The answer is not 18."."""
    return _NEGATED.search(text[max(0, start - 40):start]) is not None


def hedge_before(text: str, start: int) -> bool:
    """True when the number starting at `start` is the last of alternatives: "84 or 85"."""
    return _HEDGE_BEFORE.search(text[max(0, start - WINDOW):start]) is not None


def decimals(text: str) -> int:
    """The most digits after a decimal point in `text` (0.50000001: 8)."""
    return max((len(m.group(1)) for m in _DECIMALS.finditer(text)), default=0)
