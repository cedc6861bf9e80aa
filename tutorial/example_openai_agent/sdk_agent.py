"""The sensor agent as a plain `openai` SDK tool-calling loop. Nothing here knows about astuner: it is given a
base URL and an API key, as it would be given OpenAI's or a vLLM server's."""

from __future__ import annotations

import json
from typing import Callable, Optional

import openai

SYSTEM_PROMPT = "Call read_sensor, then answer in \\boxed{}."
READ_SENSOR = {"type": "function", "function": {
    "name": "read_sensor", "description": "Read the sensor the user asks about.",
    "parameters": {"type": "object", "properties": {}, "required": []}}}


async def solve(question: str, read_sensor: Callable[[], str], base_url: str, api_key: str,
                max_turns: int = 3, headers: Optional[dict[str, str]] = None) -> str:
    """Ask the model; run the tools it calls and give it their results, until it answers in plain text. `headers`:
    sent with every request (a deployment's session id, say)."""
    async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, default_headers=headers) as client:
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}]
        for _ in range(max_turns):
            reply = (await client.chat.completions.create(model="policy", messages=messages,
                                                          tools=[READ_SENSOR])).choices[0].message
            messages.append(reply.model_dump(exclude_none=True))
            if not reply.tool_calls:
                return reply.content or ""
            for call in reply.tool_calls:
                result = read_sensor() if call.function.name == "read_sensor" else f"no tool {call.function.name}"
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        return ""


def tool_arguments(call) -> dict:
    return json.loads(call.function.arguments or "{}")
