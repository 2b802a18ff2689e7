"""HotpotQA's data: reading the official files (JSON list or JSONL, official or hub row shape),
checking every row, and building the bounded prompts. tasks/hotpotqa.py's module docstring
states the rules; this module holds them so that hotpotqa.py stays readable.

    python -m pytest tests/test_task_hotpotqa.py -q
"""
from __future__ import annotations

import json
from pathlib import Path

from tasks.base import is_int, json_kind, read_jsonl, read_text, row_error
from tasks.hotpotqa_grade import normalize_answer

CUT_MARK = " [...]"
PROMPT = ("Answer the question using the paragraphs below. Only some of them are relevant.\n\n"
          "{context}\n\nQuestion: {question}\n\n"
          "Give a short answer: a name, a date, a number, a few words, or yes/no. End your response "
          "with the answer on its own last line, in the form \"Answer: <answer>\".")


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


def bare_length(question: str, context: list) -> int:
    """The prompt's length with every paragraph cut to nothing (titles and question only): the
    shortest prompt any shortening reaches, so a row over the bound by this much cannot fit."""
    titles = "\n\n".join(f"[{i}] {pair[0]}" for i, pair in enumerate(context, start=1))
    return len(PROMPT.format(context=titles, question=question))


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
    if bare_length(question, context) > max_chars:
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


def validate(raw, where, line: int) -> dict:
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
