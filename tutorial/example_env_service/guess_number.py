"""A multi-turn agent that plays the reference environment's number-guessing game.

The model is called the AgentScope way (`await model(messages)`), so the same workflow runs with
astuner's trainable model or with any AgentScope chat model. `workflow_task.env` is this episode's
environment instance; the configured EnvServiceJudge asks the environment for the reward.
"""

from __future__ import annotations

from astuner import Workflow, WorkflowOutput, WorkflowTask

SYSTEM_PROMPT = ("You play a number-guessing game. Reply with exactly one integer between 1 and 100 and nothing "
                 "else. Use the hints 'higher' and 'lower' to narrow the range.")


def response_text(response) -> str:
    """The text blocks of an AgentScope ChatResponse, joined."""
    return "".join(block.get("text", "") for block in response.content if block.get("type") == "text")


class GuessNumberWorkflow(Workflow):
    name: str = "guess_number_workflow"

    async def execute(self, workflow_task: WorkflowTask, model_tuner) -> WorkflowOutput:
        env = workflow_task.env
        instance = await env.create()
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, *instance["init_messages"]]
        done = False
        while not done:
            text = response_text(await model_tuner(messages))
            messages.append({"role": "assistant", "content": text})
            result = await env.step({"role": "assistant", "content": text})
            messages.append(result["observation"])
            done = result["done"]
        return WorkflowOutput(reward=None, metadata={"turns": len(messages) // 2 - 1}, response=text)
