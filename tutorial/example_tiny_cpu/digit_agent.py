"""The tiny CPU demo's agent: one model call, the reply is the answer; MathAnswerAsJudge scores it."""

from __future__ import annotations

from astuner import ModelTuner, Workflow, WorkflowOutput, WorkflowTask


class DigitWorkflow(Workflow):
    name: str = "digit_workflow"

    async def execute(self, workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput:
        reply = await model_tuner([{"role": "user", "content": workflow_task.task.main_query}])
        text = "".join(block.get("text", "") for block in reply.content if block["type"] == "text")
        return WorkflowOutput(reward=None, metadata={"final_answer": text})
