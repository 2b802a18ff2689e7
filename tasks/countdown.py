"""Countdown: combine the given numbers with + - * / and parentheses to reach the target.

Sources (`source=` in conf/task/countdown*.yaml):
- "zoo": procedurally generated 3-number problems (numbers 1-20, integer targets 1-100), always
  solvable, with a reference solution; the zoo models are trained on its train split. Splits are
  disjoint by construction: each (numbers, target) problem is assigned to a split by a hash.
- "tinyzero": the shipped 10,002-row slice of Countdown-Tasks-3to4 (tasks/data/countdown, Apache-2.0);
  validation = last 500 rows of its train file, less any problem (the multiset of numbers and the
  target, in any order) that the rest of the train file or the test file also holds: 497 rows.
- "paper": the ES paper's own 2,200-item file from a user-supplied `path` (non-commercial licence,
  never shipped): first 200 rows train, last 2,000 test. The paper has no validation split and the
  file has no row outside those two, so validation = the "tinyzero" validation rows (the same HF
  split, rows 7,501-8,000 of it; the paper's file is the head of it) less any problem anywhere in
  the paper's file: never a row the paper trains or tests on. (Before task version 2, validation was
  the 200 train rows.)

Every source's validation split is disjoint from its train and test problems (tests/test_splits.py).
The files of the "tinyzero" and "paper" sources are read and every row checked when the task is
built, before any model loads: a malformed row (e.g. `target: "x"`) is a TaskDataError naming
`file:line`, the field and the fix; load() reuses the checked rows.

Templates: "compact" for the zoo's base models (`3 7 12>22:` -> `(12+7)+3`), and "think" for
instruct models (reasoning in <think></think>, final equation in <answer></answer>).

Reward (the ES paper's / TinyZero's rule, on the completion only): 1 if the answer uses exactly the
given numbers, each once, only + - * / ( ), and evaluates to the target; plus, for the think
template, 0.1 x format score (1.0 for <think>...</think> then <answer>...</answer>, else 0.1 for a
think pair + 0.5 for an answer pair). "Evaluates to" is exact: the equation is computed in
fractions.Fraction and compared without tolerance. TinyZero compares floats within 1e-5, which
accepts near-misses such as 5+1/(99*98*97) for target 5 (reachable with 5-6 numbers, or target 0);
on the shipped data (at most 4 numbers below 100, targets from 1) no near-miss is that close, so
their scores are the same either way.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import random
import re
from fractions import Fraction
from pathlib import Path

import datasets

from tasks.base import (DATA_DIR, TaskDataError, check_count, is_int, json_kind, parse_json,
                        read_text, row_error, user_path)
from tasks.judge.equation import UnsafeExpression, evaluate

THINK_PROMPT = (
    "Using the numbers {nums}, write an equation that equals {target}. You may use +, -, * and / "
    "and parentheses, and must use every number exactly once. Reason step by step inside "
    "<think> </think>, then give only the final equation inside <answer> </answer>, "
    "for example <answer> (1 + 2) / 3 </answer>."
)
# Tags are found with str.find/rfind, never with `<answer>(.*?)</answer>`: a lazy regex rescans to
# the end from every unclosed tag, so 100,000 repeats of "<answer>" took over 20 s (quadratic).
_THINK_TO_ANSWER = re.compile(r"</think>\s*<answer>")  # linear: \s* cannot run into a "<"
MAX_NUMBERS = 6  # the classic game's six; the brute-force `solve` explodes beyond that
MAX_ABS = 10**9  # Arrow stores int64, and Countdown numbers are small
ROW_EXAMPLE = '{"target": 24, "nums": [3, 7, 12]}'
SPLIT_SIZES = {"train": 4000, "validation": 500, "test": 500}


class Countdown:
    """The Countdown task (see module docstring).

    Args:
        source: "zoo", "tinyzero" or "paper".
        template: "compact" or "think".
        path: the paper's data file (json list or jsonl with `target` and `nums`/`numbers`).
        n_eval: use at most this many test/validation rows.
        n_train: use at most this many training rows (None = all).
        max_new_tokens: completion length for evaluation and training.
        seed: generator seed for source="zoo".
        numbers: how many numbers a source="zoo" problem has, 3 (the zoo) or 4 (the ladder's
            harder post-training task, with headroom above the base models).
        version: bump when scores change.

    Raises:
        TaskDataError: a bad setting, or (source tinyzero or paper) a missing file, a malformed
            row (named `file:line` with the fix) or a paper file short of 2,200 rows, all from the
            constructor: every row is read and checked there, before any model loads.
    """

    name = "countdown"

    def __init__(self, source: str = "zoo", template: str = "compact", path: str | None = None,
                 n_eval: int = 500, n_train: int | None = None, max_new_tokens: int = 16,
                 seed: int = 0, numbers: int = 3, version: int = 1):
        if source not in ("zoo", "tinyzero", "paper"):
            raise TaskDataError(f"task.source={source!r} is unknown; use zoo, tinyzero or paper")
        if template not in ("compact", "think"):
            raise TaskDataError(f"task.template={template!r} is unknown; use compact or think")
        if source == "paper" and not path:
            raise TaskDataError("task.source=paper needs task.path=/path/to/countdown.json "
                                "(the ES paper's file is non-commercial and not shipped)")
        if numbers not in (3, 4):
            raise TaskDataError(f"task.numbers={numbers!r} is unsupported; use 3 or 4 (source=zoo only)")
        if numbers != 3 and source != "zoo":
            raise TaskDataError(f"task.numbers={numbers} applies to source=zoo only; the {source} data fix their own")
        self.source, self.template, self.path, self.numbers = source, template, path, numbers
        check_count("n_eval", n_eval)
        check_count("n_train", n_train)
        self.n_eval, self.n_train, self.max_new_tokens = n_eval, n_train, max_new_tokens
        self.seed, self.version = seed, version
        # the files' rows, checked now (before any model loads); zoo problems are generated, not read
        self._files = {"tinyzero": self._tinyzero_files, "paper": self._paper_files,
                       "zoo": dict}[source]()

    # ---- data ----
    def load(self, split: str) -> datasets.Dataset:
        """Rows with `prompt`, `nums`, `target` (and `solution` for source=zoo)."""
        if split not in SPLIT_SIZES:
            raise TaskDataError(f"split {split!r} is unknown; use train, validation or test")
        rows = {"zoo": self._zoo_rows, "tinyzero": self._tinyzero_rows, "paper": self._paper_rows}[self.source](split)
        cap = self.n_train if split == "train" else self.n_eval
        rows = rows[:cap] if cap else rows
        rows = [{**r, "prompt": self.prompt(r["nums"], r["target"])} for r in rows]  # copies: cached rows stay
        return datasets.Dataset.from_list(rows)

    def prompt(self, nums: list[int], target: int) -> str:
        if self.template == "compact":
            return f"{' '.join(map(str, nums))}>{target}:"
        return THINK_PROMPT.format(nums=list(nums), target=target)

    def _zoo_rows(self, split: str) -> list[dict]:
        return generate_problems(split, SPLIT_SIZES[split], seed=self.seed, numbers=self.numbers)

    @staticmethod
    def _tinyzero_files() -> dict[str, list[dict]]:
        return {"tinyzero_train": _read_rows(DATA_DIR / "countdown" / "train.jsonl"),
                "tinyzero_test": _read_rows(DATA_DIR / "countdown" / "test.jsonl")}

    def _paper_files(self) -> dict[str, list[dict]]:
        path = user_path(self.path, "the paper's Countdown file")
        rows = _read_rows(path)
        if len(rows) < 2200:
            raise TaskDataError(f"{path}: {len(rows):,} rows, but the ES paper's file has 2,200 (200 "
                                "train, then 2,000 test); point task.path at that file")
        return {"paper": rows, **self._tinyzero_files()}  # tinyzero: the validation rows

    def _tinyzero_rows(self, split: str) -> list[dict]:
        train, test = self._files["tinyzero_train"], self._files["tinyzero_test"]
        if split == "test":
            return test
        if split == "train":
            return train[:-500]
        # 3 of the last 500 rows repeat a training problem with its numbers in another order
        return _without(train[-500:], train[:-500] + test)

    def _paper_rows(self, split: str) -> list[dict]:
        rows = self._files["paper"]
        if split == "validation":  # outside the file: its rows are all train (first 200) or test (last 2,000)
            return _without(self._tinyzero_rows("validation"), rows)
        return rows[-2000:] if split == "test" else rows[:200]

    # ---- scoring ----
    def extract_answer(self, text: str) -> str | None:
        """The final equation, whitespace removed, or None when there is none.

        >>> Countdown(template="think").extract_answer("<think>x</think><answer> 1 + 2 </answer>")
        '1+2'
        """
        if self.template == "think":
            text = last_tagged(text, "answer") or ""
        else:
            text = text.split("\n", 1)[0]
        text = re.sub(r"\s+", "", text)
        return text or None

    def is_correct(self, completion: str, nums: list[int], target: float, **_) -> bool:
        """True when the completion's equation uses exactly `nums` and equals `target` exactly."""
        eq = self.extract_answer(completion)
        if eq is None:
            return False
        try:
            value, used = evaluate(eq)
        except UnsafeExpression:
            return False
        return sorted(used) == sorted(nums) and value == Fraction(target)  # no tolerance

    def gold_completion(self, nums: list[int], target: int, solution: str | None = None, **_) -> str:
        """A correct completion in this task's template (solved by brute force when no solution is stored)."""
        eq = solution or solve(nums, target)
        if eq is None:
            raise TaskDataError(f"problem {nums} -> {target} has no solution")
        return eq if self.template == "compact" else f"<think>Try {eq}.</think>\n<answer>{eq}</answer>"

    def format_score(self, completion: str) -> float:
        """1.0 for <think>..</think><answer>..</answer>; else 0.1 per think pair + 0.5 per answer pair."""
        if _full_format(completion):
            return 1.0
        think = 0.1 if _has_pair(completion, "think") else 0.0
        answer = 0.5 if _has_pair(completion, "answer") else 0.0
        return think + answer

    def reward(self, completions: list[str], nums: list[list[int]], target: list[int], **kwargs) -> list[float]:
        """TRL-style reward: correctness (1) + 0.1 x format score for the think template.

        >>> t = Countdown(template="think")
        >>> t.reward(["<think>12+7=19</think><answer>(12+7)+3</answer>", "__import__('os')"],
        ...          nums=[[3, 7, 12], [3, 7, 12]], target=[22, 22])
        [1.1, 0.0]
        """
        out = []
        for completion, n, t in zip(completions, nums, target, strict=True):
            r = float(self.is_correct(completion, n, t))
            if self.template == "think":
                r += 0.1 * self.format_score(completion)
            out.append(round(r, 6))
        return out


def last_tagged(text: str, tag: str) -> str | None:
    """The content of the last complete <tag>...</tag>, in linear time (see _THINK_TO_ANSWER).

    The last closing tag, then the nearest opening tag before it: the same answer as TinyZero's
    "last match of <answer>(.*?)</answer>" for well-formed text, and a cut-off final
    "<answer>..." falls back to the last complete pair, as there.

    >>> last_tagged("<answer>1</answer> <answer>2</answer><answer>3", "answer")
    '2'
    """
    opening, closing = f"<{tag}>", f"</{tag}>"
    end = text.rfind(closing)
    start = text.rfind(opening, 0, end) if end >= 0 else -1
    return None if start < 0 else text[start + len(opening):end]


def _has_pair(text: str, tag: str) -> bool:
    """An opening tag with a closing tag somewhere after it (what `<tag>.*?</tag>` searched for)."""
    start = text.find(f"<{tag}>")
    return start >= 0 and text.find(f"</{tag}>", start + len(tag) + 2) >= 0


def _full_format(text: str) -> bool:
    """`^\\s*<think>.*?</think>\\s*<answer>.*?</answer>\\s*$`, decided in linear time."""
    s = text.strip()
    if not (s.startswith("<think>") and s.endswith("</answer>")):
        return False
    m = _THINK_TO_ANSWER.search(s, len("<think>"))  # the earliest leaves the most room after it
    return m is not None and m.end() <= len(s) - len("</answer>")


def problem_key(row: dict) -> tuple:
    """A problem whatever the order of its numbers: (sorted numbers, target)."""
    return tuple(sorted(row["nums"])), row["target"]


def _without(rows: list[dict], others: list[dict]) -> list[dict]:
    """`rows` less every problem that `others` holds (in any order of its numbers)."""
    taken = {problem_key(r) for r in others}
    return [r for r in rows if problem_key(r) not in taken]


def _read_rows(path: Path) -> list[dict]:
    """Rows {nums, target} from a JSON-list or JSONL file; a bad row is named by its file line."""
    text = read_text(path, "Countdown data")
    pairs = _json_list_rows(text, path) if text.lstrip().startswith("[") else [
        (i, parse_json(line, path, i)) for i, line in enumerate(text.split("\n"), start=1)
        if line.strip()]
    if not pairs:
        raise TaskDataError(f"{path} holds no rows; it needs rows like {ROW_EXAMPLE}")
    return [_row(raw, path, line) for line, raw in pairs]


def _json_list_rows(text: str, path: Path) -> list[tuple[int, object]]:
    """(line, element) for a JSON list, so its rows are named by line just like JSONL rows."""
    data = parse_json(text, path)  # a syntax error is reported here, at its own line
    decoder, out = json.JSONDecoder(), []
    pos = counted = text.index("[") + 1
    line = text.count("\n", 0, pos) + 1
    for element in data:
        while text[pos] in " \t\r\n,":
            pos += 1
        line += text.count("\n", counted, pos)  # counted incrementally: linear in the file
        out.append((line, element))
        counted, pos = pos, decoder.raw_decode(text, pos)[1]
    return out


def _row(raw, path: Path, line: int) -> dict:
    """Validate one row: `nums` (or `numbers`) a list of small non-negative ints, `target` an int."""
    if not isinstance(raw, dict):
        raise row_error(path, line, f"the row is {json_kind(raw)}, not an object",
                        f"write rows like {ROW_EXAMPLE}")
    key = "nums" if "nums" in raw else "numbers"
    nums = raw.get(key)
    if key not in raw:
        raise row_error(path, line, "the row has no `nums` (or `numbers`) field",
                        f"write rows like {ROW_EXAMPLE}")
    if not (isinstance(nums, list) and 1 <= len(nums) <= MAX_NUMBERS
            and all(is_int(x) and 0 <= x < MAX_ABS for x in nums)):
        raise row_error(path, line, f"field `{key}` is {_show(nums)}",
                        f"it must be a list of 1 to {MAX_NUMBERS} non-negative integers below "
                        f"{MAX_ABS:,} (true/false, 2.0 and \"2\" are not integers)")
    target = raw.get("target")
    if isinstance(target, float) and target.is_integer():
        target = int(target)  # 24.0 from a float column is the integer 24; NaN, inf, 2.5 are not
    if not (is_int(target) and abs(target) < MAX_ABS):
        raise row_error(path, line, "field `target` is " + ("missing" if "target" not in raw
                                                            else _show(target)),
                        f"it must be a finite integer below {MAX_ABS:,} in absolute value")
    return {"nums": list(nums), "target": target}


def _show(value) -> str:
    """A short repr for an error message (a row can be megabytes)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def solve(nums: list[int], target: float) -> str | None:
    """Brute force: an equation over all of `nums` equal to `target`, or None (fine for <= 4 numbers)."""
    exprs = [(Fraction(n), str(n)) for n in nums]
    goal = Fraction(target)  # exact, as `is_correct` grades

    def search(items: list[tuple[Fraction, str]]) -> str | None:
        if len(items) == 1:
            return items[0][1] if items[0][0] == goal else None
        for i, j in itertools.permutations(range(len(items)), 2):
            (a, ea), (b, eb) = items[i], items[j]
            rest = [items[k] for k in range(len(items)) if k not in (i, j)]
            options = [(a + b, "+"), (a - b, "-"), (a * b, "*")] + ([(a / b, "/")] if b else [])
            for value, op in options:
                found = search(rest + [(value, f"({ea}{op}{eb})")])
                if found:
                    return found
        return None

    found = search(exprs)
    return found[1:-1] if found and found.startswith("(") else found


# ---- the procedural generator used by the zoo ----
def _split_of(nums: list[int], target: int) -> str:
    """Disjoint splits: a problem's split is a hash of its multiset of numbers and target."""
    h = int(hashlib.sha256(f"{sorted(nums)}>{target}".encode()).hexdigest(), 16) % 10
    return "test" if h == 0 else "validation" if h == 1 else "train"


def random_problem(rng: random.Random, numbers: int = 3) -> dict:
    """One solvable problem of `numbers` numbers (1-20, integer target 1-100) with a solution.

    Three numbers: `(a o b) o c`. Four: `((a o b) o c) o d` or `(a o b) o (c o d)`, equally often.
    """
    if numbers == 4:
        return _random_problem4(rng)
    while True:
        a, b, c = (rng.randint(1, 20) for _ in range(3))
        op1, op2 = rng.choice("+-*/"), rng.choice("+-*/")
        solution = f"({a}{op1}{b}){op2}{c}"
        value, _ = evaluate(solution)  # c >= 1, so no division by zero
        if value.denominator == 1 and 1 <= value <= 100:
            nums = [a, b, c]
            rng.shuffle(nums)
            return {"nums": nums, "target": int(value), "solution": solution}


def _random_problem4(rng: random.Random) -> dict:
    while True:
        a, b, c, d = (rng.randint(1, 20) for _ in range(4))
        o1, o2, o3 = (rng.choice("+-*/") for _ in range(3))
        chain = rng.random() < 0.5
        solution = f"(({a}{o1}{b}){o2}{c}){o3}{d}" if chain else f"({a}{o1}{b}){o2}({c}{o3}{d})"
        try:
            value, _ = evaluate(solution)
        except UnsafeExpression:  # division by zero: (c-d) can be 0
            continue
        if value.denominator == 1 and 1 <= value <= 100:
            nums = [a, b, c, d]
            rng.shuffle(nums)
            return {"nums": nums, "target": int(value), "solution": solution}


def generate_problems(split: str, count: int, seed: int = 0, numbers: int = 3) -> list[dict]:
    """`count` distinct problems of one split, deterministic in (split, seed, numbers)."""
    # 3-number streams keep their original seed string, so the shipped zoo's data never changes.
    rng = random.Random(f"countdown-{split}-{seed}" if numbers == 3 else f"countdown{numbers}-{split}-{seed}")
    seen, rows = set(), []
    while len(rows) < count:
        p = random_problem(rng, numbers)
        key = (tuple(sorted(p["nums"])), p["target"])
        if key not in seen and _split_of(p["nums"], p["target"]) == split:
            seen.add(key)
            rows.append(p)
    return rows
