"""HotpotQA, distractor setting: multi-hop questions over 10 Wikipedia paragraphs (Yang et al. 2018).

Data. `source: hub` reads `hotpotqa/hotpot_qa`, config "distractor" (CC BY-SA 4.0); `path:` reads
the official files: a directory holding `hotpot_train_v1.1.json` and `hotpot_dev_distractor_v1.json`
(each a JSON list of {_id, question, answer, supporting_facts [[title, sent_id]], context
[[title, [sentences]]], type, level}), or one such file, which is then the test split only. A
file may also be JSONL (one row a line) and rows may be in the hub's shape (id, context {title,
sentences}, supporting_facts {title, sent_id}). No copy of HotpotQA ships here: with neither,
`source: local` reads a hand-written FIXTURE in the official format (tasks/data/hotpotqa, 14 rows
about invented places and people, NOT the benchmark); `run_info()["notes"]` then says so, and the
note is printed under every table built from such a run.
Splits. The official test set has no answers, so this harness's test = the official dev
(validation) set, 7,405 rows; validation = the 500 official train rows whose sha256(_id) is
smallest (a fixed sample that does not depend on file order; a train file under 2,000 rows gives
a quarter of its rows: the fixture 2 of 8); train = the other train rows. A row without an answer
(or with one that normalises to nothing) is rejected: a TaskDataError naming file:line and the fix.
Building the task reads and checks every row it can load, before any model loads: both files of a
`path` directory (both must be there), the one `path` file, both hub splits, or the fixture. A
malformed row, and a row whose question and paragraph titles alone exceed `max_prompt_chars`,
fail then; load() reuses the checked rows.

Prompt (PROMPT, in tasks/hotpotqa_data.py): the numbered paragraphs ("[1] Title" then the
paragraph's sentences), the question, and one answer format: the last line "Answer: <short
answer>". Prompts are at most `max_prompt_chars` characters (default 12,000, about 3,000 tokens). A
longer one is shortened deterministically: every paragraph is cut to the same character cap c, the
largest c that fits, keeping whole sentences where one fits (else the start of the first sentence)
and marking the cut with " [...]", so short paragraphs stay whole; titles and the question are
never cut (a row whose question and titles alone exceed the bound is a TaskDataError, raised when
the task is built). `run_info()["notes"]` counts per split the prompts shortened and those that
lost part of a supporting-fact sentence.

Grading: the official hotpot_evaluate_v1 definitions. The answer is the text after the last
"Answer:" in the completion (case-insensitive, the word "answer" then a colon: "Final answer:",
"**Answer:**" and "... (2016). Answer: X" count too, "The answer is X" does not), to the end of
that line, or the next non-blank line when the marker ends its line; no marker is no answer.
Normalisation: lower case, drop ASCII punctuation, drop the articles a/an/the, collapse
whitespace. Exact match (EM): normalised strings equal. Token F1: over the normalised whitespace
tokens, except that when either normalised side is yes, no or noanswer and the two differ, F1 = 0.
`is_correct` (so greedy_acc, pass@k, maj@k) is EM; `extract_answer` is the normalised answer
(None when the format is absent or the answer normalises to nothing), so maj@k votes over
normalised strings. EM is strict: on tests/test_task_hotpotqa.py's hand-judged set it rejects 7
of 19 right answers (extra words, "512 m" for "512 metres", a surname alone) and accepts no wrong one.

Reward (`reward: f1`, the default): token F1 priced for hedging, `priced_f1`: the official F1
divided by 1 + u, where u counts the answer's normalised tokens beyond the gold's (as multisets:
Counter(answer) - Counter(gold)). Why: official F1 pays for listing guesses. k one-token guesses
that include the right one ("Paris London Berlin" for Paris) earn F1 = 2/(k+1), more than the 1/k
that committing to one of them at random earns in expectation (0.667 against 0.5 for two). Divided
by 1 + u (u >= k - 1 whenever each wrong guess has a token the gold lacks) they earn at most
1/(1 + u) <= 1/k, here 2/(k(k+1)): "Paris London" 1/3, "Paris London Berlin" 1/6, "Paris or
London" 1/6 ("or" is a surplus token too), never more than a random commitment and less than
committing to the likelier guess. Neither 0 for a "multi-answer span" nor the F1 of its worst
candidate was used: both need the candidates found, and "Paris London" has no separator to find
them by, while golds hold commas and "and" ("Charlotte, North Carolina", "Simon and Garfunkel").
Precision x recall was not used either: it still pays when the wrong guesses are shorter than
the right one ("New York City Boston": 0.75 against 0.5). An answer with no surplus (the gold,
or a part of it: a surname alone, 0.667) keeps its F1, except that a strict prefix of the gold
("University of" for "University of Oxford", F1 0.8) earns one gold token's F1 (0.5, as "Oxford"
does): it lacks the token that tells the gold from the other answers sharing its prefix. So
the reward stays denser than EM: a near miss earns more than a wrong entity (0), and GRPO groups
and ES populations whose members all miss EM still differ in reward; each surplus token costs more than F1's precision term
charged ("Tessaly Prize 1995" for "Tessaly Prize": 0.4, F1 0.8), so padding does not pay. EM
earns 1; the reward is not the official F1, so `greedy_reward` and `mean_reward`
are not comparable with published HotpotQA F1 numbers (the note under the tables says so);
`f1_score` is the official F1. `reward: em` trains on EM (1/0, the same as is_correct) instead.
Every parsing step is linear in the completion's length (tests/test_task_redos.py times
64k-character adversarial answers).

    python -m pytest tests/test_task_hotpotqa.py -q
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import datasets

from tasks.base import (DATA_DIR, TaskDataError, check_count, is_int, load_hub, row_error,
                        user_path)
from tasks.hotpotqa_data import (CUT_MARK, FIX, PROMPT, bare_length, build_prompt,  # noqa: F401
                                 read_rows, validate)
from tasks.hotpotqa_grade import (answer_text, exact_match, f1_score, normalize_answer,  # noqa: F401
                                  predict, priced_f1)

HUB_ID, HUB_CONFIG = "hotpotqa/hotpot_qa", "distractor"
TRAIN_FILE, DEV_FILE = "hotpot_train_v1.1.json", "hotpot_dev_distractor_v1.json"
FIXTURE_DIR = DATA_DIR / "hotpotqa"
FIXTURE_FILES = {"train": "FIXTURE_NOT_HOTPOTQA_train.json", "dev": "FIXTURE_NOT_HOTPOTQA_dev.json"}
FIXTURE_ID_PREFIX = "FIXTURE-NOT-HOTPOTQA"  # every fixture row's _id starts so; any such row marks a run
N_VALIDATION = 500
MIN_PROMPT_CHARS = 1000


def _sha(row_id: str) -> str:
    return hashlib.sha256(row_id.encode("utf-8")).hexdigest()


class HotpotQA:
    """HotpotQA in the distractor setting (see the module docstring for data, prompt and grading).

    Args:
        version: bump when scores change.
        n_eval: use at most this many test/validation rows (None = all).
        max_new_tokens: completion length for evaluation and training.
        source: "local" (`path`, else the shipped FIXTURE) or "hub" (`hotpotqa/hotpot_qa`).
        path: a directory holding hotpot_train_v1.1.json and hotpot_dev_distractor_v1.json, or
            one official-format file (then the test split only).
        max_prompt_chars: the bound on a prompt's length; longer contexts are shortened.
        reward: "f1" (token F1 priced for hedging, the default) or "em" (exact match, 1/0).

    Raises:
        TaskDataError: a bad setting, a missing file, or a malformed row of any file or hub split
            the task reads (named `file:line` with the fix), all from the constructor.
    """

    name = "hotpotqa"

    def __init__(self, version: int = 1, n_eval: int | None = 500, max_new_tokens: int = 256,
                 source: str = "local", path: str | None = None, max_prompt_chars: int = 12000,
                 reward: str = "f1"):
        if source not in ("local", "hub"):
            raise TaskDataError(f"task.source={source!r} is unknown; use local or hub")
        if source == "hub" and path:
            raise TaskDataError("task.path is only read with task.source=local; drop one of them")
        if reward not in ("f1", "em"):
            raise TaskDataError(f"task.reward={reward!r} is unknown; use f1 or em")
        if not is_int(max_prompt_chars) or max_prompt_chars < MIN_PROMPT_CHARS:
            raise TaskDataError(f"task.max_prompt_chars={max_prompt_chars!r} is too small; use an "
                                f"integer of at least {MIN_PROMPT_CHARS}")
        check_count("n_eval", n_eval)
        self.version, self.n_eval, self.max_new_tokens = version, n_eval, max_new_tokens
        self.source, self.path, self.max_prompt_chars, self.reward_kind = source, path, max_prompt_chars, reward
        self.fixture = source == "local" and not path
        self._prompt_stats: dict[str, dict] = {}
        # every row, checked now (before any model loads); a single `path` file is the dev split only
        single = bool(path) and user_path(path, "a HotpotQA directory or file").is_file()
        self._checked = {official: self._rows(official)
                         for official in (("dev",) if single else ("dev", "train"))}

    # ---- data ----
    def load(self, split: str) -> datasets.Dataset:
        """Rows with `prompt`, `id`, `question`, `answer` (gold), `type` and `level`."""
        if split not in ("train", "validation", "test"):
            raise TaskDataError(f"split {split!r} is unknown; use train, validation or test")
        official = "dev" if split == "test" else "train"
        if official not in self._checked:
            raise TaskDataError(f"task.path={self.path} is one file, read as the test split; for train "
                                f"and validation give a directory with {TRAIN_FILE} and {DEV_FILE}")
        rows = self._checked[official]
        if split != "test":
            n_val = min(N_VALIDATION, len(rows) // 4)
            order = sorted(range(len(rows)), key=lambda i: (_sha(rows[i][2]["_id"]), i))
            val = set(order[:n_val])
            rows = [r for i, r in enumerate(rows) if (i in val) == (split == "validation")]
        if split != "train" and self.n_eval:
            rows = rows[:self.n_eval]
        out, truncated, support_cut = [], 0, 0
        for where, line, row in rows:
            context = [(title, sentences) for title, sentences in row["context"]]
            prompt, kept = build_prompt(row["question"], context, self.max_prompt_chars)  # fits: checked
            if any(n < len(s) for n, (_, s) in zip(kept, context)):
                truncated += 1
                shown = {}
                for (title, _), n in zip(context, kept):
                    shown.setdefault(title, n)
                support_cut += any(title in shown and sent_id >= shown[title]
                                   for title, sent_id in row.get("supporting_facts", []))
            out.append({"prompt": prompt, "id": row["_id"], "question": row["question"],
                        "answer": row["answer"], "type": row.get("type", ""), "level": row.get("level", "")})
        self._prompt_stats[split] = {"rows": len(out), "truncated": truncated, "support_cut": support_cut}
        return datasets.Dataset.from_list(out)

    def _rows(self, official: str) -> list[tuple[object, int, dict]]:
        """(where, line, checked row) for the official split "train" or "dev"."""
        if self.source == "hub":
            hub_split = "validation" if official == "dev" else "train"
            raw = load_hub(HUB_ID, HUB_CONFIG, hub_split, "Use task.source=local task.path=<a "
                           f"directory with {TRAIN_FILE} and {DEV_FILE}> or set HF_DATASETS_CACHE "
                           "to a cache that holds it.")
            where = f"{HUB_ID}:{hub_split}"
            return [(where, i, self._check(r, where, i)) for i, r in enumerate(raw, start=1)]
        path = self._file(official)
        return [(path, i, self._check(r, path, i)) for i, r in read_rows(path)]

    def _check(self, raw, where, line: int) -> dict:
        """One checked row (tasks/hotpotqa_data.validate), whose question and titles fit the bound."""
        row = validate(raw, where, line)
        if bare_length(row["question"], row["context"]) > self.max_prompt_chars:
            raise row_error(where, line, "the question and paragraph titles alone are over "
                            f"task.max_prompt_chars={self.max_prompt_chars} characters",
                            "raise task.max_prompt_chars")
        if row["_id"].startswith(FIXTURE_ID_PREFIX):
            self.fixture = True  # fixture rows through task.path are marked too
        return row

    def _file(self, official: str) -> Path:
        if not self.path:
            return FIXTURE_DIR / FIXTURE_FILES[official]
        given = user_path(self.path, "a HotpotQA directory or file")
        if given.is_file():
            return given  # the dev (test) split only: __init__ reads no train from it
        return given / (TRAIN_FILE if official == "train" else DEV_FILE)

    # ---- scoring ----
    def gold_completion(self, answer: str, **_) -> str:
        """The gold answer in the prompt's format."""
        return "Answer: " + " ".join(answer.split())

    def extract_answer(self, text: str) -> str | None:
        """The normalised answer, or None when the "Answer:" line is absent or empty.

        >>> HotpotQA().extract_answer("Thale was born in Portkell.\\nAnswer: **Portkell**.")
        'portkell'
        >>> HotpotQA().extract_answer("It is Portkell.") is None
        True
        """
        return predict(text)

    def is_correct(self, completion: str, answer: str, **_) -> bool:
        """Exact match (official) of the completion's answer with the gold `answer`."""
        pred = predict(completion)
        return pred is not None and pred == normalize_answer(answer)

    def f1(self, completion: str, answer: str) -> float:
        """Official token F1 of the completion's answer (0 when it has none); not the reward."""
        raw = answer_text(completion)
        return 0.0 if raw is None else f1_score(raw, answer)

    def reward(self, completions: list[str], answer: list[str], **kwargs) -> list[float]:
        """TRL-style reward: `priced_f1` with `reward: f1` (the default), EM (1/0) with `reward: em`.

        >>> HotpotQA().reward(["Answer: Tessaly Prize 1995", "Answer: no", "Answer: Yes.",
        ...                    "Answer: Paris London"], answer=["the Tessaly Prize", "yes", "yes", "Paris"])
        [0.4, 0.0, 1.0, 0.3333333333333333]
        """
        pairs = zip(completions, answer, strict=True)
        if self.reward_kind == "em":
            return [float(self.is_correct(c, a)) for c, a in pairs]
        return [0.0 if (raw := answer_text(c)) is None else priced_f1(raw, a) for c, a in pairs]

    # ---- run info ----
    def run_info(self) -> dict:
        """What a run record keeps: fixture or not, the prompt bound, per split how many prompts
        were shortened, and `notes`, one line each printed under the tables."""
        notes = []
        if self.fixture:
            notes.append("FIXTURE DATA, NOT HotpotQA: scores come from the hand-written rows in "
                         "tasks/data/hotpotqa (a pipeline check, not a benchmark number); use "
                         "task.path= or task.source=hub for HotpotQA")
        notes.append("greedy_acc, pass@k, maj@k: exact match; " + (
            "greedy_reward, mean_reward: token F1 / (1 + answer tokens beyond the gold's), the "
            "reward (priced for hedging; not the official F1)" if self.reward_kind == "f1"
            else "the reward is exact match too (task.reward=em): no F1 column"))
        for split, s in self._prompt_stats.items():
            if s["truncated"]:
                notes.append(f"{split}: {s['truncated']} of {s['rows']} prompts shortened to "
                             f"task.max_prompt_chars={self.max_prompt_chars}; {s['support_cut']} "
                             "of them lost part of a supporting-fact sentence")
        return {"fixture": self.fixture, "reward": self.reward_kind,
                "max_prompt_chars": self.max_prompt_chars, "prompts": dict(self._prompt_stats),
                "notes": notes}
