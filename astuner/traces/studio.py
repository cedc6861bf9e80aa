"""AgentScope Studio's trace database read as a chat log: each model call an agent made while Studio traced it.

Studio (`as_studio`) keeps what AgentScope's tracing sends it (OpenTelemetry spans) in one SQLite file,
`~/AgentScope-Studio/database.sqlite` on Linux (`~/Library/Application Support/AgentScope-Studio/` on macOS), table
`span_table` (its `SpanTable` entity): a row per span with `traceId`, `spanId`, `startTimeUnixNano` (nanoseconds as
text), `statusCode` (OpenTelemetry's: 2 is an error) and `attributes` (JSON). Studio 1.0 stores the attributes
nested (`{"gen_ai": {"operation": {"name": "chat"}}}`), later versions flat (`{"gen_ai.operation.name": "chat"}`);
both are read. A model call is a span whose `gen_ai.operation.name` is `chat` (AgentScope's `trace_llm`;
`chat_model`, which Studio counts as one too):
- its messages and tools: `agentscope.function.input` = `{"args": [messages], "kwargs": {"tools": [...]}}`, the
  formatter's output as the chat model received it (OpenAI's message shape for OpenAIChatFormatter);
- its reply: `gen_ai.output.messages`, OpenTelemetry GenAI parts (`text`, `tool_call` with `id`, `name`,
  `arguments`); `reasoning` parts are left out (the chat message shape has no field for them) and counted.

An episode is a trace: one top-level traced call (an agent's reply to a message), with every model call made
inside it in the order they started; a trace whose root span is not stored yet (the agent is still replying) is
left for a later import. Studio records no rewards: give them with `astuner traces judge`. The database is
opened read-only; Studio may keep running."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from astuner.errors import DataError
from astuner.model.chat.messages import normalize_messages, normalize_tools
from astuner.traces.importer import LogCall, drop_broken, reply_message

SQLITE_HEADER = b"SQLite format 3\x00"
ERROR_STATUS = 2  # OpenTelemetry's StatusCode.ERROR
CHAT = ("chat", "chat_model")  # a model call's gen_ai.operation.name (Studio counts both as one)


def is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def attribute(attrs: dict[str, Any], key: str) -> Any:
    """`key` (dotted) from attributes stored flat or nested; a JSON text value is parsed."""
    if key in attrs:
        value = attrs[key]
    else:
        value = attrs
        for part in key.split("."):
            if not isinstance(value, dict):
                return None
            value = value.get(part)
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


@dataclass
class StudioLog:
    calls: list[LogCall]
    skipped: list[str]  # 'span ID: why' for each model-call span not imported
    reasoning: int  # the reasoning parts left out of the replies imported
    spans: int  # the model-call spans read


def read_studio(path: Path) -> StudioLog:
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as exc:
        raise DataError(f"{path}: not a readable SQLite database ({exc})") from None
    try:
        if "span_table" not in tables:
            raise DataError(f"{path}: a SQLite database without AgentScope Studio's span_table (tables: "
                            f"{', '.join(sorted(tables)) or 'none'}); name Studio's database.sqlite")
        columns = {row[1] for row in conn.execute("PRAGMA table_info(span_table)")}
        # Studio's indexed operationName column spares reading every other span's attributes
        only_chat = f"WHERE operationName IN {CHAT}" if "operationName" in columns else ""
        rows = conn.execute(f"SELECT traceId, spanId, statusCode, attributes FROM span_table {only_chat} "
                            "ORDER BY traceId, CAST(startTimeUnixNano AS INTEGER), spanId").fetchall()
        finished = {row[0] for row in conn.execute(  # a trace's root span ends (and is stored) last
            "SELECT DISTINCT traceId FROM span_table WHERE parentSpanId IS NULL OR parentSpanId = ''")}
    except sqlite3.DatabaseError as exc:
        raise DataError(f"{path}: AgentScope Studio's span_table could not be read ({exc})") from None
    finally:
        conn.close()
    calls, skipped, reasoning, spans, broken = [], [], 0, 0, set()
    for trace_id, span_id, status, text in rows:
        where = f"span {span_id}"
        try:
            attrs = json.loads(text) if isinstance(text, str) else None
        except json.JSONDecodeError:
            attrs = None
        if not isinstance(attrs, dict):
            if only_chat:  # its operationName column says it is a model call
                spans += 1
                skipped.append(f"{where}: its attributes are no JSON object")
                broken.add(trace_id)
            continue
        if attribute(attrs, "gen_ai.operation.name") not in CHAT:
            continue  # an agent's, a tool's or a formatter's span: its model calls are spans of their own
        spans += 1
        if trace_id not in finished:
            skipped.append(f"{where}: its trace {trace_id} is not finished (no root span yet); a later import "
                           f"takes it")
            continue
        try:
            if status == ERROR_STATUS:
                raise ValueError("the call failed (its span's status is ERROR)")
            call, left_out = parse_span(attrs, str(trace_id), where)
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            skipped.append(f"{where}: {str(exc)[:160]}")
            broken.add(trace_id)
            continue
        calls.append(call)
        reasoning += left_out
    calls, skipped = drop_broken(calls, skipped, {str(t) for t in broken})
    return StudioLog(calls, skipped, reasoning, spans)


def parse_span(attrs: dict[str, Any], episode: str, where: str) -> tuple[LogCall, int]:
    given = attribute(attrs, "agentscope.function.input")
    if not isinstance(given, dict):
        raise ValueError("no agentscope.function.input (the messages the model was given)")
    kwargs = given.get("kwargs") if isinstance(given.get("kwargs"), dict) else {}
    args = given.get("args") if isinstance(given.get("args"), list) else []
    messages = kwargs.get("messages", args[0] if args else None)
    if not isinstance(messages, list) or not messages:
        raise ValueError("no messages in agentscope.function.input")
    if kwargs.get("structured_model"):
        raise ValueError("a structured-output call: the chat model sent the structured model's schema as its tool "
                         "instead of the tools traced, so its prompt cannot be rendered again")
    # the tools the chat model was given (with tool_choice "none" too: they were in its prompt all the same)
    tools = kwargs.get("tools") or _nested_tools(attribute(attrs, "gen_ai.tool.definitions"))
    output = attribute(attrs, "gen_ai.output.messages")
    reply, reasoning = _reply(output)
    call = LogCall(episode, where, normalize_messages(messages), normalize_tools(tools), reply_message(reply))
    return call, reasoning


def _reply(output: Any) -> tuple[dict[str, Any], int]:
    """The assistant message of `gen_ai.output.messages` in the chat shape, and its reasoning parts left out."""
    if not isinstance(output, list) or not output or not isinstance(output[0], dict):
        raise ValueError("no gen_ai.output.messages (the model's reply)")
    texts, tool_calls, reasoning = [], [], 0
    for part in output[0].get("parts") or []:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            texts.append(str(part.get("content", "")))
        elif kind == "tool_call":
            arguments = part.get("arguments", {})
            tool_calls.append({"id": part.get("id"), "type": "function", "function": {
                "name": part.get("name"),
                "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)}})
        elif kind == "reasoning":
            reasoning += 1
        elif kind is None:
            raise ValueError(f"the reply's part {str(part)[:60]} is no object with a 'type'")
        else:
            raise ValueError(f"the reply holds a part of type {kind!r}; astuner trains text models")
    reply: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts)}
    if tool_calls:
        reply["tool_calls"] = tool_calls
    return reply, reasoning


def _nested_tools(definitions: Any) -> Optional[list[dict[str, Any]]]:
    """OpenTelemetry's flat tool definitions (`{"type", "name", "description", "parameters"}`) as OpenAI's."""
    if not isinstance(definitions, list):
        return None
    return [{"type": "function", "function": {k: v for k, v in d.items() if k != "type"}}
            for d in definitions if isinstance(d, dict)]
