"""HotpotQA task: official normalisation, EM and F1, the answer format, the fixture, prompt bounds,
bad files and an offline hub; plus a hand-judged set of completions (HAND_JUDGED).

    python -m pytest tests/test_task_hotpotqa.py -q
"""
import doctest
import json
from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

import tasks.hotpotqa
from tasks.base import TaskDataError
import tasks.hotpotqa_data
import tasks.hotpotqa_grade
from tasks.hotpotqa import (DEV_FILE, FIXTURE_DIR, FIXTURE_ID_PREFIX, TRAIN_FILE, HotpotQA, build_prompt,
                            exact_match, f1_score, normalize_answer, priced_f1)

CONF = Path(__file__).parents[1] / "conf" / "task" / "hotpotqa.yaml"


@pytest.fixture(scope="module")
def task():
    return HotpotQA(n_eval=None)


def row(**over) -> dict:
    """One official-format row (not a fixture id), with fields replaced or removed (None)."""
    base = {"_id": "5a8b57f25542995d1e6f1371", "question": "Which town is Varrow Bridge in?",
            "answer": "Caddesby", "supporting_facts": [["Varrow Bridge", 0]],
            "context": [["Varrow Bridge", ["Varrow Bridge is in Caddesby.", " It is old."]],
                        ["Hob Fell", ["Hob Fell is a hill."]]],
            "type": "bridge", "level": "easy"}
    base.update(over)
    return {k: v for k, v in base.items() if v is not None}


def write_list(path: Path, rows: list) -> Path:
    """An official-style JSON list file, one row per line (as the fixture is written)."""
    path.write_text("[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n]\n")
    return path


def test_doctests():
    for module in (tasks.hotpotqa, tasks.hotpotqa_grade, tasks.hotpotqa_data):
        assert doctest.testmod(module).failed == 0, module.__name__


def test_config_builds_the_task():
    t = instantiate(OmegaConf.load(CONF))
    assert isinstance(t, HotpotQA) and t.max_new_tokens == 256 and t.n_eval == 500
    assert t.reward_kind == "f1" and t.max_prompt_chars == 12000 and t.fixture


# ---- official normalisation, EM and F1 (hand-computed) ----
@pytest.mark.parametrize("text, expected", [
    ("The Tessaly Prize!", "tessaly prize"),
    ("  A  Portkell,  an  old  village ", "portkell old village"),  # articles only as words
    ("Theatre Anthem", "theatre anthem"),                             # "the"/"an" inside words stay
    ("14,200", "14200"),                                              # punctuation is dropped, not spaced
    ("Harrow & Finch", "harrow finch"),
    ("O'Neill", "oneill"),
    ("Caf\u00e9\u2013Bar", "caf\u00e9\u2013bar"),                     # only ASCII punctuation goes
    ("the", ""),
])
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


@pytest.mark.parametrize("prediction, gold, em, f1", [
    ("Tessaly Prize", "the Tessaly Prize", True, 1.0),
    ("Tessaly Prize 1995", "Tessaly Prize", False, 0.8),          # P 2/3, R 1
    ("Portkell, a fishing village", "Portkell", False, 0.5),      # P 1/3, R 1
    ("512", "512 metres", False, 2 / 3),                          # P 1, R 1/2
    ("512 m", "512 metres", False, 0.5),                          # P 1/2, R 1/2
    ("Pella Ashgrove Pella", "Pella Ashgrove", False, 0.8),       # a repeated token counts once
    ("yes", "Yes.", True, 1.0),
    ("yes both are novelists", "yes", False, 0.0),                # gold yes, differs: 0, not 0.4
    ("no", "no longer", False, 0.0),                              # prediction no, differs: 0, not 2/3
    ("noanswer", "noanswer", True, 1.0),
    ("Aldmere", "Portkell", False, 0.0),
    ("the", "Portkell", False, 0.0),                              # empty after normalising
])
def test_em_and_f1_hand_computed(prediction, gold, em, f1):
    assert exact_match(prediction, gold) is em
    assert f1_score(prediction, gold) == pytest.approx(f1)


# ---- the answer format ----
@pytest.mark.parametrize("completion, expected", [
    ("Answer: Portkell", "portkell"),
    ("answer: PORTKELL.", "portkell"),
    ("**Answer:** Portkell", "portkell"),
    ("**Answer**: Portkell", "portkell"),
    ("Thinking...\nFinal answer: Portkell", "portkell"),
    ("Answer:\n\n  Portkell\nmore text", "portkell"),               # marker alone: next non-blank line
    ("Answer: Orrin\nNo, the singer was Ashgrove.\nAnswer: Pella Ashgrove", "pella ashgrove"),  # last wins
    ("Her album is Low Tide Hymns (2016). Answer: Low Tide Hymns", "low tide hymns"),
    ("Answer: Portkell\n\nThe bridge's engineer was born there.", "portkell"),
    ("It is Portkell.", None),                                      # no marker: no answer
    ("The answer is Portkell.", None),                              # "answer is" is not the format
    ("<answer>Portkell</answer>", None),
    ("Answer: the", None),                                          # nothing left after normalising
    ("Answer:", None),
    ("Answer:   \n  \n", None),
    ("", None),
])
def test_answer_format(task, completion, expected):
    assert task.extract_answer(completion) == expected


def test_reward_is_priced_f1_and_accuracy_is_em(task):
    completions = ["Answer: Tessaly Prize 1995", "Answer: Tessaly Prize", "Tessaly Prize", "Answer: no"]
    gold = ["Tessaly Prize", "the Tessaly Prize", "Tessaly Prize", "yes"]
    assert task.reward(completions, answer=gold) == pytest.approx([0.4, 1.0, 0.0, 0.0])  # F1 0.8 / (1 + 1)
    assert task.f1(completions[0], gold[0]) == pytest.approx(0.8)  # the official F1, not the reward
    assert [task.is_correct(c, a) for c, a in zip(completions, gold)] == [False, True, False, False]
    assert HotpotQA(reward="em").reward(completions, answer=gold) == [0.0, 1.0, 0.0, 0.0]
    with pytest.raises(TaskDataError, match="f1 or em"):
        HotpotQA(reward="bleu")


# ---- hedging: official F1 paid 2/(k+1) for k guesses, committing earns 1/k ----
@pytest.mark.parametrize("completion, gold, official, reward", [
    ("Answer: Paris", "Paris", 1.0, 1.0),
    ("Answer: Paris London", "Paris", 2 / 3, 1 / 3),            # k=2: 2/(k(k+1)) < 1/k = 0.5
    ("Answer: Paris London Berlin", "Paris", 0.5, 1 / 6),       # k=3: < 1/3
    ("Answer: Paris, London", "Paris", 2 / 3, 1 / 3),           # the comma is punctuation: same tokens
    ("Answer: Paris or London", "Paris", 0.5, 1 / 6),           # "or" is a surplus token too
    ("Answer: Paris / London / Berlin / Rome", "Paris", 0.4, 0.1),
    ("Answer: New York City", "New York City", 1.0, 1.0),       # a genuine multi-word gold
    ("Answer: New York City Boston", "New York City", 6 / 7, 3 / 7),  # < 0.5: a short wrong guess does not pay
    ("Answer: Sefferly", "Ann Sefferly", 2 / 3, 2 / 3),         # part of the gold: no surplus, plain F1
    ("Answer: Paris Paris", "Paris", 2 / 3, 1 / 3),             # a repeated token is surplus
    ("Answer: Lyon", "Paris", 0.0, 0.0),
])
def test_listing_guesses_does_not_pay(task, completion, gold, official, reward):
    assert task.f1(completion, gold) == pytest.approx(official)
    assert task.reward([completion], answer=[gold]) == pytest.approx([reward])


@pytest.mark.parametrize("k", range(2, 9))
def test_k_guesses_earn_less_than_committing_to_one_at_random(k):
    guesses = ["Paris", "London", "Berlin", "Rome", "Lyon", "Oslo", "Bern", "Riga"][:k]
    assert f1_score(" ".join(guesses), "Paris") == pytest.approx(2 / (k + 1))  # official F1 pays
    assert priced_f1(" ".join(guesses), "Paris") == pytest.approx(2 / (k * (k + 1)))
    assert priced_f1(" ".join(guesses), "Paris") < 1 / k


# ---- a hand-judged set: realistic completions on the fixture's questions ----
# (row id suffix, completion, my judgement: does it give the right answer?, grader EM, hand reward:
# official F1 / (1 + answer tokens beyond the gold's))
HAND_JUDGED = [
    ("train-01", "Varrow Bridge was designed by Oswin Thale, who was born in Portkell.\nAnswer: Portkell", True, 1, 1.0),
    ("train-01", "Answer: portkell", True, 1, 1.0),
    ("train-01", "Thale was born in a fishing village.\nAnswer: Portkell, a fishing village on the north coast", True, 0,
     2 / 7 / 6),                                                                # 5 surplus tokens
    ("train-01", "The bridge is in Caddesby.\nAnswer: Caddesby", False, 0, 0.0),
    ("train-02", "Marrane is a novelist; Orrin was a novelist and playwright.\nAnswer: Yes", True, 1, 1.0),
    ("train-02", "Answer: Yes, both are novelists.", True, 0, 0.0),            # the yes/no rule
    ("train-02", "Orrin was also a playwright, so no.\nAnswer: no", False, 0, 0.0),
    ("train-03", "The cartographer is Ilse Marrane; her 1994 novel won a prize.\nAnswer: The Tessaly Prize", True, 1, 1.0),
    ("train-03", "Answer: Tessaly Prize (1995)", True, 0, 0.8 / 2),
    ("train-03", "The novel is The Glass Orchard, which won the Tessaly Prize in 1995.", True, 0, 0.0),  # no format
    ("train-04", "The Lenn is 61 km long, the Kestrel Line 11 km.\nAnswer: River Lenn", True, 1, 1.0),
    ("train-04", "Answer: The Kestrel Line", False, 0, 0.0),
    ("train-05", "Varrow Bridge crosses the Lenn, which rises on Hob Fell.\nAnswer: 512 metres", True, 1, 1.0),
    ("train-05", "Answer: 512 m", True, 0, 0.5 / 2),
    ("train-06", "Thale was born in Portkell, where Moth & Lantern formed.\nAnswer:\nPella Ashgrove", True, 1, 1.0),
    ("train-06", "Answer: Duncombe Orrin\nWait: Orrin was no singer. The band's singer was Pella Ashgrove.\n"
                 "Answer: Pella Ashgrove", True, 1, 1.0),
    ("train-08", "**Answer:** Aldmere", True, 1, 1.0),
    ("train-08", "Harrow & Finch founded the prize and was itself founded in Aldmere.\nFinal answer: Aldmere.", True, 1, 1.0),
    ("dev-01", "Answer: Sefferly", True, 0, 2 / 3),                             # surname only
    ("dev-03", "Salt Ledger (2001) is newer than The Glass Orchard (1994).\nAnswer: No", True, 1, 1.0),
    ("dev-04", "Answer: 14 200", True, 0, 0.0),                                 # "14 200" is two tokens
    ("dev-05", "Corve Lighthouse was first lit in 1851.\nAnswer: 1851", False, 0, 0.0),
    ("dev-06", "The singer is Pella Ashgrove; her first solo album was Low Tide Hymns (2016). "
               "Answer: Low Tide Hymns", True, 1, 1.0),
    ("dev-06", "The lead singer of Moth & Lantern was Pella Ashgrove, whose first", False, 0, 0.0),  # cut off
]
# Agreement of EM with the judgement: 17 of 24. Every disagreement is a right answer EM rejects
# (extra words, a unit spelt differently, a surname, no "Answer:" line); EM accepted no wrong one.
AGREE, DISAGREE = 17, 7


def test_hand_judged_set(task):
    gold = {"-".join(r["id"].split("-")[-2:]): r["answer"]
            for split in ("train", "validation", "test") for r in task.load(split)}
    agree = 0
    for key, completion, judged, em, f1 in HAND_JUDGED:
        answer = gold[key]
        assert task.is_correct(completion, answer) is bool(em), (key, completion)
        assert task.reward([completion], answer=[answer]) == pytest.approx([f1]), (key, completion)
        assert not (em and not judged), "EM accepted an answer judged wrong"
        agree += bool(em) == judged
    assert (agree, len(HAND_JUDGED) - agree) == (AGREE, DISAGREE)


# ---- the fixture ----
def test_fixture_loads_and_says_so(task):
    train, val, test = (task.load(s) for s in ("train", "validation", "test"))
    assert (len(train), len(val), len(test)) == (6, 2, 6)
    assert not set(train["id"]) & set(val["id"])
    assert all(i.startswith(FIXTURE_ID_PREFIX) for i in [*train["id"], *val["id"], *test["id"]])
    assert {"prompt", "id", "question", "answer", "type", "level"} == set(test.column_names)
    assert set(test["type"]) == {"bridge", "comparison"} and {"yes", "no"} <= set(test["answer"])
    for r in test:
        assert r["prompt"].count("\n[") == 10 and r["question"] in r["prompt"]
        assert r["prompt"].rstrip().endswith('in the form "Answer: <answer>".')
    info = task.run_info()
    assert info["fixture"] and info["notes"][0].startswith("FIXTURE DATA, NOT HotpotQA")
    assert task.reward([task.gold_completion(answer=a) for a in test["answer"]],
                       answer=test["answer"]) == [1.0] * 6
    for path in FIXTURE_DIR.glob("*.json"):
        assert all(r["_note"].endswith("NOT HotpotQA data") for r in json.loads(path.read_text()))
    assert "NOT THE BENCHMARK" in (FIXTURE_DIR / "README.md").read_text()


def test_fixture_rows_through_path_are_marked_too(tmp_path):
    t = HotpotQA(path=str(FIXTURE_DIR / "FIXTURE_NOT_HOTPOTQA_dev.json"))
    assert t.fixture and t.run_info()["notes"][0].startswith("FIXTURE DATA")  # read when built
    real = HotpotQA(path=str(write_list(tmp_path / "dev.json", [row()])))
    assert len(real.load("test")) == 1 and not real.run_info()["fixture"]
    assert "greedy_reward, mean_reward: token F1 / (1 + answer tokens" in real.run_info()["notes"][0]


def test_path_directory_splits_and_validation_ignores_file_order(tmp_path):
    rows = [row(_id=f"id{i:03d}", answer=f"answer {i}") for i in range(40)]
    write_list(tmp_path / "hotpot_train_v1.1.json", rows)
    write_list(tmp_path / "hotpot_dev_distractor_v1.json", rows[:3])
    t = HotpotQA(path=str(tmp_path))
    val, train, test = t.load("validation"), t.load("train"), t.load("test")
    assert (len(val), len(train), len(test)) == (10, 30, 3)
    write_list(tmp_path / "hotpot_train_v1.1.json", rows[::-1])
    assert set(HotpotQA(path=str(tmp_path)).load("validation")["id"]) == set(val["id"])
    with pytest.raises(TaskDataError, match="one file, read as the test split"):
        HotpotQA(path=str(tmp_path / "hotpot_dev_distractor_v1.json")).load("train")


def test_a_directory_needs_both_files_when_built(tmp_path):
    write_list(tmp_path / DEV_FILE, [row()])
    with pytest.raises(TaskDataError, match=rf"{TRAIN_FILE} not found"):
        HotpotQA(path=str(tmp_path))
    write_list(tmp_path / TRAIN_FILE, [row(), row(context=[["T", "not a list"]])])
    with pytest.raises(TaskDataError, match=rf"{TRAIN_FILE}:3: field `context` entry 0 .*; each row needs"):
        HotpotQA(path=str(tmp_path))  # a bad train row fails an evaluation-only build too


def test_hub_shaped_rows_and_jsonl_load(tmp_path):
    hub = {"id": "h1", "question": "Which town?", "answer": "Caddesby", "type": "bridge", "level": "easy",
           "supporting_facts": {"title": ["Varrow Bridge"], "sent_id": [0]},
           "context": {"title": ["Varrow Bridge"], "sentences": [["Varrow Bridge is in Caddesby."]]}}
    path = tmp_path / "dev.jsonl"
    path.write_text(json.dumps(hub) + "\n" + json.dumps(row()) + "\n")
    rows = HotpotQA(path=str(path)).load("test")
    assert rows["id"] == ["h1", "5a8b57f25542995d1e6f1371"] and "[1] Varrow Bridge" in rows[0]["prompt"]


# ---- prompt bound ----
@pytest.mark.parametrize("bound", [1000, 1100, 1300, 1500, 1700, 12000])
def test_prompts_stay_within_the_bound(bound):
    t = HotpotQA(n_eval=None, max_prompt_chars=bound)
    full = HotpotQA(n_eval=None)
    for split in ("train", "validation", "test"):
        rows, whole = t.load(split), full.load(split)
        assert all(len(p) <= bound for p in rows["prompt"])
        assert rows["prompt"] == t.load(split)["prompt"]  # deterministic
        for r, w in zip(rows, whole):
            assert r["question"] in r["prompt"] and r["prompt"].count("\n[") == 10  # never cut
            assert (r["prompt"] == w["prompt"]) == (len(w["prompt"]) <= bound)
    stats = t.run_info()["prompts"]["test"]
    assert (stats["truncated"] == 0) == (bound == 12000)


def test_shortening_keeps_whole_sentences_and_short_paragraphs():
    context = [("Long", ["One two three four five.", " Six seven eight nine ten." * 20]),
               ("Short", ["Tiny."])]
    prompt, kept = build_prompt("Q?", context, 400)
    assert len(prompt) <= 400 and kept == [1, 1]
    assert "[1] Long\nOne two three four five. [...]" in prompt and "[2] Short\nTiny." in prompt
    assert build_prompt("Q" * 500, context, 400) is None


def test_bound_too_small_or_question_too_long(tmp_path):
    with pytest.raises(TaskDataError, match="max_prompt_chars"):
        HotpotQA(max_prompt_chars=200)
    path = write_list(tmp_path / "dev.json", [row(), row(question="Why? " * 400)])
    with pytest.raises(TaskDataError, match=r"dev\.json:3: the question and paragraph titles alone are over "
                                            r"task\.max_prompt_chars=1000 characters; raise task\.max_prompt_chars"):
        HotpotQA(path=str(path), max_prompt_chars=1000)  # at construction


# ---- bad input ----
def test_row_without_answer_is_rejected(tmp_path):
    path = write_list(tmp_path / "dev.json", [row(), row(answer=None)])
    with pytest.raises(TaskDataError, match=r"dev\.json:3: field `answer` is missing \(a row without "
                                            r"an answer cannot be graded\)"):
        HotpotQA(path=str(path))
    for bad, problem in (("", "empty"), (" ?! ", "normalises to nothing"), (7, "a number, not a string")):
        write_list(path, [row(answer=bad)])
        with pytest.raises(TaskDataError, match=rf"dev\.json:2: field `answer`.*{problem}"):
            HotpotQA(path=str(path))


@pytest.mark.parametrize("content, match", [
    ('[\n{"_id": "a", "question": "q", "answer": "x", "context": [["T", ["s"]]]},\n{"_id": "b", ',
     r"dev\.json:3: not valid JSON .*cut off"),
    ('[\n"a row"\n]', r"dev\.json:2: the row is a string, not an object"),
    ('[\n' + json.dumps(row()) + ',\n' + json.dumps(row(context=[["T", "not a list"]])) + '\n]',
     r"dev\.json:3: field `context` entry 0 is an array \[\"T\", \"not a list\"\]"),
    ('[\n' + json.dumps(row(context=[])) + '\n]', r"dev\.json:2: field `context` is an empty list"),
    ('[\n' + json.dumps(row(question=None)) + '\n]', r"dev\.json:2: field `question` is missing"),
    ('[\n' + json.dumps(row(supporting_facts=[["T", "0"]])) + '\n]', r"dev\.json:2: field `supporting_facts`"),
    ('[\n' + json.dumps(row()) + '\n] trailing', r"dev\.json:3: text after the closing \]"),
    ('[\n' + json.dumps(row()) + '\n' + json.dumps(row()) + '\n]', r"dev\.json:3: expected , or \] after a row"),
    ('[\n' + json.dumps(row()), r"dev\.json:2: the file is cut off"),
    ("", r"is empty"),
])
def test_malformed_file_names_file_line_and_field(tmp_path, content, match):
    path = tmp_path / "dev.json"
    path.write_text(content)
    with pytest.raises(TaskDataError, match=match):
        HotpotQA(path=str(path))  # the constructor reads every row, before any model loads


def test_missing_file_and_bad_settings(tmp_path):
    with pytest.raises(TaskDataError, match="not found"):
        HotpotQA(path=str(tmp_path))
    with pytest.raises(TaskDataError, match="local or hub"):
        HotpotQA(source="ftp")
    with pytest.raises(TaskDataError, match="drop one of them"):
        HotpotQA(source="hub", path="x")
    with pytest.raises(TaskDataError, match="split"):
        HotpotQA().load("dev")


def test_hub_unreachable_gives_one_line_error(monkeypatch):
    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'hotpotqa/hotpot_qa' on the Hub\n(LocalEntryNotFoundError)")
    monkeypatch.setattr(tasks.hotpotqa.datasets, "load_dataset", offline)
    with pytest.raises(TaskDataError) as err:
        HotpotQA(source="hub")  # the constructor reads both hub splits
    message = str(err.value)
    assert "\n" not in message and "split validation" in message and "task.source=local task.path=" in message


def test_hub_rows_are_validated(monkeypatch):
    class Rows:
        def to_list(self):
            return [{"id": "h1", "question": "q", "answer": "a b", "context": {"title": ["T"], "sentences": [["s"]]}},
                    {"id": "h2", "question": "q", "context": {"title": ["T"], "sentences": [["s"]]}}]
    monkeypatch.setattr(tasks.hotpotqa.datasets, "load_dataset", lambda *a, **k: Rows())
    with pytest.raises(TaskDataError, match=r"hotpotqa/hotpot_qa:validation:2: field `answer` is missing"):
        HotpotQA(source="hub")


def test_fixture_note_reaches_the_tables(task):
    from harness.core.records import Record
    from harness.reporting.report import task_notes
    task.load("test")
    notes = task_notes([Record(task="tasks.hotpotqa.HotpotQA", task_info=task.run_info())])
    assert "## Task notes" in notes and "- HotpotQA: FIXTURE DATA, NOT HotpotQA" in notes
    assert ("- HotpotQA: greedy_acc, pass@k, maj@k: exact match; greedy_reward, mean_reward: token F1 / "
            "(1 + answer tokens beyond the gold's), the reward (priced for hedging; not the official F1)") in notes
