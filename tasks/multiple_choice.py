"""The multiple-choice grader CommonsenseQA (tasks/csqa.py) and GPQA (tasks/gpqa.py) share.

Prompt (`format_prompt`): one instruction, then the question, then the options as lettered lines
(the layout of OpenAI simple-evals' GPQA template, with the letters spelled out):

    Answer the following multiple-choice question. Think step by step, then end your response
    with a line of the form "Answer: X", where X is the letter of the one correct option (A, B,
    C, D or E).

    <question>

    A) <option>
    B) <option>
    ...

Grading (`parse_letter`), in one pass over the completion's lines:
- An *answer line* starts, after spaces, list bullets and markdown (`*`, `_`, `#`, `>`, `-`,
  backticks), with "Answer" or "Final answer" (any case), then optional markdown, then ":".
  "Answer: B" is the format; "**Final Answer:** B" is accepted as the same format. "The answer is
  B", "Answer B" and "B" alone are other formats: no answer line, no letter, reward 0.
- Its *answer span* is the rest of that line after the colon, markdown and `$` stripped at both
  ends. The span must start with one of the task's letters, either alone - `B`, `(B)`, `[B]`,
  `\\boxed{B}`, `**B**`, optionally with a final "." - or followed by text - `B) a bank`,
  `(B) a bank`, `B. a bank`, `B: a bank`, `B, a bank`, `B - a bank`, `B (a bank)` - and the span
  must name no other option letter anywhere. A letter is *named* by a word that is that one
  letter, in either case, whatever surrounds it: "A, C", "A. C.", "A - C", "A: C", "[A] or [C]",
  "A, maybe C", "B, A, C, D, E", even "B, not A" (the grader reads no negation) all name two
  letters and score 0. Not a letter: a letter inside a longer word ("e.g.", "A's", "e-mail":
  letters, digits, apostrophes and "."/"-" between two of them make one word); "A"/"a" followed
  by spaces and a word of two or more characters that starts with a letter (the article: "(C) A
  bank"), unless that word is one of `_NOT_AFTER_ARTICLE` ("A or", "A is", "A maybe"); and,
  when the row's option texts are given (`reward` and `is_correct` receive the `choices`
  column), anything inside the answered option's own text, matched case-insensitively ("B)
  Vitamin C" when option B is "Vitamin C").
  `extract_answer` has only the text, so it reads the option's text like any other: it returns a
  letter only where is_correct with the choices would return the same one (it may return None
  where that accepts "B) Vitamin C"), so completions that vote for one letter share their
  correctness, as maj@k assumes.
  Anything else ("I think B", "None", a letter beyond the options, the letter on the next line)
  is no letter.
- Every answer line must name the same letter: a completion with an answer line that names no
  one letter, or with two answer lines that disagree, gets None (reward 0); one with no answer
  line gets None. Repeating the same letter is fine.
- The keyword is matched in any case, and so is the letter ("Answer: b" is B): a lone letter can
  mean nothing else.
Every step reads each line a bounded number of times (the option-text search at most once per
word of the answered option's text; no regex here can split one run of spaces two ways), so
grading is linear in the completion: tests/test_task_redos.py times 64k-character answers.

`MultipleChoiceTask` holds what both tasks do with that: reward, is_correct, extract_answer (the
letter, for maj@k votes), gold_completion ("Answer: <letter>"), and the fixture note in run_info.

    python -m pytest tests/test_task_multiple_choice.py -q
"""
from __future__ import annotations

import logging
import re

from tasks.base import TaskDataError

LETTERS = "ABCDEFGHIJ"
INSTRUCTION = ("Answer the following multiple-choice question. Think step by step, then end your "
               "response with a line of the form \"Answer: X\", where X is the letter of the one "
               "correct option ({letters}).")
_LEAD = " \t*_#>`-"      # stripped before the keyword: indentation, bullets, markdown
_DECOR = " \t\r*_`$"     # stripped around the value: markdown emphasis, code, inline maths
_KEYWORDS = ("final answer", "answer")
_SEPARATORS = ").:,-\u2013\u2014"  # after a letter, before the option's text
_OPEN = {"(": ")", "[": "]", "{": "}"}

log = logging.getLogger(__name__)


def letters_for(n_choices: int) -> str:
    """The option letters of an n-way question: "ABCDE" for 5."""
    if not 2 <= n_choices <= len(LETTERS):
        raise ValueError(f"{n_choices} options; a question needs 2 to {len(LETTERS)}")
    return LETTERS[:n_choices]


def _spoken(letters: str) -> str:
    """"A, B, C, D or E"."""
    return ", ".join(letters[:-1]) + " or " + letters[-1]


def format_prompt(question: str, choices: list[str]) -> str:
    """The prompt for one question: the instruction, the question, then "A) ..." lines.

    >>> prompt = format_prompt("2 + 2?", ["3", "4"])
    >>> prompt.startswith(INSTRUCTION.format(letters="A or B"))
    True
    >>> print(prompt[len(INSTRUCTION.format(letters="A or B")):].lstrip())
    2 + 2?
    <BLANKLINE>
    A) 3
    B) 4
    """
    letters = letters_for(len(choices))
    options = "\n".join(f"{letter}) {text}" for letter, text in zip(letters, choices))
    return f"{INSTRUCTION.format(letters=_spoken(letters))}\n\n{question.strip()}\n\n{options}"


def gold_text(letter: str) -> str:
    """A completion giving `letter` in the requested format."""
    return f"Answer: {letter}"


def _answer_value(line: str) -> str | None:
    """The text after "Answer:" when `line` is an answer line, else None."""
    s = line.lstrip(_LEAD)
    head = s[:len(_KEYWORDS[0])].lower()
    for keyword in _KEYWORDS:
        if head.startswith(keyword):
            s = s[len(keyword):].lstrip(_DECOR)
            return s[1:] if s.startswith(":") else None
    return None


# A word: letters and digits, joined by apostrophes or by "." and "-" between two of them ("e.g",
# "A's", "e-mail"). Linear: each repetition must start with a joiner, which no [^\W_] matches.
_WORD = re.compile(r"[^\W_]+(?:[.'\u2019\-][^\W_]+)*")
# "A"/"a" before one of these words is option A, not the article: "A or C", "A is also right"
_NOT_AFTER_ARTICLE = frozenset({"or", "and", "nor", "vs", "versus", "is", "was", "are", "also",
                                "too", "maybe", "perhaps", "possibly", "probably", "might", "may",
                                "could", "seems", "then", "if", "not"})


def _own_text_spans(span: str, own: str | None) -> list[tuple[int, int]]:
    """Where the answered option's own text occurs in `span` (any case, any run of spaces between
    its words). The words are literals joined by `[ \t]+`, so a run of spaces is rescanned at most
    once per word of the option: linear in the span for a given option."""
    words = own.split() if isinstance(own, str) else []
    if not words:
        return []
    pattern = re.compile(r"[ \t]+".join(map(re.escape, words)), re.IGNORECASE)
    return [m.span() for m in pattern.finditer(span)]


def _names_another(span: str, letter: str, letters: str, own: str | None) -> bool:
    """Whether the text after the answered letter names another option letter (module docstring)."""
    inside = _own_text_spans(span, own)
    k = 0
    words = _WORD.finditer(span)
    word = next(words, None)
    while word is not None:
        following = next(words, None)
        named = word.group()
        if len(named) == 1 and named.upper() in letters and named.upper() != letter:
            while k < len(inside) and inside[k][1] <= word.start():
                k += 1
            in_own_text = k < len(inside) and inside[k][0] <= word.start()
            article = (named in "Aa" and following is not None and len(following.group()) > 1
                       and following.group()[0].isalpha()
                       and following.group().lower() not in _NOT_AFTER_ARTICLE
                       and span[word.end():following.start()].strip(" \t") == ""
                       and word.end() < following.start())
            if not (in_own_text or article):
                return True
        word = following
    return False


def _value_letter(value: str, letters: str, choices: list[str] | None = None) -> str | None:
    """The one letter an answer span names (see the module docstring), else None.

    Args:
        value: the answer line's text after the colon.
        letters: the task's option letters.
        choices: the row's option texts, in letter order, when known: the answered option's own
            text may then hold a capital letter ("Vitamin C") that is not a second answer.
    """
    v = value.strip(_DECOR)
    w = v[:-1].strip(_DECOR) if v.endswith(".") else v  # "**B**." -> "B"
    if w.startswith("\\boxed{") and w.endswith("}"):
        w = w[len("\\boxed{"):-1].strip(_DECOR)
    if len(w) == 3 and _OPEN.get(w[0]) == w[2]:  # (B) [B] {B}
        w = w[1]
    elif len(w) == 2 and w[1] in _SEPARATORS:  # "B)" with no option text
        w = w[0]
    if len(w) == 1:
        return w.upper() if w.upper() in letters else None
    # a letter followed by text: "B) text", "(B) text", "B. text", "B - text"
    i, close = 0, None
    if v[:1] in _OPEN:
        i, close = 1, _OPEN[v[0]]
    if len(v) < i + 2 or v[i].upper() not in letters:
        return None
    letter, j = v[i].upper(), i + 1
    if close is not None:
        if v[j] != close:
            return None
        j += 1
    else:
        k = j
        while k < len(v) and v[k] in " \t":
            k += 1
        if k < len(v) and k > j and v[k] == "(":  # "B (a bank)"
            j = k
        elif k == len(v) or v[k] not in _SEPARATORS or (k > j and v[k] not in "-\u2013\u2014"):
            return None
        else:
            j = k + 1
    if j >= len(v) or v[j] not in " \t(":
        return None  # "B)text" or "e.g." is no option text
    index = letters.index(letter)
    own = choices[index] if choices is not None and index < len(choices) else None
    return None if _names_another(v[j:], letter, letters, own) else letter


def parse_letter(text: str, n_choices: int, choices: list[str] | None = None) -> str | None:
    """The one letter a completion answers with (module docstring's rules), or None.

    Args:
        text: the completion.
        n_choices: how many options the question has.
        choices: the option texts in letter order, when known (see `_value_letter`).

    >>> parse_letter("People keep money in banks.\\nAnswer: B", 5)
    'B'
    >>> parse_letter("Answer: A or C", 5) is None, parse_letter("Answer: A\\nAnswer: C", 5) is None
    (True, True)
    >>> parse_letter("Answer: B, C", 5), parse_letter("Answer: (C) A bank", 5)
    (None, 'C')
    >>> options = ["Iron", "Vitamin C", "Zinc", "Salt"]
    >>> parse_letter("Answer: B) Vitamin C", 4), parse_letter("Answer: B) Vitamin C", 4, options)
    (None, 'B')
    """
    if not isinstance(text, str):
        return None
    letters, found = letters_for(n_choices), None
    for line in text.split("\n"):
        value = _answer_value(line)
        if value is None:
            continue
        letter = _value_letter(value, letters, choices)
        if letter is None or (found is not None and letter != found):
            return None
        found = letter
    return found


SOURCES = ("fixture", "local", "hub")  # fixture: the hand-written rows, NOT the benchmark


class MultipleChoiceTask:
    """Scoring shared by the multiple-choice tasks.

    A subclass sets `n_choices` and `benchmark` (its display name), calls `_set_source` from its
    constructor, and loads rows with `prompt`, `question`, `choices` (option texts in the order
    shown) and `answer` (the gold letter). On the fixture, `name` gains "-fixture", every load
    logs a warning, and run_info's `notes` (printed under the report's tables) says so.
    """

    name: str
    n_choices: int
    benchmark: str
    source: str
    fixture_dir: str

    def _set_source(self, source: str, path: str | None, path_example: str, local_needs: str) -> None:
        """Check task.source and task.path together (one line naming the fix), then set the source.

        `path_example`: what task.path holds, for the unknown-source message; `local_needs`: the
        message when source=local comes without a path."""
        if source not in SOURCES:
            raise TaskDataError(f"task.source={source!r} is unknown; use hub, local (with "
                                f"task.path={path_example}) or fixture")
        if source == "local" and not path:
            raise TaskDataError(local_needs)
        if source != "local" and path:
            raise TaskDataError(f"task.path is only read with task.source=local (not {source}); "
                                "drop one of them")
        self.source = source
        if source == "fixture":
            self.name = f"{type(self).name}-fixture"

    @property
    def fixture(self) -> bool:
        return self.source == "fixture"

    # ---- scoring ----
    def extract_answer(self, text: str) -> str | None:
        """The answered letter ("B"), or None when no single letter is given in the format. It has
        no option texts, so "B) Vitamin C" is None here (module docstring)."""
        return parse_letter(text, self.n_choices)

    def is_correct(self, completion: str, answer: str, choices: list[str] | None = None, **_) -> bool:
        """True when the completion answers with exactly the gold letter (`choices`: the row's
        option texts, so that the answered option's own text is not read as another letter)."""
        return parse_letter(completion, self.n_choices, choices) == answer

    def reward(self, completions: list[str], answer: list[str], choices: list | None = None,
               **kwargs) -> list[float]:
        """TRL-style reward: 1.0 when the completion answers with the gold letter, else 0 (a span
        that names two or more letters, answer lines that disagree, or no "Answer: X" line).

        >>> from tasks.csqa import CommonsenseQA
        >>> CommonsenseQA().reward(["... so a bank.\\nAnswer: B", "Answer: B or C", "B", "Answer: B, C"],
        ...                        answer=["B", "B", "B", "B"])
        [1.0, 0.0, 0.0, 0.0]
        """
        rows = choices if choices is not None else [None] * len(completions)
        return [float(self.is_correct(c, a, o))
                for c, a, o in zip(completions, answer, rows, strict=True)]

    def gold_completion(self, answer: str, **_) -> str:
        """"Answer: <gold letter>"."""
        return gold_text(answer)

    def run_info(self) -> dict:
        """What a run record should keep: the data source and, under `notes`, a warning when the
        rows are the hand-written fixture (the report prints notes under its tables)."""
        notes = []
        if self.fixture:
            notes.append(f"FIXTURE DATA, not {self.benchmark}: scored on the hand-written test rows "
                         f"in {self.fixture_dir}; these numbers say nothing about {self.benchmark} "
                         "(use task.source=hub or task.path=... for the real data)")
        return {"source": self.source, **self._info(), "notes": notes}

    def _info(self) -> dict:
        return {}

    def _warn_fixture(self, rows: int, split: str) -> None:
        if self.fixture:
            log.warning("task %s: %d %s rows from the hand-written FIXTURE (%s), not %s; scores "
                        "are not %s scores", self.name, rows, split, self.fixture_dir,
                        self.benchmark, self.benchmark)
