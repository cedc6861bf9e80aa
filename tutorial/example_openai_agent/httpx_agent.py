"""The sensor agent as raw HTTP: chat-completions requests posted with a synchronous `httpx.Client`, the tool
calls read from the JSON. Nothing here knows about astuner. (Blocking calls: its workflow runs in a thread of its
own, `rollout.run_workflow_in_thread: true`.)"""

from __future__ import annotations

from typing import Callable

import httpx

SYSTEM_PROMPT = "Call read_sensor, then answer in \\boxed{}."
READ_SENSOR = {"type": "function", "function": {
    "name": "read_sensor", "description": "Read the sensor the user asks about.",
    "parameters": {"type": "object", "properties": {}, "required": []}}}


def solve(question: str, read_sensor: Callable[[], str], base_url: str, api_key: str, max_turns: int = 3) -> str:
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}]
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {api_key}"}, timeout=600) as http:
        for _ in range(max_turns):
            response = http.post("/chat/completions", json={"model": "policy", "messages": messages,
                                                            "tools": [READ_SENSOR]})
            response.raise_for_status()
            reply = response.json()["choices"][0]["message"]
            messages.append(reply)
            if not reply.get("tool_calls"):
                return reply.get("content") or ""
            for call in reply["tool_calls"]:
                name = call["function"]["name"]
                result = read_sensor() if name == "read_sensor" else f"no tool {name}"
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    return ""
