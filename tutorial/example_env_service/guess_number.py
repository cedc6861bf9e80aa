"""A multi-turn agent that plays the reference environment's number-guessing game.

The model is called the AgentScope way (`await model(messages)`), so the same workflow runs with
astuner's trainable model or with any AgentScope chat model. The environment's verdict is the reward,
so no judge is needed (task_judge.judge_protocol: null).
"""

from __future__ import annotations

from astuner import Workflow, WorkflowOutput, WorkflowTask
from astuner.env_service import EnvServiceClient

SYSTEM_PROMPT = ("You play a number-guessing game. Reply with exactly one integer between 1 and 100 and nothing "
                 "else. Use the hints 'higher' and 'lower' to narrow the range.")


def response_text(response) -> str:
    """The text blocks of an AgentScope ChatResponse, joined."""
    return "".join(block.get("text", "") for block in response.content if block.get("type") == "text")


class GuessNumberWorkflow(Workflow):
    name: str = "guess_number_workflow"

    async def execute(self, workflow_task: WorkflowTask, model_tuner) -> WorkflowOutput:
        task = workflow_task.task
        env = EnvServiceClient(task.metadata["env_url"])
        instance = env.create(task.env_type, task.task_id, workflow_task.episode_uuid)
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, *instance["init_messages"]]
        try:
            done = False
            while not done:
                text = response_text(await model_tuner(messages))
                messages.append({"role": "assistant", "content": text})
                result = env.step(instance["instance_id"], {"role": "assistant", "content": text})
                messages.append(result["observation"])
                done = result["done"]
            verdict = env.evaluate(instance["instance_id"])
        finally:
            env.release(instance["instance_id"])
        return WorkflowOutput(reward=float(verdict["reward"]), is_success=bool(verdict["is_success"]),
                              metadata={"steps": verdict["info"].get("steps")}, response=messages[-2]["content"])
