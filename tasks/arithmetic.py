"""Integer arithmetic with a difficulty knob: a verifiable task a small real model can climb.

The shipped reasoning tasks (Countdown, GSM8K, MATH-500, MBPP) sit at or near 0% greedy for a
135M-parameter pretrained model, so no method can show a gain on them; this family has a setting
for every size. A problem is `a op b` with operands of `digits` digits and op drawn from `ops`:

    What is 47 + 38? Reply with just the number.      ->  85

Problems are generated from a seed; a problem's split is a hash of (a, op, b), so train, validation
and test never share a problem, at every setting. All three splits are generated, and their sizes
checked, when the task is built. Scoring: the last integer in the completion equals the answer;
extract_answer is that integer, for maj@k. Reward is 1 or 0.

A fresh test split: `test_seed=S` draws the test problems from seed S instead, skipping every test
problem of seed `seed` (all 500, so every earlier run's test split at any n_eval), while train and
validation stay seed `seed`'s. A confirmation reruns a design unchanged on problems no earlier run
was scored on (conf/experiment/placebo_real_confirm.yaml). An integer may carry thousands
separators, commas in groups of three ("1,024"); any other run of digits and commas ("8,5",
"1,2,3,4") is not a number, and when it comes last the completion has no answer. A Unicode minus or
dash before the digits is a minus sign ("−12" is -12). A hedge ("84 or 85") is no answer.

    python -m harness model=smollm2-135m-instruct task=arithmetic method=base
    python -m harness ... task=arithmetic task.digits=3 task.ops=+-*    # harder
"""
from __future__ import annotations

import hashlib
import random
import re

import datasets

from tasks.answers import MINUS_SIGNS, hedge_before
from tasks.base import TaskDataError, check_count

SPLITS = {"train": 5000, "validation": 500, "test": 500}
OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
_INT = re.compile("[" + MINUS_SIGNS + r"]?\d+(?:,\d+)*")  # digits with commas between: then checked
_GROUPED = re.compile(r"\d{1,3}(?:,\d{3})+|\d+")  # thousands separators: groups of three only
PROMPT = "What is {a} {op} {b}? Reply with just the number."


def split_of(a: int, op: str, b: int) -> str:
    """Disjoint splits by a hash of the problem: 10% test, 10% validation, 80% train."""
    h = int(hashlib.sha256(f"{a}{op}{b}".encode()).hexdigest(), 16) % 10
    return "test" if h == 0 else "validation" if h == 1 else "train"


class Arithmetic:
    """Integer arithmetic (see the module docstring).

    Args:
        digits: operand length in digits, 1-6 (1: 0-9; 2: 10-99; ...).
        ops: the operators problems draw from, a string over "+-*".
        n_eval: use at most this many test/validation problems (None = all 500).
        n_train: use at most this many training problems (None = all 5,000).
        max_new_tokens: completion length for evaluation and training.
        seed: generator seed.
        test_seed: draw the test split from this seed, disjoint from seed `seed`'s full test split
            (None: seed `seed`'s own).
        version: bump when scores change.
    """

    name = "arithmetic"

    def __init__(self, digits: int = 2, ops: str = "+-", n_eval: int | None = 500, n_train: int | None = None,
                 max_new_tokens: int = 16, seed: int = 0, test_seed: int | None = None, version: int = 1):
        if not (isinstance(digits, int) and 1 <= digits <= 6):
            raise TaskDataError(f"task.digits={digits!r} is unsupported; use an integer from 1 to 6")
        if not ops or not isinstance(ops, str) or set(ops) - set(OPS) or len(set(ops)) != len(ops):
            raise TaskDataError(f"task.ops={ops!r} is not a set of operators; use a string over '+-*', e.g. '+-'")
        if digits == 1 and len(ops) == 1:
            raise TaskDataError("task.digits=1 with a single operator has too few distinct problems (100) for "
                                "three disjoint splits; use digits>=2 or more operators")
        check_count("n_eval", n_eval)
        check_count("n_train", n_train)
        self.digits, self.ops, self.n_eval, self.n_train = digits, ops, n_eval, n_train
        if test_seed is not None and (not isinstance(test_seed, int) or test_seed == seed):
            raise TaskDataError(f"task.test_seed={test_seed!r} must be an integer other than task.seed={seed} "
                                "(null: the seed's own test split)")
        self.max_new_tokens, self.seed, self.test_seed, self.version = max_new_tokens, seed, test_seed, version
        self._rows = {}  # every split now, so a setting too small for its counts fails at build
        for split in ("test", "validation", "train"):
            size = SPLITS[split]
            cap = self.n_train if split == "train" else self.n_eval
            self._rows[split] = self.problems(split, min(cap or size, size))
        if test_seed is not None:
            earlier = {(r["a"], r["op"], r["b"]) for r in self.problems("test", SPLITS["test"])}
            self._rows["test"] = self.problems("test", len(self._rows["test"]), seed=test_seed, exclude=earlier)

    def load(self, split: str) -> datasets.Dataset:
        """Rows with `prompt`, `a`, `op`, `b`, `answer`."""
        if split not in SPLITS:
            raise TaskDataError(f"split {split!r} is unknown; use train, validation or test")
        return datasets.Dataset.from_list(self._rows[split])

    def problems(self, split: str, count: int, seed: int | None = None, exclude: set = frozenset()) -> list[dict]:
        """`count` distinct problems of `split` not in `exclude`, deterministic in (digits, ops, seed, split)."""
        seed = self.seed if seed is None else seed
        lo, hi = (0 if self.digits == 1 else 10 ** (self.digits - 1)), 10 ** self.digits - 1
        rng = random.Random(f"arithmetic-{self.digits}-{self.ops}-{seed}-{split}")
        space = (hi - lo + 1) ** 2 * len(self.ops)
        # the split's share of the space, at most half of it (three quarters with an earlier split excluded)
        if count + len(exclude) > space * (0.8 if split == "train" else 0.1) * (0.75 if exclude else 0.5):
            raise TaskDataError(f"task.digits={self.digits} task.ops={self.ops!r} has {space} problems, too few for "
                                f"{count} {split} problems; use more digits or operators, or a smaller n_eval/n_train")
        seen, rows = set(exclude), []
        while len(rows) < count:
            a, op, b = rng.randint(lo, hi), rng.choice(self.ops), rng.randint(lo, hi)
            if (a, op, b) in seen or split_of(a, op, b) != split:
                continue
            seen.add((a, op, b))
            rows.append({"prompt": PROMPT.format(a=a, op=op, b=b), "a": a, "op": op, "b": b, "answer": OPS[op](a, b)})
        return rows

    def extract_answer(self, text: str) -> str | None:
        """The last integer of `text` in canonical form; None when there is none, when the last
        one is not a number ("8,5") or when it ends a hedge ("84 or 85").

        >>> [Arithmetic().extract_answer(t) for t in ("It is 1,024.", "8,5", "84 or 85", "−12")]
        ['1024', None, None, '-12']
        """
        last = None
        for last in _INT.finditer(text):
            pass
        if last is None or hedge_before(text, last.start()):
            return None
        text = last.group(0)
        sign, digits = ("-", text[1:]) if text[0] in MINUS_SIGNS else ("", text)
        if not _GROUPED.fullmatch(digits):
            return None
        digits = digits.replace(",", "")
        digits = digits.lstrip("0") or "0"  # canonical without int(): a 20,000-digit answer is text, not a crash
        return "0" if digits == "0" else sign + digits

    def is_correct(self, completion: str, answer: int, **_) -> bool:
        return self.extract_answer(completion) == str(int(answer))

    def gold_completion(self, answer: int, **_) -> str:
        return str(answer)

    def reward(self, completions: list[str], answer: list[int], **_) -> list[float]:
        return [float(self.is_correct(c, a)) for c, a in zip(completions, answer)]
