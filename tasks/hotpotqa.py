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
(or with one that normalises to nothing) is rejected at load: a TaskDataError naming file:line.

Prompt (PROMPT below): the numbered paragraphs ("[1] Title" then the paragraph's sentences), the
question, and one answer format: the last line "Answer: <short answer>". Prompts are at most
`max_prompt_chars` characters (default 12,000, about 3,000 tokens). A longer one is shortened
deterministically: every paragraph is cut to the same character cap c, the largest c that fits,
keeping whole sentences where one fits (else the start of the first sentence) and marking the cut
with " [...]", so short paragraphs stay whole; titles and the question are never cut (a row
whose question and titles alone exceed the bound is a TaskDataError). `run_info()["notes"]` counts
per split the prompts shortened and those that lost part of a supporting-fact sentence.

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

Reward (`reward: f1`, the default): token F1. It is the denser signal: a near miss ("Tessaly Prize
1995" for "Tessaly Prize", 0.8) earns more than a wrong entity (0), so GRPO groups and ES
populations whose members all miss EM still differ in reward, while extra words cost precision,
so padding an answer does not pay. The cost: training optimises F1, not the EM that greedy_acc
reports (F1 is 1 whenever EM is, and 0 for most wrong answers). F1 also makes `greedy_reward` and
`mean_reward` the F1 columns of every table, next to EM's `greedy_acc`, with no change to the
harness (the note under the tables says which is which). `reward: em` trains on EM (1/0, the same
as is_correct) instead; the tables then have no F1 column. Every parsing step is linear in the
completion's length.

    python -m pytest tests/test_task_hotpotqa.py -q
"""
from __future__ import annotations

import hashlib
import json
import re
import string
from collections import Counter
from pathlib import Path

import datasets

from tasks.base import (DATA_DIR, TaskDataError, check_count, is_int, json_kind, read_jsonl,
                        read_text, row_error, user_path)

HUB_ID, HUB_CONFIG = "hotpotqa/hotpot_qa", "distractor"
TRAIN_FILE, DEV_FILE = "hotpot_train_v1.1.json", "hotpot_dev_distractor_v1.json"
FIXTURE_DIR = DATA_DIR / "hotpotqa"
FIXTURE_FILES = {"train": "FIXTURE_NOT_HOTPOTQA_train.json", "dev": "FIXTURE_NOT_HOTPOTQA_dev.json"}
FIXTURE_ID_PREFIX = "FIXTURE-NOT-HOTPOTQA"  # every fixture row's _id starts so; any such row marks a run
N_VALIDATION = 500
MIN_PROMPT_CHARS = 1000
CUT_MARK = " [...]"
PROMPT = ("Answer the question using the paragraphs below. Only some of them are relevant.\n\n"
          "{context}\n\nQuestion: {question}\n\n"
          "Give a short answer: a name, a date, a number, a few words, or yes/no. End your response "
          "with the answer on its own last line, in the form \"Answer: <answer>\".")
# the marker, anywhere on a line: "Answer:", "Final answer:", "**Answer:**", "**Answer**:"
_MARKER = re.compile(r"\banswer[ \t]*(?:\*\*)?[ \t]*:(?:\*\*)?", re.I)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = set(string.punctuation)
_YES_NO = ("yes", "no", "noanswer")


# ---- the official hotpot_evaluate_v1 definitions ----
def normalize_answer(s: str) -> str:
    """Lower case, drop ASCII punctuation, drop a/an/the, collapse whitespace (official order).

    >>> normalize_answer("The  Tessaly Prize!")
    'tessaly prize'
    """
    text = "".join(ch for ch in s.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> bool:
    """Official EM: the normalised strings are equal."""
    return normalize_answer(prediction) == normalize_answer(gold)


def f1_score(prediction: str, gold: str) -> float:
    """Official token F1 of the normalised strings; 0 when either is yes/no/noanswer and they differ.

    >>> f1_score("Tessaly Prize 1995", "the Tessaly Prize")
    0.8
    """
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    if (pred in _YES_NO or ref in _YES_NO) and pred != ref:
        return 0.0
    pred_tokens, ref_tokens = pred.split(), ref.split()
    same = sum((Counter(pred_tokens) & Counter(ref_tokens)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(ref_tokens)
    return 2 * precision * recall / (precision + recall)


def answer_text(completion: str) -> str | None:
    """The raw answer of a completion (the module docstring's format), or None when absent."""
    last = None
    for last in _MARKER.finditer(completion):
        pass
    if last is None:
        return None
    rest = completion[last.end():]
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


# ---- prompts ----
def _cut(sentences: list[str], cap: int) -> tuple[str, int]:
    """A paragraph's text within `cap` characters, and how many whole sentences it keeps."""
    body = "".join(sentences).strip()
    if len(body) <= cap:
        return body, len(sentences)
    room = cap - len(CUT_MARK)
    if room <= 0:
        return "", 0
    kept, n = "", 0
    for sentence in sentences:
        if len((kept + sentence).strip()) > room:
            break
        kept, n = kept + sentence, n + 1
    if not kept.strip():  # not even the first sentence fits: its start, cut at a space if any
        kept = body[:room]
        if body[room] != " " and " " in kept.strip():
            kept = kept.rsplit(" ", 1)[0]
    return kept.strip() + CUT_MARK, n


def build_prompt(question: str, context: list[tuple[str, list[str]]], max_chars: int
                 ) -> tuple[str, list[int]] | None:
    """The prompt and, per paragraph, how many whole sentences it shows; None when even the
    question and titles alone are over `max_chars`.

    Args:
        question: the question text.
        context: (title, sentences) per paragraph, in the row's order.
        max_chars: the bound on the prompt's length.
    """
    def render(cap: int | None) -> tuple[str, list[int]]:
        parts, kept = [], []
        for i, (title, sentences) in enumerate(context, start=1):
            body, n = ("".join(sentences).strip(), len(sentences)) if cap is None else _cut(sentences, cap)
            parts.append(f"[{i}] {title}\n{body}" if body else f"[{i}] {title}")
            kept.append(n)
        return PROMPT.format(context="\n\n".join(parts), question=question), kept

    full = render(None)
    if len(full[0]) <= max_chars:
        return full
    if len(render(0)[0]) > max_chars:
        return None
    low, high = 0, max(len("".join(s)) for _, s in context)  # render(low) fits, render(high) does not
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if len(render(mid)[0]) <= max_chars else (low, mid)
    return render(low)


# ---- data ----
def _official_shape(raw: dict) -> dict:
    """A hub-shaped row (id, context {title, sentences}, supporting_facts {title, sent_id}) in
    the official file's shape; an official row is returned as it is."""
    out = dict(raw)
    if "_id" not in out and "id" in out:
        out["_id"] = out.pop("id")
    for field, keys in (("context", ("title", "sentences")), ("supporting_facts", ("title", "sent_id"))):
        value = out.get(field)
        if isinstance(value, dict) and set(keys) <= set(value) and all(isinstance(value[k], list) for k in keys):
            out[field] = [list(pair) for pair in zip(value[keys[0]], value[keys[1]])]
    return out


FIX = ("each row needs a string `_id`, a non-empty string `question` and `answer`, and `context` "
       "as a list of [title, [sentences]] pairs, as in hotpot_dev_distractor_v1.json")


def _validate(raw, where, line: int) -> dict:
    """The checked row in the official shape; a bad one is named `file:line` (hub: `id:split:row`)."""
    if not isinstance(raw, dict):
        raise row_error(where, line, f"the row is {json_kind(raw)}, not an object", FIX)
    row = _official_shape(raw)
    for field in ("_id", "question", "answer"):
        value = row.get(field)
        if not isinstance(value, str) or not value.strip():
            problem = ("missing" if field not in row else "empty" if isinstance(value, str)
                       else f"{json_kind(value)}, not a string")
            if field == "answer" and field not in row:
                problem += " (a row without an answer cannot be graded)"
            raise row_error(where, line, f"field `{field}` is {problem}", FIX)
    if not normalize_answer(row["answer"]):
        raise row_error(where, line, f"field `answer` {row['answer']!r} normalises to nothing "
                        "(only punctuation and articles), so no answer could match it", FIX)
    context = row.get("context")
    if not isinstance(context, list) or not context:
        problem = ("missing" if "context" not in row else "an empty list" if context == []
                   else f"{json_kind(context)}, not a list of [title, [sentences]] pairs")
        raise row_error(where, line, f"field `context` is {problem}", FIX)
    for k, pair in enumerate(context):
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)
                and isinstance(pair[1], list) and all(isinstance(s, str) for s in pair[1])):
            raise row_error(where, line, f"field `context` entry {k} is {_brief(pair)}, not a "
                            "[title, [sentences]] pair of a string and a list of strings", FIX)
    facts = row.get("supporting_facts", [])
    if not isinstance(facts, list) or not all(
            isinstance(f, list) and len(f) == 2 and isinstance(f[0], str) and is_int(f[1]) for f in facts):
        raise row_error(where, line, "field `supporting_facts` is not a list of [title, "
                        "sentence index] pairs", FIX)
    for field in ("type", "level"):
        if not isinstance(row.get(field, ""), str):
            raise row_error(where, line, f"field `{field}` is {json_kind(row[field])}, not a string", FIX)
    return row


def _brief(value) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return f"{json_kind(value)} {text[:60]}{'...' if len(text) > 60 else ''}"


def read_rows(path: Path, what: str = "HotpotQA data") -> list[tuple[int, object]]:
    """(line, row) for each row of an official JSON list file (the line where the row starts), or
    of a JSONL file; every way of failing is one TaskDataError naming `path:line`."""
    text = read_text(path, what)
    start = len(text) - len(text.lstrip())
    if text[start] != "[":
        return read_jsonl(path, what)
    decoder, rows = json.JSONDecoder(), []
    pos, line, counted = start + 1, 1, 0

    def skip(i: int) -> int:
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        return i

    def line_at(i: int) -> int:
        nonlocal line, counted
        line += text.count("\n", counted, i)
        counted = i
        return line

    pos = skip(pos)
    if pos < len(text) and text[pos] == "]":
        pos += 1
    else:
        while True:
            try:
                row, end = decoder.raw_decode(text, pos)
            except json.JSONDecodeError as e:
                problem = f"not valid JSON ({e.msg} at column {e.colno}"
                problem += ", the file is cut off)" if e.pos >= len(text.rstrip()) else ")"
                raise row_error(path, e.lineno, problem, "fix or delete that row") from None
            except (ValueError, RecursionError) as e:
                raise row_error(path, line_at(pos), f"not usable JSON ({type(e).__name__}: "
                                f"{str(e)[:80]})", "fix or delete that row") from None
            rows.append((line_at(pos), row))
            pos = skip(end)
            if pos < len(text) and text[pos] == ",":
                pos = skip(pos + 1)
                continue
            if pos < len(text) and text[pos] == "]":
                pos += 1
                break
            problem = "the file is cut off (no closing ])" if pos >= len(text) else \
                f"expected , or ] after a row, found {text[pos]!r}"
            raise row_error(path, line_at(pos), problem, "the file must be one JSON list of rows")
    if skip(pos) < len(text):
        raise row_error(path, line_at(skip(pos)), "text after the closing ] of the row list",
                        "the file must be one JSON list of rows")
    return rows


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
        reward: "f1" (token F1, the default) or "em" (exact match, 1/0).
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

    # ---- data ----
    def load(self, split: str) -> datasets.Dataset:
        """Rows with `prompt`, `id`, `question`, `answer` (gold), `type` and `level`."""
        if split not in ("train", "validation", "test"):
            raise TaskDataError(f"split {split!r} is unknown; use train, validation or test")
        rows = self._rows("dev" if split == "test" else "train")
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
            built = build_prompt(row["question"], context, self.max_prompt_chars)
            if built is None:
                raise row_error(where, line, "the question and paragraph titles alone are over "
                                f"task.max_prompt_chars={self.max_prompt_chars} characters",
                                "raise task.max_prompt_chars")
            prompt, kept = built
            if any(n < len(s) for n, (_, s) in zip(kept, context)):
                truncated += 1
                shown = {}
                for (title, _), n in zip(context, kept):
                    shown.setdefault(title, n)
                support_cut += any(title in shown and sent_id >= shown[title]
                                   for title, sent_id in row.get("supporting_facts", []))
            if row["_id"].startswith(FIXTURE_ID_PREFIX):
                self.fixture = True
            out.append({"prompt": prompt, "id": row["_id"], "question": row["question"],
                        "answer": row["answer"], "type": row.get("type", ""), "level": row.get("level", "")})
        self._prompt_stats[split] = {"rows": len(out), "truncated": truncated, "support_cut": support_cut}
        return datasets.Dataset.from_list(out)

    def _rows(self, official: str) -> list[tuple[object, int, dict]]:
        """(where, line, checked row) for the official split "train" or "dev"."""
        if self.source == "hub":
            hub_split = "validation" if official == "dev" else "train"
            try:
                raw = datasets.load_dataset(HUB_ID, HUB_CONFIG, split=hub_split).to_list()
            except Exception as e:  # noqa: BLE001 - any hub failure gets the same advice
                detail = " ".join(f"{type(e).__name__}: {e}".split())[:200]
                raise TaskDataError(
                    f"could not load {HUB_ID} ('{HUB_CONFIG}', split {hub_split}) from the Hugging "
                    f"Face hub ({detail}). Offline? Use task.source=local task.path=<a directory "
                    f"with {TRAIN_FILE} and {DEV_FILE}> or set HF_DATASETS_CACHE to a cache that "
                    "holds it.") from e
            where = f"{HUB_ID}:{hub_split}"
            return [(where, i, _validate(r, where, i)) for i, r in enumerate(raw, start=1)]
        path = self._file(official)
        return [(path, i, _validate(r, path, i)) for i, r in read_rows(path)]

    def _file(self, official: str) -> Path:
        if not self.path:
            return FIXTURE_DIR / FIXTURE_FILES[official]
        given = user_path(self.path, "a HotpotQA directory or file")
        if given.is_file():
            if official == "train":
                raise TaskDataError(f"task.path={self.path} is one file, read as the test split; "
                                    f"for train and validation give a directory with {TRAIN_FILE} "
                                    f"and {DEV_FILE}")
            return given
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
        """Official token F1 of the completion's answer (0 when it has none)."""
        raw = answer_text(completion)
        return 0.0 if raw is None else f1_score(raw, answer)

    def reward(self, completions: list[str], answer: list[str], **kwargs) -> list[float]:
        """TRL-style reward: token F1 with `reward: f1` (the default), EM (1/0) with `reward: em`.

        >>> HotpotQA().reward(["Answer: Tessaly Prize 1995", "Answer: no", "Answer: Yes."],
        ...                   answer=["the Tessaly Prize", "yes", "yes"])
        [0.8, 0.0, 1.0]
        """
        pairs = zip(completions, answer, strict=True)
        if self.reward_kind == "em":
            return [float(self.is_correct(c, a)) for c, a in pairs]
        return [self.f1(c, a) for c, a in pairs]

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
            "greedy_reward, mean_reward: token F1 (the reward)" if self.reward_kind == "f1"
            else "the reward is exact match too (task.reward=em): no F1 column"))
        for split, s in self._prompt_stats.items():
            if s["truncated"]:
                notes.append(f"{split}: {s['truncated']} of {s['rows']} prompts shortened to "
                             f"task.max_prompt_chars={self.max_prompt_chars}; {s['support_cut']} "
                             "of them lost part of a supporting-fact sentence")
        return {"fixture": self.fixture, "reward": self.reward_kind,
                "max_prompt_chars": self.max_prompt_chars, "prompts": dict(self._prompt_stats),
                "notes": notes}
