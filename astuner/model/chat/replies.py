"""A recorded reply as the assistant message a client got or a trainer rebuilds from it: its text, its tool calls in
OpenAI's shape (arguments as JSON text, `gateway.protocol.openai_tool_calls`) and its thinking (`reasoning_content`)
apart, split as the gateway splits a reply. Shared by the trace judge's conversations and the re-render check."""

from __future__ import annotations

from typing import Any

from astuner.gateway.protocol import openai_tool_calls
from astuner.model.chat.tool_parser import detect_format, parse_reply
from astuner.schema.calls import CallRecord


def reply_message(record: CallRecord, reply_format: tuple[str, str] = ("auto", "auto")) -> dict[str, Any]:
    """The call's reply as an assistant message. `reply_format`: (tool-call format, reasoning parser); a format of
    "auto" is the one the call's rendered prompt shows (its tools' instructions)."""
    fmt, reasoning = reply_format
    parsed = parse_reply(record.response_text, fmt=detect_format(record.prompt_text) if fmt == "auto" else fmt,
                         reasoning=reasoning)
    message: dict[str, Any] = {"role": "assistant", "content": parsed.text}
    if parsed.tool_calls:
        ids = [f"call_{i}" for i in range(len(parsed.tool_calls))]
        message["tool_calls"] = openai_tool_calls(parsed.tool_calls, ids)
    if parsed.thinking:
        message["reasoning_content"] = parsed.thinking
    return message
