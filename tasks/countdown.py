"""Countdown: combine the given numbers with + - * / and parentheses to reach the target.

Sources (`source=` in conf/task/countdown*.yaml):
- "zoo": procedurally generated 3-number problems (numbers 1-20, integer targets 1-100), always
  solvable, with a reference solution; the zoo models are trained on its train split. Splits are
  disjoint by construction: each (numbers, target) problem is assigned to a split by a hash.
- "tinyzero": the shipped 10,002-row slice of Countdown-Tasks-3to4 (tasks/data/countdown, Apache-2.0);
  validation = last 500 train rows.
- "paper": the ES paper's own 2,200-item file from a user-supplied `path` (non-commercial licence,
  never shipped): first 200 rows train, last 2,000 test. The paper has no validation split, so
  validation = the 200 train rows (model selection on train data; the paper's own protocol).

Templates: "compact" for the zoo's base models (`3 7 12>22:` -> `(12+7)+3`), and "think" for
instruct models (reasoning in <think></think>, final equation in <answer></answer>).

Reward (the ES paper's / TinyZero's rule, on the completion only): 1 if the answer uses exactly the
given numbers, each once, only + - * / ( ), and evaluates within 1e-5 of the target; plus, for the
think template, 0.1 x format score (1.0 for <think>...</think> then <answer>...</answer>, else
0.1 for a think pair + 0.5 for an answer pair).
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

from tasks.arith import UnsafeExpression, evaluate
from tasks.base import DATA_DIR, TaskDataError

THINK_PROMPT = (
    "Using the numbers {nums}, write an equation that equals {target}. You may use +, -, * and / "
    "and parentheses, and must use every number exactly once. Reason step by step inside "
    "<think> </think>, then give only the final equation inside <answer> </answer>, "
    "for example <answer> (1 + 2) / 3 </answer>."
)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)
_FULL_FORMAT = re.compile(r"^\s*<think>.*?</think>\s*<answer>.*?</answer>\s*$", re.S)
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
        version: bump when scores change.
    """

    name = "countdown"

    def __init__(self, source: str = "zoo", template: str = "compact", path: str | None = None,
                 n_eval: int = 500, n_train: int | None = None, max_new_tokens: int = 16,
                 seed: int = 0, version: int = 1):
        if source not in ("zoo", "tinyzero", "paper"):
            raise TaskDataError(f"task.source={source!r} is unknown; use zoo, tinyzero or paper")
        if template not in ("compact", "think"):
            raise TaskDataError(f"task.template={template!r} is unknown; use compact or think")
        if source == "paper" and not path:
            raise TaskDataError("task.source=paper needs task.path=/path/to/countdown.json "
                                "(the ES paper's file is non-commercial and not shipped)")
        self.source, self.template, self.path = source, template, path
        self.n_eval, self.n_train, self.max_new_tokens = n_eval, n_train, max_new_tokens
        self.seed, self.version = seed, version

    # ---- data ----
    def load(self, split: str) -> datasets.Dataset:
        """Rows with `prompt`, `nums`, `target` (and `solution` for source=zoo)."""
        if split not in SPLIT_SIZES:
            raise TaskDataError(f"split {split!r} is unknown; use train, validation or test")
        rows = {"zoo": self._zoo_rows, "tinyzero": self._tinyzero_rows, "paper": self._paper_rows}[self.source](split)
        cap = self.n_train if split == "train" else self.n_eval
        rows = rows[:cap] if cap else rows
        for r in rows:
            r["prompt"] = self.prompt(r["nums"], r["target"])
        return datasets.Dataset.from_list(rows)

    def prompt(self, nums: list[int], target: int) -> str:
        if self.template == "compact":
            return f"{' '.join(map(str, nums))}>{target}:"
        return THINK_PROMPT.format(nums=list(nums), target=target)

    def _zoo_rows(self, split: str) -> list[dict]:
        return generate_problems(split, SPLIT_SIZES[split], seed=self.seed)

    def _tinyzero_rows(self, split: str) -> list[dict]:
        if split == "test":
            return _read_rows(DATA_DIR / "countdown" / "test.jsonl")
        train = _read_rows(DATA_DIR / "countdown" / "train.jsonl")
        return train[-500:] if split == "validation" else train[:-500]

    def _paper_rows(self, split: str) -> list[dict]:
        rows = _read_rows(Path(self.path).expanduser())
        if len(rows) < 2200:
            raise TaskDataError(f"{self.path}: expected the paper's 2,200 rows, found {len(rows)}")
        return rows[-2000:] if split == "test" else rows[:200]

    # ---- scoring ----
    def extract_answer(self, text: str) -> str | None:
        """The final equation, whitespace removed, or None when there is none.

        >>> Countdown(template="think").extract_answer("<think>x</think><answer> 1 + 2 </answer>")
        '1+2'
        """
        if self.template == "think":
            found = _ANSWER.findall(text)
            text = found[-1] if found else ""
        else:
            text = text.split("\n", 1)[0]
        text = re.sub(r"\s+", "", text)
        return text or None

    def is_correct(self, completion: str, nums: list[int], target: float, **_) -> bool:
        """True when the completion's equation uses exactly `nums` and hits `target` within 1e-5."""
        eq = self.extract_answer(completion)
        if eq is None:
            return False
        try:
            value, used = evaluate(eq)
        except UnsafeExpression:
            return False
        return sorted(used) == sorted(nums) and abs(float(value) - float(target)) < 1e-5

    def gold_completion(self, nums: list[int], target: int, solution: str | None = None, **_) -> str:
        """A correct completion in this task's template (solved by brute force when no solution is stored)."""
        eq = solution or solve(nums, target)
        if eq is None:
            raise TaskDataError(f"problem {nums} -> {target} has no solution")
        return eq if self.template == "compact" else f"<think>Try {eq}.</think>\n<answer>{eq}</answer>"

    def format_score(self, completion: str) -> float:
        """1.0 for <think>..</think><answer>..</answer>; else 0.1 per think pair + 0.5 per answer pair."""
        if _FULL_FORMAT.match(completion):
            return 1.0
        think = 0.1 if re.search(r"<think>.*?</think>", completion, re.S) else 0.0
        answer = 0.5 if _ANSWER.search(completion) else 0.0
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


def _read_rows(path: Path) -> list[dict]:
    """Read a json list or jsonl file of {target, nums|numbers}; name the bad row on error."""
    if not path.is_file():
        raise TaskDataError(f"data file {path} not found; check task.path (or reinstall esbench)")
    text = path.read_text()
    try:
        raw = json.loads(text) if text.lstrip().startswith("[") else [json.loads(l) for l in text.splitlines() if l.strip()]
    except json.JSONDecodeError as e:
        raise TaskDataError(f"{path}: not valid JSON/JSONL ({e}); expected rows like "
                            '{"target": 24, "nums": [3, 7, 12]}') from None
    rows = []
    for i, r in enumerate(raw):
        nums = r.get("nums", r.get("numbers")) if isinstance(r, dict) else None
        if not isinstance(nums, list) or not all(isinstance(x, int) for x in nums) or not isinstance(r.get("target"), (int, float)):
            raise TaskDataError(f"{path}: row {i} is malformed ({str(r)[:80]}); each row needs an "
                                "integer list `nums` (or `numbers`) and a numeric `target`")
        rows.append({"nums": list(nums), "target": r["target"]})
    return rows


def solve(nums: list[int], target: float) -> str | None:
    """Brute force: an equation over all of `nums` equal to `target`, or None (fine for <= 4 numbers)."""
    exprs = [(Fraction(n), str(n)) for n in nums]

    def search(items: list[tuple[Fraction, str]]) -> str | None:
        if len(items) == 1:
            return items[0][1] if abs(float(items[0][0]) - float(target)) < 1e-5 else None
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


def random_problem(rng: random.Random) -> dict:
    """One solvable 3-number problem (numbers 1-20, integer target 1-100) with a solution."""
    while True:
        a, b, c = (rng.randint(1, 20) for _ in range(3))
        op1, op2 = rng.choice("+-*/"), rng.choice("+-*/")
        solution = f"({a}{op1}{b}){op2}{c}"
        value, _ = evaluate(solution)  # c >= 1, so no division by zero
        if value.denominator == 1 and 1 <= value <= 100:
            nums = [a, b, c]
            rng.shuffle(nums)
            return {"nums": nums, "target": int(value), "solution": solution}


def generate_problems(split: str, count: int, seed: int = 0) -> list[dict]:
    """`count` distinct problems of one split, deterministic in (split, seed)."""
    rng = random.Random(f"countdown-{split}-{seed}")
    seen, rows = set(), []
    while len(rows) < count:
        p = random_problem(rng)
        key = (tuple(sorted(p["nums"])), p["target"])
        if key not in seen and _split_of(p["nums"], p["target"]) == split:
            seen.add(key)
            rows.append(p)
    return rows
