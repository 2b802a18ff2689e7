"""CommonsenseQA and GPQA: the shared multiple-choice grader, data layouts, the per-question
shuffle, bad rows and offline hub errors, on the hand-written fixtures (never the benchmarks).

    python -m pytest tests/test_task_multiple_choice.py -q
"""
import csv
import doctest
import json
from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

import tasks.csqa
import tasks.gpqa
import tasks.multiple_choice
from tasks.base import TaskDataError
from tasks.csqa import CommonsenseQA
from tasks.gpqa import GPQA, permutation
from tasks.multiple_choice import format_prompt, parse_letter

CONF = Path(__file__).parents[1] / "conf" / "task"
GPQA_HEADER = ["Record ID", "Question", "Correct Answer", "Incorrect Answer 1",
               "Incorrect Answer 2", "Incorrect Answer 3"]


def test_doctests():
    for module in (tasks.multiple_choice, tasks.csqa, tasks.gpqa):
        assert doctest.testmod(module).failed == 0, module.__name__


# ---- the grader ----

# A hand-judged set: realistic endings of completions to a question whose options are
# A) oven  B) refrigerator  C) mailbox  D) bookshelf  E) garden (GPQA rows: four options).
# `human`: my own judgement, written before running the grader, of whether a reader would credit
# the completion with the gold option (it commits to exactly that option, unmistakably), regardless
# of the requested format. `grader`: the reward the grader gives. They differ in six rows, all by
# design: the grader asks for the one format the prompt names ("Answer: X" on its own line, one
# letter named in its span, no answer lines that disagree) and reads nothing else.
JUDGED = [  # (n_choices, completion, gold, human, grader)
    (5, "Milk spoils when warm, so it belongs in a refrigerator.\nAnswer: B", "B", 1, 1),
    (5, "An oven heats food.\nAnswer: A", "B", 0, 0),
    (5, "It could be either a refrigerator or a mailbox in winter.\nAnswer: B or C", "B", 0, 0),
    (5, "Answer: A\nActually no, an oven is hot, a refrigerator is cold.\nAnswer: B", "B", 1, 0),
    (5, "Answer: B\nWait, mailboxes are cold in winter.\nAnswer: C", "B", 0, 0),
    (5, "**Answer:** B", "B", 1, 1),
    (5, "Answer: (B) refrigerator", "B", 1, 1),
    (5, "Answer: b", "B", 1, 1),
    (5, "The answer is B.", "B", 1, 0),
    (5, "B", "B", 1, 0),
    (5, "Answer: refrigerator", "B", 1, 0),
    (5, "Answer: F", "B", 0, 0),
    (5, "I'm not sure which one it is.", "B", 0, 0),
    (5, "Answer: A, B", "B", 0, 0),
    (5, "Answer: B) refrigerator or C) mailbox", "B", 0, 0),
    (5, "Final Answer: B.", "B", 1, 1),
    (5, "Answer:\nB", "B", 1, 0),
    (5, "Option B keeps food cold.\n\nAnswer: B\n\nI hope this helps!", "B", 1, 1),
    (5, "Answer: B\n\nAnswer: B", "B", 1, 1),
    (5, "Answer: $\\boxed{B}$", "B", 1, 1),
    (5, "Answer: X", "B", 0, 0),
    (5, "A and C are wrong and D is silly.\nAnswer: B", "B", 1, 1),
    (5, "Answer: None of the above", "B", 0, 0),
    (5, "Answer: B/C", "B", 0, 0),
    (5, "Answer: B (refrigerator), not A (oven)", "B", 1, 0),  # names A too: no negation is read
    (4, "Light travels at about 3e8 m/s.\nAnswer: D) 300,000 km/s", "D", 1, 1),
    (4, "Answer: E", "D", 0, 0),
    (4, "answer: c", "C", 1, 1),
]


@pytest.mark.parametrize("n, completion, gold, human, grader", JUDGED)
def test_hand_judged_set(n, completion, gold, human, grader):
    assert float(parse_letter(completion, n) == gold) == grader


def test_hand_judged_agreement():
    agree = sum(h == g for _, _, _, h, g in JUDGED)
    assert (agree, len(JUDGED)) == (22, 28)  # the six disagreements: format, by design
    # where the grader and I disagree, it is always the grader refusing (never crediting a miss)
    assert all(g == 0 for _, _, _, h, g in JUDGED if h != g)


@pytest.mark.parametrize("completion, letter", [
    ("Answer: B", "B"), ("answer: b", "B"), ("ANSWER: E.", "E"), ("Answer: [C]", "C"),
    ("  - **Final answer**: (D)", "D"), ("Answer: **A**.", "A"), ("Answer: A) oven", "A"),
    ("Answer: C. mailbox", "C"), ("Answer: D - bookshelf", "D"), ("Answer: B)", "B"),
    ("Answer: (C) A bank", "C"),        # an "A" inside the option's text is a word, not option A
    ("Answer: B\r\n", "B"),
    # several letters, other formats, nothing
    ("Answer: A or C", None), ("Answer: (A) or (C)", None), ("Answer: A) x and C", None),
    ("Answer: A (or maybe C)", None), ("Answer: A\nAnswer: C", None), ("Answer: B\nAnswer: ", None),
    ("answer B", None), ("The answer is (B)", None), ("Answers: B", None), ("Answer: AB", None),
    ("Answer: e.g. B", None), ("Answer: B)refrigerator", None), ("", None), ("Answer:", None),
    ("<answer>B</answer>", None), ("Answer: I think B", None),
])
def test_parse_letter(completion, letter):
    assert parse_letter(completion, 5) == letter


def test_letters_beyond_the_options_are_no_answer():
    assert parse_letter("Answer: E", 4) is None and parse_letter("Answer: E", 5) == "E"


# ---- several letters in one answer span: each once scored as its first letter ----
OPTIONS = ["oven", "refrigerator", "mailbox", "bookshelf", "garden"]


@pytest.mark.parametrize("completion, gold", [
    ("Answer: B, C", "B"), ("Answer: B, A, C, D, E", "B"), ("Answer: A. C.", "A"), ("Answer: A - C", "A"),
    ("Answer: A: C", "A"), ("Answer: [A] or [C]", "A"), ("Answer: A, maybe C", "A"),
    ("Answer: B; C", "B"), ("Answer: (B), (C)", "B"), ("Answer: B) refrigerator, C", "B"),
    ("Answer: **B**, **C**", "B"), ("Answer: b, c", "B"), ("Answer: B, a", "B"), ("Answer: B, A is also possible", "B"),
    ("Answer: B - refrigerator (C)", "B"), ("Answer: B\nAnswer: B, C", "B"),
])
def test_two_letters_in_the_span_score_zero(completion, gold):
    task = CommonsenseQA()
    assert task.reward([completion], answer=[gold], choices=[OPTIONS]) == [0.0]
    assert task.extract_answer(completion) is None


def test_gpqa_two_letters_score_zero():
    task = GPQA()
    assert task.reward(["Answer: B, D", "Answer: B"], answer=["B", "B"], choices=[list("wxyz")] * 2) == [0.0, 1.0]


@pytest.mark.parametrize("completion, options, letter", [
    ("Answer: B", OPTIONS, "B"), ("Answer: (B)", OPTIONS, "B"), ("Answer: **B**", OPTIONS, "B"),
    ("Answer: B. refrigerator", OPTIONS, "B"), ("Answer: B) refrigerator", OPTIONS, "B"),
    ("Answer: \\boxed{B}", OPTIONS, "B"), ("Answer: B.", OPTIONS, "B"),
    # an option's own text holding a capital letter word is not a second letter
    ("Answer: (C) A bank", ["x", "y", "a bank", "z", "w"], "C"),
    ("Answer: B. A bank", ["x", "a bank", "y", "z", "w"], "B"),
    ("Answer: B) Vitamin C", ["Iron", "Vitamin C", "Zinc", "Salt", "Sugar"], "B"),
    ("Answer: B) vitamin   c", ["Iron", "Vitamin C", "Zinc", "Salt", "Sugar"], "B"),
    ("Answer: D - Type A and Type B blood", ["x", "y", "z", "Type A and Type B blood", "w"], "D"),
    ("Answer: B) e-mail, e.g. a letter", ["x", "e-mail", "y", "z", "w"], "B"),
])
def test_one_letter_forms_keep_scoring(completion, options, letter):
    task = CommonsenseQA()
    assert task.reward([completion], answer=[letter], choices=[options]) == [1.0]
    assert task.is_correct(completion, letter, choices=options)
    # without the option texts (maj@k's extract_answer) a vote is never for another letter
    assert task.extract_answer(completion) in (letter, None)


def test_option_text_is_only_the_answered_options():
    options = ["Vitamin A", "Vitamin C", "Zinc", "Salt", "Sugar"]
    assert parse_letter("Answer: B) Vitamin C", 5, options) == "B"
    assert parse_letter("Answer: A) Vitamin C", 5, options) is None   # A's text is "Vitamin A"
    assert parse_letter("Answer: C) Vitamin A", 5, options) is None   # C's text is "Zinc"
    assert parse_letter("Answer: B) Vitamin C or Vitamin A", 5, options) is None


def test_reward_and_votes():
    task = CommonsenseQA()
    assert task.reward(["Answer: B", "Answer: A or B", "Answer: b", "B"], answer=["B"] * 4) == \
        [1.0, 0.0, 1.0, 0.0]
    assert task.extract_answer("Answer: (b) refrigerator") == "B"  # maj@k votes over letters
    assert task.extract_answer("Answer: A\nAnswer: B") is None
    assert task.is_correct(task.gold_completion(answer="D"), answer="D")


def test_prompt_letters_the_options_and_names_the_format():
    prompt = format_prompt("Q?", ["w", "x", "y", "z"])
    assert prompt.endswith("Q?\n\nA) w\nB) x\nC) y\nD) z")
    assert '"Answer: X"' in prompt and "(A, B, C or D)" in prompt


# ---- CommonsenseQA data ----

def _csqa_row(row_id="q1", key="B", labels="ABCDE", layout="original"):
    texts = ["oven", "refrigerator", "mailbox", "bookshelf", "garden"][:len(labels)]
    if layout == "hub":
        return {"id": row_id, "question": "Where is milk kept cold?", "question_concept": "milk",
                "choices": {"label": list(labels), "text": texts}, "answerKey": key}
    return {"answerKey": key, "id": row_id,
            "question": {"question_concept": "milk", "stem": "Where is milk kept cold?",
                         "choices": [{"label": lab, "text": t} for lab, t in zip(labels, texts)]}}


def _csqa_dir(tmp_path, train, dev, names=("train_rand_split.jsonl", "dev_rand_split.jsonl")):
    for name, rows in zip(names, (train, dev)):
        (tmp_path / name).write_text("".join(r if isinstance(r, str) else json.dumps(r) + "\n"
                                             for r in rows))
    return tmp_path


def test_csqa_fixture_splits():
    task = instantiate(OmegaConf.load(CONF / "csqa.yaml"))
    train, val, test = (task.load(s) for s in ("train", "validation", "test"))
    assert (len(train), len(val), len(test)) == (9, 3, 8)
    assert not set(train["id"]) & set(val["id"])
    assert all(i.startswith("fixture-") for i in [*train["id"], *val["id"], *test["id"]])
    assert task.name == "csqa-fixture" and task.source == "fixture"
    assert task.reward([task.gold_completion(answer=a) for a in test["answer"]],
                       answer=test["answer"]) == [1.0] * 8
    assert "E) " in test[0]["prompt"] and len(test[0]["choices"]) == 5


def test_fixture_run_is_marked():
    for task in (CommonsenseQA(), GPQA()):
        notes = task.run_info()["notes"]
        assert len(notes) == 1 and notes[0].startswith("FIXTURE DATA, not ")
        assert task.name.endswith("-fixture")


def test_csqa_both_layouts_and_the_carve_ignores_order(tmp_path):
    rows = [_csqa_row(f"q{i}", "ABCDE"[i % 5]) for i in range(12)]
    hub = [_csqa_row(f"q{i}", "ABCDE"[i % 5], layout="hub") for i in range(12)]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = CommonsenseQA(source="local", path=str(_csqa_dir(tmp_path / "a", rows, rows[:2])))
    b = CommonsenseQA(source="local", path=str(_csqa_dir(tmp_path / "b", hub[::-1], hub[:2],
                                                         ("train.jsonl", "validation.jsonl"))))
    assert sorted(a.load("validation")["id"]) == sorted(b.load("validation")["id"])
    assert a.load("test").to_list() == b.load("test").to_list()
    assert a.run_info()["notes"] == [] and a.name == "csqa"


@pytest.mark.parametrize("row, message", [
    (_csqa_row(key="F"), r":2: field `answerKey` is 'F', not among the choice labels A, B, C, D, E"),
    (_csqa_row(key=""), r":2: field `answerKey` is empty \(the official test split has no answers\)"),
    (_csqa_row(key="E", labels="ABCD"), r":2: the choice labels are \['A', 'B', 'C', 'D'\]"),
    (_csqa_row(key="C", layout="hub") | {"choices": {"label": list("ABCDE"), "text": ["x"] * 4}},
     r":2: field `choices` has 5 labels but 4 texts"),
    ({k: v for k, v in _csqa_row().items() if k != "id"}, r":2: field `id` is missing"),
    (_csqa_row() | {"question": {"stem": 3}}, r":2: field `question.stem` is a number"),
    (_csqa_row() | {"question": {"stem": "s", "choices": [{"label": "A"}]}},
     r":2: field `question.choices\[0\].text` is missing"),
    ([1, 2], r":2: the row is an array, not an object"),
    ('{"id": "q"\n', r":2: not valid JSON"),
])
def test_csqa_bad_rows_name_file_line_and_field(tmp_path, row, message):
    folder = _csqa_dir(tmp_path, [_csqa_row("ok"), row], [_csqa_row("dev")])
    with pytest.raises(TaskDataError, match=r"train_rand_split\.jsonl" + message):
        CommonsenseQA(source="local", path=str(folder))  # the constructor reads every row


def test_csqa_settings_errors(tmp_path):
    with pytest.raises(TaskDataError, match="task.source=local needs task.path"):
        CommonsenseQA(source="local")
    with pytest.raises(TaskDataError, match="only read with task.source=local"):
        CommonsenseQA(source="hub", path="/x")
    with pytest.raises(TaskDataError, match="unknown; use hub, local"):
        CommonsenseQA(source="zoo")
    with pytest.raises(TaskDataError, match="has no dev_rand_split.jsonl or validation.jsonl"):
        CommonsenseQA(source="local", path=str(tmp_path))
    _csqa_dir(tmp_path, [], [_csqa_row()], ("unused.jsonl", "dev_rand_split.jsonl"))
    with pytest.raises(TaskDataError, match="has no train_rand_split.jsonl or train.jsonl; task.path "
                                            "must be a directory holding the official CommonsenseQA train"):
        CommonsenseQA(source="local", path=str(tmp_path))  # both files, before any model loads


# ---- GPQA data ----

def _gpqa_csv(path, rows, header=GPQA_HEADER):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def test_gpqa_fixture_loads_shuffled_and_recorded():
    task = instantiate(OmegaConf.load(CONF / "gpqa.yaml"))
    test = task.load("test")
    assert len(test) == 12 and task.name == "gpqa-fixture"
    assert all(r.startswith("FIXTURE-NOT-GPQA-") for r in test["record_id"])
    for row in test.to_list():
        assert sorted(row["permutation"]) == [0, 1, 2, 3]
        assert row["permutation"] == permutation(row["record_id"])
        assert row["answer"] == "ABCD"[row["permutation"].index(0)]
    assert len(set(test["answer"])) > 1  # the correct answer does not always sit at A
    with pytest.raises(TaskDataError, match="evaluation-only"):
        task.load("train")


def test_gpqa_permutation_depends_on_the_record_id_only(tmp_path):
    rows = [["rec1", "Q one?", "right", "w1", "w2", "w3"], ["rec2", "Q two?", "r", "x", "y", "z"]]
    a = GPQA(source="local", path=str(_gpqa_csv(tmp_path / "a.csv", rows))).load("test")
    b = GPQA(source="local", path=str(_gpqa_csv(tmp_path / "b.csv", rows[::-1]))).load("test")
    by_id = {r["record_id"]: r for r in b.to_list()}
    for row in a.to_list():
        assert row == by_id[row["record_id"]]
        assert row["choices"][row["permutation"].index(0)] == row["choices"]["ABCD".index(row["answer"])]
    assert permutation("rec1") == permutation("rec1") != permutation("rec2")


def test_gpqa_multiline_fields_and_extra_columns(tmp_path):
    header = ["Pre-Revision Question", *GPQA_HEADER, "Explanation"]
    path = _gpqa_csv(tmp_path / "g.csv", [["old", "r1", "Line one\nline two?", "c", "i1", "i2", "i3", "e"],
                                          ["old", "r2", "Q?", "c", "i1", "i2", "", "e"]], header)
    with pytest.raises(TaskDataError, match=r"g\.csv:4: field `Incorrect Answer 3` is empty"):
        GPQA(source="local", path=str(path))


@pytest.mark.parametrize("row, message", [
    (["r", "Q?", "same", "other", "same ", "x"], r":3: field `Incorrect Answer 2` repeats the correct answer"),
    (["r", "Q?", "c", "i1", "i2"], r":3: field `Incorrect Answer 3` is missing"),
    (["", "Q?", "c", "i1", "i2", "i3"], r":3: field `Record ID` is empty"),
])
def test_gpqa_bad_rows_name_file_line_and_field(tmp_path, row, message):
    path = _gpqa_csv(tmp_path / "gpqa_diamond.csv", [["ok", "Q?", "c", "i1", "i2", "i3"], row])
    with pytest.raises(TaskDataError, match=r"gpqa_diamond\.csv" + message):
        GPQA(source="local", path=str(path))  # the constructor reads every row


def test_gpqa_header_subset_and_settings_errors(tmp_path):
    path = _gpqa_csv(tmp_path / "g.csv", [["r", "Q?", "c", "i1", "i2", "i3"]], GPQA_HEADER[:-1])
    with pytest.raises(TaskDataError, match=r"g\.csv:1: the header lacks column\(s\) 'Incorrect Answer 3'"):
        GPQA(source="local", path=str(path))
    main = _gpqa_csv(tmp_path / "gpqa_main.csv", [["r", "Q?", "c", "i1", "i2", "i3"]])
    with pytest.raises(TaskDataError, match="main subset's file but task.subset=diamond"):
        GPQA(source="local", path=str(main))
    assert len(GPQA(source="local", path=str(main), subset="main").load("test")) == 1
    with pytest.raises(TaskDataError, match="task.subset='tiny' is unknown"):
        GPQA(subset="tiny")
    with pytest.raises(TaskDataError, match="task.source=local needs task.path"):
        GPQA(source="local")


# ---- the hub, offline (tests/conftest.py sets HF_DATASETS_OFFLINE) ----

@pytest.mark.parametrize("task, hub_id", [(CommonsenseQA, "tau/commonsense_qa"), (GPQA, "Idavidrein/gpqa")])
def test_hub_fails_in_one_line_offline(task, hub_id):
    with pytest.raises(TaskDataError) as err:
        task(source="hub")  # the constructor reads the hub, before any model loads
    message = str(err.value)
    assert "\n" not in message and hub_id in message and "Offline?" in message
    assert "task.source=local task.path=" in message
    assert err.value.__cause__ is None
