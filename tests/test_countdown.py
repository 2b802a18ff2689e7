"""Countdown grading, templates, splits and the generator.

    python -m pytest tests/test_countdown.py -q
"""
import json

import pytest

from tasks.base import TaskDataError
from tasks.countdown import Countdown, _split_of, generate_problems
from tasks.judge.equation import UnsafeExpression, evaluate

NUMS, TARGET = [3, 7, 12], 22
HOSTILE = ["__import__('os').system('echo hi')", "9**9**9", "1/0", "(" * 10_000 + "1" + ")" * 10_000,
           "9" * 1_000_000, "open('/etc/passwd').read()", "lambda: 1", "3;7;12", "-3+7+12+6", "(12+7)+3.0"]


def test_correct_and_wrong_compact():
    t = Countdown()
    assert t.reward(["(12+7)+3", "12 + 7 + 3\nextra", "12+7+2", "12+7", "12+7+3+3"],
                    nums=[NUMS] * 5, target=[TARGET] * 5) == [1.0, 1.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_output_scores_zero(text):
    t = Countdown(template="think")
    for completion in (text, f"<think>x</think><answer>{text}</answer>"):
        r = t.reward([completion], nums=[NUMS], target=[TARGET])[0]
        assert r <= 0.1  # at most the format bonus, never correctness


def test_think_template_format_scores():
    t = Countdown(template="think")
    full = "<think>12+7=19, +3=22</think>\n<answer>(12+7)+3</answer>"
    assert t.reward([full], nums=[NUMS], target=[TARGET]) == [1.1]
    assert t.format_score("<think>a</think>") == pytest.approx(0.1)
    assert t.format_score("<answer>(12+7)+3</answer>") == pytest.approx(0.5)
    assert t.format_score("no tags") == 0.0
    # answer first, then think: both pairs but not the think-then-answer layout
    assert t.reward(["<answer>(12+7)+3</answer><think>x</think>"], nums=[NUMS], target=[TARGET]) == [1.06]
    # the last <answer> is the one graded
    assert t.is_correct("<answer>1+1</answer> <answer>(12+7)+3</answer>", NUMS, TARGET)


def test_division_is_exact_and_there_is_no_tolerance():
    assert evaluate("12/(7-3)")[0] == 3
    t = Countdown()
    assert t.is_correct("12/(3/7)", [3, 7, 12], 28)
    assert not t.is_correct("12/(3/7)", [3, 7, 12], 28.001)
    # near-misses within TinyZero's 1e-5 float tolerance once scored full marks
    assert abs(float(evaluate("5+1/(99*98*97)")[0]) - 5) < 1e-5
    assert not t.is_correct("5+1/(99*98*97)", [5, 1, 99, 98, 97], 5)
    assert not t.is_correct("1/(99*98*97)", [1, 99, 98, 97], 0)
    assert t.reward(["5+1/(99*98*97)", "5*1+99-98-(97-96)"], nums=[[5, 1, 99, 98, 97],
                    [5, 1, 99, 98, 97, 96]], target=[5, 5]) == [0.0, 1.0]
    think = Countdown(template="think")
    assert think.reward(["<think>x</think><answer>5+1/(99*98*97)</answer>",
                         "<think>x</think><answer>(12+7)+3</answer>"],
                        nums=[[5, 1, 99, 98, 97], NUMS], target=[5, TARGET]) == [0.1, 1.1]
    assert t.gold_completion([99, 98, 97, 5, 1], 5) is not None  # solve() is exact as well


def test_evaluate_rejects_unsafe():
    for e in HOSTILE[:7]:
        with pytest.raises(UnsafeExpression):
            evaluate(e)


def test_extract_answer():
    assert Countdown().extract_answer(" (12 + 7) + 3\nmore") == "(12+7)+3"
    assert Countdown().extract_answer("   ") is None
    assert Countdown(template="think").extract_answer("<think>x</think>") is None


@pytest.mark.parametrize("numbers", [3, 4])
def test_zoo_splits_disjoint_and_solvable(numbers):
    seen = {}
    for split in ("train", "validation", "test"):
        rows = generate_problems(split, 300, numbers=numbers)
        for r in rows:
            assert _split_of(r["nums"], r["target"]) == split
            value, used = evaluate(r["solution"])
            assert value == r["target"] and sorted(used) == sorted(r["nums"]) and 1 <= r["target"] <= 100
        seen[split] = {(tuple(sorted(r["nums"])), r["target"]) for r in rows}
    assert not seen["train"] & seen["test"] and not seen["train"] & seen["validation"]
    assert generate_problems("test", 50, numbers=numbers) == generate_problems("test", 50, numbers=numbers)
    assert all(len(r["nums"]) == numbers for r in rows)


def test_three_number_stream_is_unchanged():
    # the shipped zoo models and every committed result were made from this exact stream
    assert generate_problems("test", 2) == [
        {"nums": [1, 4, 5], "target": 1, "solution": "(5-4)*1"},
        {"nums": [6, 6, 9], "target": 4, "solution": "(6*6)/9"}]
    assert Countdown().load("test")[0]["prompt"] == "1 4 5>1:"


def test_four_number_task_and_its_bad_settings():
    rows = Countdown(numbers=4).load("validation")
    assert rows[0]["prompt"].count(" ") == 3 and len(rows) == 500
    with pytest.raises(TaskDataError, match="use 3 or 4"):
        Countdown(numbers=5)
    with pytest.raises(TaskDataError, match="source=zoo only"):
        Countdown(source="tinyzero", numbers=4)


def test_gold_solutions_score_one():
    t = Countdown()
    rows = t.load("test")
    assert t.reward(rows["solution"], nums=rows["nums"], target=rows["target"]) == [1.0] * len(rows)


def test_tinyzero_and_paper_sources(tmp_path):
    t = Countdown(source="tinyzero", template="think", n_eval=5)
    test = t.load("test")
    assert len(test) == 5 and "<answer>" in test[0]["prompt"] and test[0]["nums"] == [96, 7, 37, 74]
    assert len(Countdown(source="tinyzero", n_eval=200).load("validation")) == 200  # n_eval caps 500 rows
    assert len(Countdown(source="tinyzero", n_eval=None).load("validation")) == 497  # less 3 training problems
    rows = [{"target": 10 + i % 50, "numbers": [1, 2, 3]} for i in range(2200)]
    path = tmp_path / "countdown.json"
    path.write_text(json.dumps(rows))
    p = Countdown(source="paper", path=str(path), n_eval=None)
    assert len(p.load("train")) == 200 and len(p.load("test")) == 2000


def test_bad_data_names_the_problem(tmp_path):
    with pytest.raises(TaskDataError, match="needs task.path"):
        Countdown(source="paper")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"target": 3, "nums": [1, 2]}\n{"target": "x"}\n')
    with pytest.raises(TaskDataError, match=r"bad\.jsonl:2: the row has no `nums`"):
        Countdown(source="paper", path=str(bad)).load("test")
    with pytest.raises(TaskDataError, match="not found"):
        Countdown(source="paper", path=str(tmp_path / "missing.json")).load("test")
    with pytest.raises(TaskDataError, match="unknown"):
        Countdown(source="hub")


# ---- linear-time tag parsing (100,000 repeats of "<answer>" took over 20 s with the old regex;
# with str.rfind the whole test takes well under a second on a laptop) ----
REPEATS = 100_000


@pytest.mark.parametrize("completion, expected", [
    ("<answer>" * REPEATS, None),
    ("<answer>" * REPEATS + "(12+7)+3</answer>", "(12+7)+3"),
    ("<think>" * REPEATS + "</think><answer>(12+7)+3</answer>", "(12+7)+3"),
    ("<answer>(12+7)+3</answer>" + "<answer>" * REPEATS, "(12+7)+3"),  # cut-off tail ignored
    ("</answer>" * REPEATS, None),
    ("<answer>1+1</answer> <answer>(12+7)+3</answer>", "(12+7)+3"),
    ("<answer>1<answer>(12+7)+3</answer>", "(12+7)+3"),  # the innermost, nearest opening tag
])
def test_extraction_of_many_tags(completion, expected):
    t = Countdown(template="think")
    assert t.extract_answer(completion) == expected
    assert t.is_correct(completion, NUMS, TARGET) == (expected is not None)


@pytest.mark.parametrize("completion, score", [
    ("<think>" * REPEATS, 0.0),
    ("<answer>" * REPEATS, 0.0),
    ("<think>" + "</think><answer></answer>" * (REPEATS // 4) + "x", 0.6),
    ("<think>a</think>" + "<answer>" * REPEATS + "</answer>", 1.0),
    ("  <think>a</think> \n <answer>1</answer>\n", 1.0),
    ("<think>a</think>x<answer>1</answer>", 0.6),  # text between the blocks
    ("<think></think><answer>", 0.1),
    ("<think>a</think><answer>1</answer>extra", 0.6),
])
def test_format_score_of_many_tags(completion, score):
    assert Countdown(template="think").format_score(completion) == pytest.approx(score)


# ---- data files: `path:line: problem; fix` for every malformed row ----
GOOD = '{"target": 22, "nums": [3, 7, 12]}'


def _load(tmp_path, text, name="cd.jsonl", split="test"):
    path = tmp_path / name
    path.write_text(text) if isinstance(text, str) else path.write_bytes(text)
    return Countdown(source="paper", path=str(path)).load(split)


def _build(tmp_path, text, name="cd.jsonl"):
    """Only the constructor: a bad file must fail here, before any model loads."""
    path = tmp_path / name
    path.write_text(text) if isinstance(text, str) else path.write_bytes(text)
    return Countdown(source="paper", path=str(path))


@pytest.mark.parametrize("text, message", [
    ((GOOD + "\n") * 3 + '{"target": 22, "nums": [3, 7', r"cd\.jsonl:4: not valid JSON .*cut off"),
    ((GOOD + "\n") * 2 + '{"target": 22, "nums": [true, 2, 7]}\n', r"cd\.jsonl:3: field `nums` is \[True"),
    (GOOD + '\n{"target": NaN, "nums": [1, 2]}\n', r"cd\.jsonl:2: field `target` is nan"),
    (GOOD + '\n{"target": -Infinity, "nums": [1, 2]}\n', r"cd\.jsonl:2: field `target` is -inf"),
    (GOOD + '\n{"target": 3, "nums": [1, ' + "9" * 5000 + ']}\n', r"cd\.jsonl:2: not usable JSON"),
    (GOOD + '\n{"target": 2.5, "nums": [1, 2]}\n', r"cd\.jsonl:2: field `target` is 2\.5"),
    (GOOD + '\n{"target": 1e400, "nums": [1, 2]}\n', r"cd\.jsonl:2: field `target` is inf"),
    (GOOD + '\n{"target": "24", "nums": [1, 2]}\n', r"cd\.jsonl:2: field `target` is '24'"),
    (GOOD + '\n{"target": true, "nums": [1, 2]}\n', r"cd\.jsonl:2: field `target` is True"),
    (GOOD + '\n{"nums": [1, 2]}\n', r"cd\.jsonl:2: field `target` is missing"),
    (GOOD + '\n{"target": 3, "numbers": [1, "2"]}\n', r"cd\.jsonl:2: field `numbers`"),
    (GOOD + '\n{"target": 3, "nums": [1.0, 2]}\n', r"cd\.jsonl:2: field `nums`"),
    (GOOD + '\n{"target": 3, "nums": []}\n', r"cd\.jsonl:2: field `nums`"),
    (GOOD + '\n{"target": 3, "nums": [-1, 4]}\n', r"cd\.jsonl:2: field `nums`"),
    (GOOD + '\n{"target": 3, "nums": [1, 99999999999999999999999]}\n', r"cd\.jsonl:2: field `nums`"),
    (GOOD + '\n{"target": 3, "nums": 12}\n', r"cd\.jsonl:2: field `nums` is 12"),
    (GOOD + "\n[3, 7, 12]\n", r"cd\.jsonl:2: the row is an array"),
    (GOOD + "\n" + "[" * 100_000 + "\n", r"cd\.jsonl:2: not usable JSON"),
    ("", r"cd\.jsonl is empty"),
    ("\n  \n", r"cd\.jsonl is empty"),
    (b'{"target": 22, "nums": [3, 7, 12]}\n\xff\xfe\n', r"cd\.jsonl:2: not UTF-8"),
])
def test_malformed_rows_name_file_line_and_field(tmp_path, text, message):
    with pytest.raises(TaskDataError, match=message):
        _build(tmp_path, text)


def test_the_papers_file_is_checked_when_the_task_is_built(tmp_path):
    # the paper's format: a JSON list of {context, numbers, target}; one bad row far down the file
    rows = [{"context": "c", "numbers": [3, 7, 12], "target": 22}] * 2200
    rows = rows[:1500] + [{"context": "c", "numbers": [3, 7, 12], "target": "x"}] + rows[1501:]
    text = "[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n]\n"
    with pytest.raises(TaskDataError, match=r"countdown\.json:1502: field `target` is 'x'; it must be a "
                                            r"finite integer below 1,000,000,000 in absolute value"):
        _build(tmp_path, text, "countdown.json")
    with pytest.raises(TaskDataError, match=r"cd\.jsonl: 3 rows, but the ES paper's file has 2,200 "
                                            r"\(200 train, then 2,000 test\); point task.path at that file"):
        _build(tmp_path, (GOOD + "\n") * 3)
    (tmp_path / "cd.jsonl").write_text(GOOD + '\n{"target": 3, "nums": [1.5]}\n')
    for template in ("compact", "think"):  # either template reads the file when built
        with pytest.raises(TaskDataError, match=r"cd\.jsonl:2: field `nums` is \[1\.5\]; it must be a list"):
            Countdown(source="paper", template=template, path=str(tmp_path / "cd.jsonl"))


def test_json_list_rows_are_named_by_line(tmp_path):
    rows = [{"target": 22, "nums": [3, 7, 12]}] * 4 + [{"target": 22, "nums": [3, False, 12]}]
    text = "[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n]\n"
    with pytest.raises(TaskDataError, match=r"cd\.json:6: field `nums`"):
        _load(tmp_path, text, "cd.json")
    with pytest.raises(TaskDataError, match=r"cd\.json:4: not valid JSON"):
        _load(tmp_path, '[\n{"target": 1, "nums": [1]},\n{"target": 1, "nums": [1]\n]', "cd.json")
    with pytest.raises(TaskDataError, match=r"cd\.json:2: the row is a number"):
        _load(tmp_path, '[\n1, 2]', "cd.json")


def test_integral_float_target_and_bom_are_accepted(tmp_path):
    rows = ["\ufeff" + json.dumps({"target": 22.0, "numbers": [3, 7, 12]})]
    rows += [json.dumps({"target": 22, "nums": [3, 7, 12]})] * 2199
    test = _load(tmp_path, "\n".join(rows) + "\n", split="train")
    assert test[0]["target"] == 22 and isinstance(test[0]["target"], int)


@pytest.mark.parametrize("path, message", [
    (123, "not a file path"),
    ("", "needs task.path"),
    (["a"], "not a file path"),
    (".", "is a directory"),
])
def test_bad_task_path(path, message):
    with pytest.raises(TaskDataError, match=message):
        Countdown(source="paper", path=path).load("test")


def test_unreadable_task_path(tmp_path):
    path = tmp_path / "secret.jsonl"
    path.write_text(GOOD + "\n")
    path.chmod(0)
    try:
        path.read_bytes()
        pytest.skip("running as a user who can read any file")
    except PermissionError:
        pass
    with pytest.raises(TaskDataError, match="cannot be read"):
        Countdown(source="paper", path=str(path)).load("test")


@pytest.mark.parametrize("field, value", [("n_eval", -5), ("n_eval", 0), ("n_train", 2.5),
                                          ("n_eval", True)])
def test_bad_row_counts(field, value):
    with pytest.raises(TaskDataError, match=f"task.{field}"):
        Countdown(**{field: value})
