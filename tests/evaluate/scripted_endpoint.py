"""A local OpenAI-compatible chat-completions server for the tests (Starlette on uvicorn, in a thread): it plays the
main job's sensor task. Model `careful` calls `read_sensor`, then answers the reading in \\boxed{}; `sloppy`
answers a reading with its digits reversed; `mute` answers without calling the tool; `odd` answers with thinking,
three tool calls (one good, one whose arguments are no JSON, one to a tool not offered), cut by its length limit;
`broken` answers a request without tools and fails (500) every request with them. Each request is kept
(`requests`), its Authorization header too; usage counts are the characters of the request / 4 and 7."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from typing import Any

KEY = "sk-test-endpoint"


class ScriptedEndpoint:
    def __init__(self) -> None:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        self.requests: list[dict[str, Any]] = []

        async def completions(request: Request) -> JSONResponse:
            body = await request.json()
            self.requests.append({**body, "authorization": request.headers.get("authorization")})
            if request.headers.get("authorization") != f"Bearer {KEY}":
                return JSONResponse({"error": {"message": "bad key", "type": "invalid_request_error"}}, 401)
            if body["model"] == "broken" and body.get("tools"):  # answers a plain question, fails the agent's calls
                return JSONResponse({"error": {"message": "tools overloaded", "type": "server_error"}}, 500)
            if body["model"] == "gone" and body.get("tools"):  # answers the probe, then the server goes away
                self.server.should_exit = True
                await asyncio.sleep(0.5)  # (its listener closed meanwhile: later calls find no server)
            return JSONResponse(self.reply(body))

        app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
        import uvicorn

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        messages, model = body["messages"], body["model"]
        last = messages[-1]
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if last["role"] == "tool":
            reading = str(last["content"]).strip()
            answer = reading if model == "careful" else reading[::-1]
            message["content"] = f"The sensor reads \\boxed{{{answer}}}."
        elif model == "mute":
            message["content"] = "\\boxed{0}"
        elif model == "odd":  # thinking, a good call, a call whose arguments are no JSON, one to no offered tool
            message.update(content="partial", reasoning_content="let me think", tool_calls=[
                {"id": "call_kept", "type": "function", "function": {"name": "read_sensor", "arguments": '{"id": 3}'}},
                {"id": "call_bad", "type": "function", "function": {"name": "read_sensor", "arguments": "{oops"}},
                {"id": "call_other", "type": "function", "function": {"name": "launch", "arguments": "{}"}}])
            return {"id": "chatcmpl-odd", "object": "chat.completion", "created": 0, "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": "length"}],
                    "usage": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}}
        else:
            message["tool_calls"] = [{"id": f"call_{len(self.requests)}", "type": "function",
                                      "function": {"name": "read_sensor", "arguments": "{}"}}]
        return {"id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": 0, "model": model,
                "choices": [{"index": 0, "message": message,
                             "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
                "usage": {"prompt_tokens": len(json.dumps(messages)) // 4, "completion_tokens": 7,
                          "total_tokens": len(json.dumps(messages)) // 4 + 7}}

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
