"""Math answer extraction, comparison, and MathAnswerAsJudge."""

from __future__ import annotations


import pytest

from astuner import Task, WorkflowOutput, WorkflowTask
from astuner.task_judge.math_answer import answers_match, extract_answer, ground_truth_of, last_boxed
from astuner.task_judge.math_answer_as_judge import MathAnswerAsJudge


@pytest.mark.parametrize("predicted,reference,equal", [
    ("18", "18.0", True), ("$18", "18", True), ("18 dollars", "18", True), ("\\$18.00", "18", True),
    ("1,000", "1000", True), ("\\frac{1}{2}", "0.5", True), ("\\dfrac{3}{4}", "3/4", True), ("-\\frac{1}{2}", "-0.5", True),
    ("50\\%", "50", True), ("\\text{5 apples}", "5", True), ("17", "18", False), ("1,00", "100", False),
    ("x+1", "x + 1", True), ("yes", "no", False), ("", "", False), ("18.5", "18", False),
    ("x = 18", "18", True), ("n=3.5", "7/2", True), ("\\text{x} = 5", "5", True),  # an assignment's value
    ("1 8", "18", False), ("7 2", "72", False), ("1 8", "1 8", True),  # digits split by spaces
    ("\\$1 000", "1000", True), ("12\u2009345.5", "12345.5", True), ("12 34", "1234", False),  # spaced thousands
])
def test_answers_match(predicted, reference, equal):
    assert answers_match(predicted, reference) is equal


def test_last_boxed_handles_nesting_and_takes_the_last():
    assert last_boxed(r"first \boxed{1} then \boxed{\frac{2}{3}}") == r"\frac{2}{3}"
    assert last_boxed(r"\boxed{a{b{c}}} tail") == "a{b{c}}"
    assert last_boxed("no box") is None
    assert last_boxed(r"broken \boxed{unclosed") is None


def test_extract_answer_fallbacks():
    assert extract_answer(r"so the answer is \boxed{42}.") == "42"
    assert extract_answer(" 42 ") == "42"
    assert extract_answer("work...\n#### 42") == "42"
    assert extract_answer("I think it is 42 but not sure") is None
    assert extract_answer(None) is None
    assert extract_answer("x = 42") == "x = 42" and answers_match(extract_answer(r"\boxed{x = 42}"), "42")


def test_ground_truth_forms():
    assert ground_truth_of({"answer": "steps\n#### 1,234"}) == "1,234"
    assert ground_truth_of({"ground_truth": " 7 "}) == "7"
    assert ground_truth_of({"question": "q"}) is None


def _judge(final_answer, metadata):
    task = WorkflowTask(task=Task(task_id="t", main_query="q", metadata=metadata))
    return MathAnswerAsJudge().compute_reward(task, WorkflowOutput(metadata={"final_answer": final_answer}))


def test_judge_on_gsm8k_rows(gsm8k_dir):
    import json

    row = json.loads((gsm8k_dir / "train.jsonl").read_text().splitlines()[0])  # answer 72
    assert _judge(r"Natalia sold 48 + 24 = 72 clips. \boxed{72}", row).reward == 1.0
    wrong = _judge(r"\boxed{96}", row)
    assert (wrong.reward, wrong.is_success) == (0.0, False)
    assert _judge("no boxed answer here", row).metrics["judge/answer_found"] == 0.0


def test_judge_without_ground_truth_raises():
    with pytest.raises(ValueError, match="has no ground truth"):
        _judge(r"\boxed{1}", {"question": "q"})


def test_judge_agrees_with_hand_labels_on_gsm8k_solutions(gsm8k_dir):
    """Replies to GSM8K test problems written in the style of model output (boxed, units, currency,
    thousands separators, percent, wrong answers), each labelled by hand."""
    import json
    from pathlib import Path

    rows = [json.loads(line) for line in (gsm8k_dir / "test.jsonl").read_text().splitlines()]
    labelled = [json.loads(line) for line in
                (Path(__file__).parent / "data" / "gsm8k_test_solutions.jsonl").read_text().splitlines()]
    disagreements = []
    for item in labelled:
        verdict = _judge(item["solution"], rows[item["test_index"]])
        if verdict.is_success != item["correct"]:
            disagreements.append(item)
    assert len(labelled) >= 30
    assert disagreements == []
