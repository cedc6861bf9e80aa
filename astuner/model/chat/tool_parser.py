"""Parse a model's reply into thinking, text and tool calls, in the tool-call format its chat template teaches
(`rollout.tool_call_parser`; names as vLLM's parsers where they exist):

- `hermes`: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (Qwen2.5, Qwen3, ChatML templates);
- `qwen3_coder`: `<tool_call><function=NAME><parameter=ARG>value</parameter>…</function></tool_call>`
  (Qwen3-Coder; values converted by the tool's JSON schema: strings stay text, other types parse as JSON);
- `llama3_json`: the reply is `{"name": ..., "parameters": {...}}` (optionally after `<|python_tag|>`), several
  separated by `;` (Llama 3.1-3.3);
- `mistral`: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, …]` or `[TOOL_CALLS]NAME[ARGS]{...}` (newer
  Mistral tokenizers; an optional `[CALL_ID]id` before `[ARGS]`);
- `gpt_oss`: OpenAI's harmony messages — `<|channel|>analysis<|message|>…<|end|>` is thinking,
  `<|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>` a
  call, `<|channel|>final<|message|>…` the text;
- `auto`: picked from the chat template's text (`detect_format`), hermes when it cannot tell.

Thinking (`rollout.reasoning_parser`): `auto` and `think` take a leading `<think>…</think>` (DeepSeek-R1,
Qwen3; `auto` only when the closing tag is there); `none` leaves the text alone. A malformed call, or a call to
a tool that was not offered, keeps its text in the reply's text and is reported in `errors` (the episode is
flagged `wrong_toolcall`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from astuner.config.schema import REASONING_ALIASES  # the choices are declared with their keys
from astuner.config.schema import REASONING_PARSERS as REASONING_CHOICES
from astuner.config.schema import TOOL_CALL_ALIASES as ALIASES
from astuner.config.schema import TOOL_CALL_FORMATS as FORMATS
from astuner.config.schema import TOOL_CALL_PARSERS as PARSER_CHOICES

VLLM_NAMES = {"hermes": "hermes", "qwen3_coder": "qwen3_coder", "llama3_json": "llama3_json", "mistral": "mistral",
              "gpt_oss": "openai"}  # the same formats under vLLM's --tool-call-parser names

_HERMES = re.compile(r"<tool_call>(.*?)(</tool_call>|$)", re.DOTALL)
_FUNCTION = re.compile(r"<function=([^>\n]*)>(.*?)(</function>|$)", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\n]*)>(.*?)(</parameter>|(?=<parameter=)|$)", re.DOTALL)
_THINK = re.compile(r"^\s*(?:<think>)?(.*?)</think>", re.DOTALL)
_HARMONY_END = re.compile(r"<\|end\|>|<\|call\|>|<\|return\|>")


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


@dataclass
class _Found:
    """One tool call found in the text: its span, and its name and arguments or what is wrong with it."""
    start: int
    end: int
    name: Any = None
    arguments: Any = None
    problem: Optional[str] = None


def detect_format(chat_template: Optional[str]) -> str:
    """The tool-call format a chat template renders (hermes when it cannot tell)."""
    t = chat_template or ""
    if "<|channel|>" in t and "<|message|>" in t:
        return "gpt_oss"
    if "<function=" in t and "<parameter=" in t:
        return "qwen3_coder"
    if "<tool_call>" in t:
        return "hermes"
    if "[TOOL_CALLS]" in t:
        return "mistral"
    if "<|python_tag|>" in t or ("ipython" in t and "<|eot_id|>" in t):
        return "llama3_json"
    return "hermes"


def resolve_format(name: str, tokenizer: Any) -> str:
    """`rollout.tool_call_parser` as a format (auto: from the tokenizer's chat template)."""
    name = ALIASES.get(name, name)
    if name == "auto":
        template = getattr(tokenizer, "chat_template", None)
        return detect_format(template if isinstance(template, str) else json.dumps(template or ""))
    if name not in FORMATS:
        raise ValueError(f"unknown tool_call_parser {name!r}; choose one of {', '.join(PARSER_CHOICES)}")
    return name


def vllm_tool_parser(name: str) -> str:
    """vLLM's --tool-call-parser name for `rollout.tool_call_parser` (auto: hermes, vLLM cannot detect)."""
    name = ALIASES.get(name, name)
    return VLLM_NAMES.get(name, "hermes")


def resolve_reasoning(name: Optional[str]) -> str:
    name = REASONING_ALIASES.get(name or "auto", name or "auto")
    if name not in REASONING_CHOICES:
        raise ValueError(f"unknown reasoning_parser {name!r}; choose one of {', '.join(REASONING_CHOICES)}")
    return name


def _json_object(text: str) -> tuple[Any, Optional[str]]:
    try:
        return json.loads(text.strip()), None
    except json.JSONDecodeError as exc:
        return None, f"tool call JSON does not parse ({exc.msg})"


def _named(payload: Any, start: int, end: int) -> _Found:
    """A {"name": ..., "arguments"/"parameters": ...} object as a call."""
    if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
        return _Found(start, end, problem="a tool call needs a JSON object with a string 'name'")
    return _Found(start, end, payload["name"], payload.get("arguments", payload.get("parameters", {})))


def _hermes(text: str, schemas: dict) -> list[_Found]:
    found = []
    for m in _HERMES.finditer(text):
        if not m.group(2):
            found.append(_Found(m.start(), m.end(), problem="a <tool_call> is not closed"))
            continue
        payload, problem = _json_object(m.group(1))
        found.append(_Found(m.start(), m.end(), problem=problem) if problem else _named(payload, m.start(), m.end()))
    return found


def _typed(value: str, schema: Optional[dict]) -> Any:
    """A qwen3_coder parameter value: text for string (or unknown) parameters, JSON for typed ones."""
    kind = (schema or {}).get("type")
    kinds = set(kind) if isinstance(kind, list) else {kind}
    if not kind or kinds & {"string"}:
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        if kinds & {"boolean"} and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        return value  # kept as text: the tool's own argument check reports it


def _qwen3_coder(text: str, schemas: dict) -> list[_Found]:
    found = []
    for m in _HERMES.finditer(text):
        body = m.group(1)
        function = _FUNCTION.search(body)
        if function is None:
            found.append(_Found(m.start(), m.end(), problem="a <tool_call> without <function=NAME>"))
            continue
        if not function.group(3):  # </function> missing (a missing </tool_call> at the very end is tolerated)
            found.append(_Found(m.start(), m.end(), problem="a <function=...> is not closed"))
            continue
        name = function.group(1).strip()
        properties = (schemas.get(name) or {}).get("properties") or {}
        arguments = {}
        for p in _PARAMETER.finditer(function.group(2)):
            key = p.group(1).strip()
            value = p.group(2)
            value = value[1:] if value.startswith("\n") else value
            value = value[:-1] if value.endswith("\n") else value
            arguments[key] = _typed(value, properties.get(key))
        found.append(_Found(m.start(), m.end(), name, arguments))
    return found


def _llama3_json(text: str, schemas: dict) -> list[_Found]:
    stripped = text.lstrip()
    offset = len(text) - len(stripped)
    if stripped.startswith("<|python_tag|>"):
        offset += len("<|python_tag|>")
    elif not stripped.startswith("{"):
        return []  # plain text: no call
    decoder, found, i = json.JSONDecoder(), [], offset
    while i < len(text):
        begin = 0 if not found else i  # the <|python_tag|>, and the "; " between calls, belong to the calls
        while i < len(text) and text[i] in " \t\r\n;":
            i += 1
        if i >= len(text):
            break
        try:
            payload, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            found.append(_Found(begin, len(text), problem=f"tool call JSON does not parse ({exc.msg})"))
            break
        found.append(_named(payload, begin, end))
        i = end
    return found


def _mistral(text: str, schemas: dict) -> list[_Found]:
    decoder, found = json.JSONDecoder(), []
    marker = "[TOOL_CALLS]"
    starts = [m.start() for m in re.finditer(re.escape(marker), text)]
    for k, start in enumerate(starts):
        stop = starts[k + 1] if k + 1 < len(starts) else len(text)
        i = start + len(marker)
        while i < stop and text[i].isspace():
            i += 1
        try:
            if text.startswith("[", i):  # [TOOL_CALLS][{...}, {...}]
                payload, end = decoder.raw_decode(text, i)
                if not isinstance(payload, list):
                    payload = [payload]
                found += [_named(item, start, end) for item in payload]  # one span, the list, for each
                continue
            args_at = text.find("[ARGS]", i, stop)
            if args_at < 0:
                found.append(_Found(start, stop, problem="[TOOL_CALLS] without a JSON list or NAME[ARGS]{...}"))
                continue
            name = text[i:args_at].split("[CALL_ID]")[0].strip()
            payload, end = decoder.raw_decode(text, args_at + len("[ARGS]"))
            found.append(_Found(start, end, name, payload) if name else
                         _Found(start, end, problem="[TOOL_CALLS] with an empty function name"))
        except json.JSONDecodeError as exc:
            found.append(_Found(start, stop, problem=f"tool call JSON does not parse ({exc.msg})"))
    return found


FINDERS: dict[str, Callable[[str, dict], list[_Found]]] = {
    "hermes": _hermes, "qwen3_coder": _qwen3_coder, "llama3_json": _llama3_json, "mistral": _mistral}


def _checked(f: _Found, tool_names: Optional[set[str]]) -> tuple[Optional[ParsedCall], Optional[str]]:
    if f.problem:
        return None, f.problem
    arguments = {} if f.arguments is None else f.arguments
    if isinstance(arguments, str):  # arguments given as a JSON string
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            arguments = None
    if not isinstance(arguments, dict):
        return None, f"tool call {f.name!r} has arguments that are not a JSON object"
    if tool_names is not None and f.name not in tool_names:
        return None, f"tool {f.name!r} was not offered (offered: {', '.join(sorted(tool_names)) or 'none'})"
    return ParsedCall(f.name, arguments, ""), None


def _thinking(text: str, reasoning: str) -> tuple[Optional[str], str]:
    if reasoning == "none":
        return None, text
    m = _THINK.match(text)
    if m and "</think>" in text:
        return m.group(1).strip(), text[m.end():]
    return None, text


def _gpt_oss(text: str, tool_names: Optional[set[str]]) -> ParsedReply:
    """Harmony messages: analysis -> thinking, a recipient functions.NAME -> a call, the rest -> text."""
    thinking, texts, calls, errors = [], [], [], []
    for chunk in re.split(r"<\|start\|>", text):
        if not chunk.strip():
            continue
        header, sep, body = chunk.partition("<|message|>")
        if not sep:
            texts.append(chunk)  # no harmony header: plain text
            continue
        body = _HARMONY_END.split(body, maxsplit=1)[0]
        channel = re.search(r"<\|channel\|>\s*([A-Za-z_]+)", header)
        recipient = re.search(r"to=([^\s<]+)", header)
        if recipient and recipient.group(1).startswith("functions."):
            payload, problem = _json_object(body) if body.strip() else ({}, None)
            call, problem = _checked(_Found(0, 0, recipient.group(1)[len("functions."):], payload, problem), tool_names)
            if call is not None:
                call.raw = chunk
                calls.append(call)
            else:
                errors.append(problem)
                texts.append(body)
        elif channel and channel.group(1) == "analysis":
            thinking.append(body.strip())
        else:
            texts.append(body)
    return ParsedReply(text="".join(texts), thinking="\n".join(thinking) or None, tool_calls=calls, errors=errors)


def parse_reply(text: str, tool_names: Optional[set[str]] = None, fmt: str = "hermes", reasoning: str = "auto",
                schemas: Optional[dict[str, dict]] = None) -> ParsedReply:
    """Split a decoded reply (end-of-turn token already removed) into thinking, text and tool calls in format
    `fmt` (one of FORMATS). `tool_names` None skips the offered-tool check; `schemas` maps a tool's name to
    its parameters' JSON schema (qwen3_coder converts values by it)."""
    if fmt == "gpt_oss":
        return _gpt_oss(text, tool_names)
    thinking, text = _thinking(text, reasoning)
    calls, errors, kept, last = [], [], [], 0
    for f in FINDERS[fmt](text, schemas or {}):
        kept.append(text[last:f.start])
        last = max(last, f.end)
        call, problem = _checked(f, tool_names)
        if call is None:
            errors.append(problem)
            kept.append(text[f.start:f.end])
        else:
            call.raw = text[f.start:f.end]
            calls.append(call)
    kept.append(text[last:])
    # the text as generated, whitespace included (what vLLM's OpenAI server returns as the message's content)
    return ParsedReply(text="".join(kept), thinking=thinking, tool_calls=calls, errors=errors)
