"""`MathAnswerAsJudge`: reward 1 when the episode's final answer equals the task's ground truth."""

from __future__ import annotations

from astuner.schema import JudgeOutput, WorkflowOutput, WorkflowTask
from astuner.schema.task import NoGroundTruth, fields_of
from astuner.task_judge.base import BaseJudge
from astuner.task_judge.math_answer import answers_match, extract_answer, ground_truth_of


class MathAnswerAsJudge(BaseJudge):
    """Reads `workflow_output.metadata["final_answer"]`, takes its last `\\boxed{...}` (or a bare number),
    and compares it with the ground truth in the task row (GSM8K `#### N`, or `answer` / `ground_truth`):
    numerically when both are numbers ("18" = "18.0" = "$18" = "18 dollars", "1,000" = "1000",
    "\\frac{1}{2}" = "0.5"), otherwise as normalised strings. Reward 1.0 if equal, else 0.0."""

    def compute_reward(self, workflow_task: WorkflowTask, workflow_output: WorkflowOutput) -> JudgeOutput:
        reference = ground_truth_of(workflow_task.task.metadata)
        if reference is None:
            raise NoGroundTruth(f"task {workflow_task.task_id} has no ground truth: its row needs an 'answer' or "
                                f"'ground_truth' field for MathAnswerAsJudge (it has "
                                f"{fields_of(workflow_task.task.metadata)})", workflow_task.task_id)
        predicted = extract_answer(workflow_output.metadata.get("final_answer"))
        correct = predicted is not None and answers_match(predicted, reference)
        return JudgeOutput(reward=1.0 if correct else 0.0, is_success=correct,
                           metrics={"judge/answer_found": float(predicted is not None)})
