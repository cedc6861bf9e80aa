"""Bring what AgentScope formatters produce into the shape chat templates expect.

Accepted: string content or lists of text blocks (OpenAIChatFormatter, DashScopeChatFormatter),
assistant `tool_calls` whose arguments are JSON strings or objects, and `tool` results. Other
content blocks (images, audio) are refused: astuner trains text models.
"""

from __future__ import annotations

import json
from typing import Any

from astuner.errors import BadModelInput

ROLES = ("system", "user", "assistant", "tool")


def _text_of(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
            elif isinstance(block, dict) and "text" in block and "type" not in block:
                parts.append(str(block["text"]))
            else:
                kind = block.get("type") if isinstance(block, dict) else type(block).__name__
                raise BadModelInput(f"{where}: content block of type {kind!r} is not supported; astuner trains text "
                                 f"models, so messages may hold text blocks only")
        return "\n".join(parts)
    raise BadModelInput(f"{where}: content must be a string or a list of text blocks, got {type(content).__name__}")


def _tool_call(call: Any, where: str) -> dict[str, Any]:
    if not isinstance(call, dict):
        raise BadModelInput(f"{where}: a tool call must be an object, got {type(call).__name__}")
    function = call.get("function", call)
    if not isinstance(function, dict):
        raise BadModelInput(f"{where}: a tool call's 'function' must be an object with a 'name', got "
                         f"{type(function).__name__}")
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise BadModelInput(f"{where}: a tool call's function name must be a non-empty string, got {name!r}"[:200])
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            pass  # keep the text as the model wrote it
    return {"id": call.get("id"), "type": "function", "function": {"name": name, "arguments": arguments}}


def normalize_messages(messages: Any) -> list[dict[str, Any]]:
    """Template-ready copies of `messages`: role, string content, tool_calls with object arguments."""
    if not isinstance(messages, list) or not messages:
        raise BadModelInput("ModelTuner needs a non-empty list of messages")
    out = []
    for i, msg in enumerate(messages):
        where = f"message {i}"
        if not isinstance(msg, dict):
            raise BadModelInput(f"{where}: a message must be a dict with 'role' and 'content', got "
                                f"{type(msg).__name__}")
        role = msg.get("role")
        if role not in ROLES:
            raise BadModelInput(f"{where}: role {role!r} is not one of {', '.join(ROLES)}")
        item: dict[str, Any] = {"role": role, "content": _text_of(msg.get("content"), where)}
        if role == "assistant" and msg.get("tool_calls"):
            if not isinstance(msg["tool_calls"], list):
                raise BadModelInput(f"{where}: tool_calls must be a list, got {type(msg['tool_calls']).__name__}")
            item["tool_calls"] = [_tool_call(c, where) for c in msg["tool_calls"]]
        if role == "tool":
            item["tool_call_id"] = msg.get("tool_call_id")
            if msg.get("name"):
                item["name"] = msg["name"]
        out.append(item)
    return out


def normalize_tools(tools: Any) -> list[dict[str, Any]] | None:
    """OpenAI function schemas; None or [] means no tools."""
    if not tools:
        return None
    if not isinstance(tools, list):
        raise BadModelInput(f"tools must be a list of OpenAI function schemas, got {type(tools).__name__}")
    out = []
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"] \
                or not isinstance(function.get("parameters") or {}, dict):
            raise BadModelInput(f"tool {i} is not an OpenAI function schema ({{'type': 'function', 'function': "
                             f"{{'name': ..., 'parameters': ...}}}})")
        out.append(tool)
    return out
