"""Judges of the seed system's era, with its import paths: a rule, and one that asks a hosted LLM."""

import re

from astuner.task_judge.base_judge import BaseJudge
from astuner.task_rollout.dashscope_llm_bridge import create_external_llm_fn
from astuner.workflow import WorkflowOutput, WorkflowTask


class MathAnswerAsJudge(BaseJudge):
    def __init__(self, config):
        self.config = config

    def compute_reward(self, workflow_task: WorkflowTask, workflow_output: WorkflowOutput) -> tuple:
        reference = workflow_task.task.metadata["answer"].split("####")[-1].strip()
        match = re.search(r"\\boxed\{([^}]*)\}", workflow_output.metadata["final_answer"])
        is_success = bool(match) and match.group(1) == reference
        return (1.0 if is_success else 0.0), is_success


class AskTheLlm(BaseJudge):
    def compute_reward(self, workflow_task: WorkflowTask, workflow_output: WorkflowOutput) -> tuple:
        ask = create_external_llm_fn(alien_llm_model="checker", alien_llm_response_length=16)
        reply = ask(messages=[{"role": "user", "content": f"Correct? {workflow_output.metadata['final_answer']}"}])
        return (1.0, True) if "<Correct>" in reply["content"] else (0.0, False)
