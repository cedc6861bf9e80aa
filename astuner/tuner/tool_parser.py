"""Parse a model's reply: optional <think>…</think>, text, and Hermes-style tool calls
(<tool_call>{"name": ..., "arguments": {...}}</tool_call>), the format of ChatML/Qwen templates."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Optional

_TOOL_CALL = re.compile(r"<tool_call>(.*?)(</tool_call>|$)", re.DOTALL)
_THINK = re.compile(r"^\s*(?:<think>)?(.*?)</think>", re.DOTALL)


@dataclass
class ParsedCall:
    name: str
    arguments: dict[str, Any]
    raw: str


@dataclass
class ParsedReply:
    text: str
    thinking: Optional[str] = None
    tool_calls: list[ParsedCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # malformed tool calls; the episode is flagged wrong_toolcall


def parse_reply(text: str, tool_names: Optional[set[str]] = None) -> ParsedReply:
    """Split a decoded reply (end-of-turn token already removed) into thinking, text and tool calls.
    A malformed call keeps its text in `text` and is reported in `errors`; a call to a tool that was not
    offered is reported too (`tool_names` None skips that check)."""
    thinking = None
    m = _THINK.match(text)
    if m and "</think>" in text:
        thinking = m.group(1).strip()
        text = text[m.end():]
    calls, errors, kept = [], [], []
    last = 0
    for match in _TOOL_CALL.finditer(text):
        body, closing = match.group(1), match.group(2)
        kept.append(text[last:match.start()])
        last = match.end()
        problem = None
        payload: Any = None
        if not closing:
            problem = "a <tool_call> is not closed"
        else:
            try:
                payload = json.loads(body.strip())
            except json.JSONDecodeError as exc:
                problem = f"tool call JSON does not parse ({exc.msg})"
        if problem is None:
            if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
                problem = "a tool call needs a JSON object with a string 'name'"
            else:
                arguments = payload.get("arguments", payload.get("parameters", {}))
                if isinstance(arguments, str):
                    try:
                        arguments = json.loads(arguments)
                    except json.JSONDecodeError:
                        arguments = None
                if not isinstance(arguments, dict):
                    problem = f"tool call {payload['name']!r} has arguments that are not a JSON object"
                elif tool_names is not None and payload["name"] not in tool_names:
                    problem = f"tool {payload['name']!r} was not offered (offered: {', '.join(sorted(tool_names)) or 'none'})"
                else:
                    calls.append(ParsedCall(payload["name"], arguments, match.group(0)))
                    continue
        errors.append(problem)
        kept.append(match.group(0))
    kept.append(text[last:])
    return ParsedReply(text="".join(kept).strip(), thinking=thinking, tool_calls=calls, errors=errors)
