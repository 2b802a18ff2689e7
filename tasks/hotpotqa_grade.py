"""HotpotQA's grading: the official hotpot_evaluate_v1 normalisation, EM and token F1, the
reward's hedge-priced F1, and reading the answer out of a completion. tasks/hotpotqa.py's module
docstring states the rules; this module holds them so that hotpotqa.py stays readable.

    python -m pytest tests/test_task_hotpotqa.py -q
"""
from __future__ import annotations

import re
import string
from collections import Counter

# "answer" as a word, then the rest of the marker (spaces, optional "**", spaces, ":") read by
# `_marker_end` with str methods: the old one-regex marker, `answer[ \t]*(?:\*\*)?[ \t]*:`, had
# two space runs that split one run of spaces every way before failing: 4.9 s on 64k spaces.
_ANSWER_WORD = re.compile(r"\banswer\b", re.I)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_DROP_PUNCTUATION = str.maketrans("", "", string.punctuation)  # ASCII punctuation, as the official set
_YES_NO = ("yes", "no", "noanswer")


# ---- the official hotpot_evaluate_v1 definitions ----
def normalize_answer(s: str) -> str:
    """Lower case, drop ASCII punctuation, drop a/an/the, collapse whitespace (official order).

    >>> normalize_answer("The  Tessaly Prize!")
    'tessaly prize'
    """
    return " ".join(_ARTICLES.sub(" ", s.lower().translate(_DROP_PUNCTUATION)).split())


def exact_match(prediction: str, gold: str) -> bool:
    """Official EM: the normalised strings are equal."""
    return normalize_answer(prediction) == normalize_answer(gold)


def f1_score(prediction: str, gold: str) -> float:
    """Official token F1 of the normalised strings; 0 when either is yes/no/noanswer and they differ.

    >>> f1_score("Tessaly Prize 1995", "the Tessaly Prize")
    0.8
    """
    return _f1(normalize_answer(prediction), normalize_answer(gold))


def _f1(pred: str, ref: str) -> float:
    """f1_score of two normalised strings."""
    if (pred in _YES_NO or ref in _YES_NO) and pred != ref:
        return 0.0
    pred_tokens, ref_tokens = pred.split(), ref.split()
    same = sum((Counter(pred_tokens) & Counter(ref_tokens)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(ref_tokens)
    return 2 * precision * recall / (precision + recall)


def priced_f1(prediction: str, gold: str) -> float:
    """The reward: official token F1 divided by 1 + the prediction's tokens beyond the gold's.

    Surplus tokens are counted as a multiset (Counter(prediction) - Counter(gold)): a repeated
    token beyond the gold's count is surplus too. An answer that is the gold or a part of it has
    no surplus and earns its F1; each further token divides it, so k guesses listed together
    (the right one among them) earn at most 1/k (tasks/hotpotqa.py, "Reward").

    A strict prefix of the gold ("University of" for "University of Oxford") stops before the
    token that tells the gold from every other answer sharing that prefix ("University of
    Cambridge"): it earns what one gold token earns, 2/(n + 1) for an n-token gold, so hedging on a
    shared prefix never beats committing to the discriminating token ("Oxford": 0.5 each).

    >>> priced_f1("Paris", "Paris"), priced_f1("Paris London", "Paris")
    (1.0, 0.3333333333333333)
    >>> priced_f1("Sefferly", "Ann Sefferly")  # part of the gold: no surplus, its F1
    0.6666666666666666
    >>> priced_f1("University of", "University of Oxford"), priced_f1("Oxford", "University of Oxford")
    (0.5, 0.5)
    """
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    pred_tokens, ref_tokens = pred.split(), ref.split()
    surplus = Counter(pred_tokens) - Counter(ref_tokens)
    score = _f1(pred, ref) / (1 + sum(surplus.values()))
    if 0 < len(pred_tokens) < len(ref_tokens) and ref_tokens[:len(pred_tokens)] == pred_tokens:
        score = min(score, 2 / (len(ref_tokens) + 1))  # a strict prefix: one token's worth
    return score


def _marker_end(text: str, word_end: int) -> int | None:
    """Where the marker that starts with the word "answer" ending at `word_end` ends, or None when
    it is no marker. The marker: spaces/tabs, an optional "**", spaces/tabs, ":", an optional
    "**" ("Answer:", "**Answer:**", "**Answer**:", "Answer :"). Reads each character once."""
    i, n = word_end, len(text)
    while i < n and text[i] in " \t":
        i += 1
    if text.startswith("**", i):
        i += 2
        while i < n and text[i] in " \t":
            i += 1
    if i >= n or text[i] != ":":
        return None
    return i + 3 if text.startswith("**", i + 1) else i + 1


def answer_text(completion: str) -> str | None:
    """The raw answer of a completion (tasks/hotpotqa.py's format), or None when absent.

    The markers are found left to right, each word "answer" read with the spaces after it once
    (the words are disjoint and a run of spaces follows one word), so this is linear."""
    end = None
    for word in _ANSWER_WORD.finditer(completion):
        found = _marker_end(completion, word.end())
        if found is not None:
            end = found
    if end is None:
        return None
    rest = completion[end:]
    line, _, after = rest.partition("\n")
    if line.strip():
        return line.strip()
    for nxt in after.split("\n"):  # "Answer:" alone on its line: the next non-blank line
        if nxt.strip():
            return nxt.strip()
    return None


def predict(completion: str) -> str | None:
    """The normalised answer of a completion, or None (no format, or nothing left after normalising)."""
    raw = answer_text(completion)
    normalised = normalize_answer(raw) if raw is not None else ""
    return normalised or None
