"""The three agents as astuner workflows: each hands its agent the episode's base URL and key (the task's
`openai_base_url` / `openai_api_key`, there because `rollout.openai_gateway.enable` is on) and the tool's
environment (the sensor's reading), and returns the final answer for the judge. This file is the only one that
imports astuner; the agents (`react_agent.py`, `sdk_agent.py`, `httpx_agent.py`) do not."""

from __future__ import annotations

import httpx_agent
import react_agent
import sdk_agent

from astuner import WorkflowOutput


def _sensor(task: dict):
    return lambda: str(task["reading"])


async def react_workflow(task: dict, model_tuner, auxiliary_models=None) -> WorkflowOutput:
    answer = await react_agent.solve(task["main_query"], _sensor(task), task["openai_base_url"], task["openai_api_key"])
    return WorkflowOutput(reward=None, metadata={"final_answer": answer})


async def sdk_workflow(task: dict, model_tuner, auxiliary_models=None) -> WorkflowOutput:
    answer = await sdk_agent.solve(task["main_query"], _sensor(task), task["openai_base_url"], task["openai_api_key"])
    return WorkflowOutput(reward=None, metadata={"final_answer": answer})


async def httpx_workflow(task: dict, model_tuner, auxiliary_models=None) -> WorkflowOutput:
    answer = httpx_agent.solve(task["main_query"], _sensor(task), task["openai_base_url"], task["openai_api_key"])
    return WorkflowOutput(reward=None, metadata={"final_answer": answer})
