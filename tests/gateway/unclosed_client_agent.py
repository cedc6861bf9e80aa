"""The tiny CPU demo's agent written with the plain openai SDK as most agents are: a new `AsyncOpenAI` per
episode, never closed. Nothing here knows about astuner beyond the workflow's shape; each episode reports how
many descriptors the process holds while it runs (metric `open_fds`)."""

from __future__ import annotations

import os

import openai

from astuner import Workflow, WorkflowOutput


class UnclosedClientWorkflow(Workflow):
    name: str = "unclosed_client"

    async def execute(self, workflow_task, model_tuner) -> WorkflowOutput:
        client = openai.AsyncOpenAI(base_url=workflow_task.openai_base_url, api_key=workflow_task.openai_api_key)
        reply = await client.chat.completions.create(
            model="policy", messages=[{"role": "user", "content": workflow_task.task.main_query}])
        return WorkflowOutput(reward=None, metadata={"final_answer": reply.choices[0].message.content or ""},
                              metrics={"open_fds": float(len(os.listdir("/proc/self/fd")))})
