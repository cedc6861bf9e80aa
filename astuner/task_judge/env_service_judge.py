"""`EnvServiceJudge`: the environment service's own evaluation of the episode's instance."""

from __future__ import annotations

from astuner.schema import JudgeOutput, WorkflowOutput, WorkflowTask
from astuner.task_judge.base import BaseJudge


class EnvServiceJudge(BaseJudge):
    async def compute_reward(self, workflow_task: WorkflowTask, workflow_output: WorkflowOutput) -> JudgeOutput:
        env = workflow_task.env
        if env is None:
            raise ValueError(f"task {workflow_task.task_id} has no environment; EnvServiceJudge needs "
                             f"task_reader.type env_service")
        if env.created is None:
            raise ValueError(f"the workflow never created its environment instance for task {workflow_task.task_id} "
                             f"(call `await workflow_task.env.create()`)")
        verdict = await env.evaluate(workflow_output.metadata.get("evaluate_params"))
        reward = float(verdict["reward"])
        return JudgeOutput(reward=reward, is_success=bool(verdict.get("is_success", reward > 0)))
