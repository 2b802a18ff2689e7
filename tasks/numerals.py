"""Numbers written in English words, for GSM8K's answer marker ("#### twenty-five").

    python -m pytest tests/test_task_gsm8k.py -q
"""
from __future__ import annotations

import re

_UNITS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen".split())}
_TENS = {w: 10 * i for i, w in enumerate(
    "twenty thirty forty fifty sixty seventy eighty ninety".split(), start=2)}
NUMBER_WORDS = frozenset({*_UNITS, *_TENS, "hundred", "thousand"})
_WORDS = re.compile(r"[a-z]+|[^\sa-z-]")  # hyphens separate words


def word_number(text: str) -> tuple[int | None, bool]:
    """One number in words at the start of `text`, and whether another is offered after "or".

    "three", "twenty-five", "one hundred and five", "two thousand three hundred", "minus four".
    Words are read as one English numeral, never added up: "nine nine", "ten eight" and "six six
    six" are no number (None), where a sum would make each of them 18. Reading stops at
    punctuation ("three. Three apples" is 3). "eighteen or nineteen" is a hedge: (18, True).

    >>> word_number("twenty-five apples"), word_number("nine nine"), word_number("six or 7")
    ((25, False), (None, False), (6, True))
    """
    words = _WORDS.findall(text[:200].lower())
    sign, i = (-1, 1) if words[:1] == ["minus"] else (1, 0)
    value, i = _below_million(words, i)
    if value is None:
        return None, False
    if words[i:i + 1] == ["and"]:
        i += 1
    if i < len(words) and words[i] in NUMBER_WORDS:  # another numeral follows: not one number
        return None, False
    hedged = words[i:i + 1] == ["or"] and i + 1 < len(words) and (
        words[i + 1] in NUMBER_WORDS or words[i + 1] == "minus" or words[i + 1][:1].isdigit())
    return sign * value, hedged


def _below_hundred(words: list[str], i: int) -> tuple[int | None, int]:
    word = words[i] if i < len(words) else ""
    if word in _UNITS:
        return _UNITS[word], i + 1
    if word not in _TENS:
        return None, i
    nxt = words[i + 1] if i + 1 < len(words) else ""
    if 1 <= _UNITS.get(nxt, 0) <= 9:  # "twenty-five", "twenty five"
        return _TENS[word] + _UNITS[nxt], i + 2
    return _TENS[word], i + 1


def _scaled(words: list[str], i: int, below, scale: str, factor: int, top: int):
    """`below` words, optionally times `factor` ("hundred", "thousand") plus an optional rest."""
    value, i = below(words, i)
    if value is None or not 1 <= value <= top or words[i:i + 1] != [scale]:
        return value, i
    value, i = value * factor, i + 1
    j = i + 1 if words[i:i + 1] == ["and"] else i
    rest, j = below(words, j)
    return (value + rest, j) if rest else (value, i)


def _below_thousand(words: list[str], i: int) -> tuple[int | None, int]:
    return _scaled(words, i, _below_hundred, "hundred", 100, 99)  # "twelve hundred"


def _below_million(words: list[str], i: int) -> tuple[int | None, int]:
    return _scaled(words, i, _below_thousand, "thousand", 1000, 999)
