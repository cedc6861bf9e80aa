"""The OpenAI chat-completions wire format the gateway speaks: a request checked into `ChatRequest`, a reply as a
`chat.completion` object or as `chat.completion.chunk` events (server-sent events, as the OpenAI SDK reads them),
and errors in OpenAI's shape (`{"error": {"message", "type", "param", "code"}}`).

Request fields that would change what is generated but that astuner's engines cannot honour (`stop`, `logit_bias`,
penalties, `n` > 1, a JSON `response_format`, `logprobs`, `reasoning_effort`, vLLM's extensions such as `top_k` or
`chat_template_kwargs` away from their neutral values) are refused with a 400 naming the field, not ignored.
`parallel_tool_calls: false` is honoured: a reply with several tool calls returns only the first. Fields taken and
not used (`seed`, `user`, `metadata`, ...: `UNUSED`) and unknown fields are named in `ChatRequest.unused` /
`ignored`, which the server logs once per field. Replies are JSON with non-ASCII escaped, so that any reply a policy
writes (a lone surrogate escape included) can be sent.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Optional

# vLLM's extensions that would change the prompt or the tokens (refused unless at their neutral value)
UNSUPPORTED = {"top_k": (None, -1, 0), "min_p": (None, 0), "repetition_penalty": (None, 1), "length_penalty": (None, 1),
               "min_tokens": (None, 0), "ignore_eos": (None, False), "echo": (None, False), "best_of": (None, 1),
               "use_beam_search": (None, False), "add_generation_prompt": (None, True),
               "continue_final_message": (None, False), "chat_template": (None,), "chat_template_kwargs": (None, {}),
               "guided_json": (None,), "guided_regex": (None,), "guided_choice": (None,), "guided_grammar": (None,),
               "structured_outputs": (None,), "stop_token_ids": (None, []), "bad_words": (None, []),
               "logits_processors": (None, []), "prompt_logprobs": (None,), "truncate_prompt_tokens": (None,),
               # OpenAI's own that change the reply: thinking and length are the run's chat template's and model's
               "reasoning_effort": (None,), "verbosity": (None,), "modalities": (None, ["text"]),
               "web_search_options": (None,), "top_logprobs": (None, 0)}
FIXES = {"chat_template_kwargs": " (set astuner.rollout.chat_template_kwargs for the run)",
         "reasoning_effort": " (the run's chat template decides thinking: astuner.rollout.chat_template_kwargs)"}
# taken and not used (logged once per field by the server): they do not change the reply, or only as a hint
UNUSED = {"seed": "replies are sampled by the run's engine, which takes no seed per request",
          "user": "", "metadata": "", "store": "", "service_tier": "", "prediction": "", "safety_identifier": "",
          "prompt_cache_key": ""}
NO_PENALTY = ("presence_penalty", "frequency_penalty")


class RequestError(ValueError):
    """A request the gateway answers with 400 (or `status`), in OpenAI's error shape."""

    def __init__(self, message: str, param: Optional[str] = None, code: Optional[str] = None, status: int = 400,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.message, self.param, self.code, self.status, self.kind = message, param, code, status, kind

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.kind, self.param, self.code)


def error_body(message: str, kind: str, param: Optional[str] = None, code: Optional[str] = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


@dataclass
class ChatRequest:
    messages: list[Any]
    tools: Optional[list[Any]] = None
    tool_choice: Optional[str] = None  # auto / none / required / a function's name
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    max_tokens: Optional[int] = None
    stream: bool = False
    include_usage: bool = False
    model: str = "astuner-policy"
    parallel_tool_calls: bool = True  # false: only the reply's first tool call is returned
    unused: list[str] = field(default_factory=list)  # UNUSED fields it sets (logged once per field by the server)
    ignored: list[str] = field(default_factory=list)  # fields not known here (logged once per field by the server)


def _neutral(value: Any, neutral: tuple) -> bool:
    """Whether `value` is one of the `neutral` values (True is no 1 here, 0 no False)."""
    return any(value is v if v is None or isinstance(v, bool) else (value == v and not isinstance(value, bool))
               for v in neutral)


def _number(body: dict, name: str, low: float, high: float) -> Optional[float]:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise RequestError(f"'{name}' must be a number from {low} to {high}, got {value!r}", param=name)
    return float(value)


def _tool_choice(value: Any, tools: Any) -> Optional[str]:
    if value is None or value in ("auto", "none", "required"):
        return value
    if isinstance(value, dict) and value.get("type") == "function" and isinstance(value.get("function"), dict) \
            and isinstance(value["function"].get("name"), str):
        name = value["function"]["name"]
        names = [t["function"].get("name") for t in tools or ()
                 if isinstance(t, dict) and isinstance(t.get("function"), dict)]
        if name not in names:
            raise RequestError(f"'tool_choice' names function {name!r}, which is not in 'tools'"[:300],
                               param="tool_choice")
        return name
    raise RequestError("'tool_choice' must be 'auto', 'none', 'required' or {'type': 'function', 'function': "
                       "{'name': ...}}", param="tool_choice")


def parse_request(body: Any) -> ChatRequest:
    """A chat-completions request body, checked (RequestError on what cannot be served)."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list", param="messages")
    n = body.get("n", 1)
    if n not in (None, 1):
        raise RequestError(f"'n' must be 1 (one reply per request: each call is one recorded sample), got {n!r}",
                           param="n")
    if body.get("stop"):
        raise RequestError("'stop' is not supported: a reply ends at the model's end-of-turn token or max_tokens "
                           "(cutting it at a stop string would train on tokens the agent never saw)", param="stop")
    if body.get("logit_bias"):
        raise RequestError("'logit_bias' is not supported by astuner's engines", param="logit_bias")
    for name in NO_PENALTY:
        if body.get(name):
            raise RequestError(f"'{name}' is not supported by astuner's engines (only 0)", param=name)
    response_format = body.get("response_format")
    if response_format and not (isinstance(response_format, dict) and response_format.get("type") == "text"):
        raise RequestError("'response_format' other than text is not supported (no constrained decoding)",
                           param="response_format")
    if body.get("logprobs"):
        raise RequestError("'logprobs' is not supported by the gateway", param="logprobs")
    for name, neutral in UNSUPPORTED.items():
        if name in body and not _neutral(body[name], neutral):
            raise RequestError(f"'{name}' is not supported: it would change the tokens the model is trained on"
                               f"{FIXES.get(name, '')}", param=name)
    if body.get("functions") or body.get("function_call"):
        raise RequestError("the legacy 'functions' / 'function_call' fields are not supported; send 'tools'",
                           param="functions")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise RequestError(f"'max_tokens' must be a positive integer, got {max_tokens!r}", param="max_tokens")
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise RequestError("'tools' must be a list of function tools", param="tools")
    stream = body.get("stream", False)
    if not isinstance(stream, bool) and stream is not None:
        raise RequestError("'stream' must be true or false", param="stream")
    options = body.get("stream_options") or {}
    tool_choice = _tool_choice(body.get("tool_choice"), tools)
    if tool_choice not in (None, "auto", "none") and not tools:
        raise RequestError(f"'tool_choice' {tool_choice!r} needs 'tools'", param="tool_choice")
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise RequestError(f"'parallel_tool_calls' must be true or false, got {parallel!r}"[:300],
                           param="parallel_tool_calls")
    known = set(UNSUPPORTED) | set(UNUSED) | {
        "messages", "model", "n", "stop", "logit_bias", *NO_PENALTY, "response_format", "logprobs", "functions",
        "function_call", "max_tokens", "max_completion_tokens", "tools", "tool_choice", "parallel_tool_calls",
        "stream", "stream_options", "temperature", "top_p"}
    model = body.get("model")
    return ChatRequest(
        messages=messages, tools=tools or None, tool_choice=tool_choice,
        temperature=_number(body, "temperature", 0.0, 2.0), top_p=_number(body, "top_p", 1e-9, 1.0),
        max_tokens=max_tokens, stream=bool(stream),
        include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
        model=model if isinstance(model, str) and model else "astuner-policy",
        parallel_tool_calls=parallel is not False,
        unused=sorted(k for k in UNUSED if body.get(k) is not None), ignored=sorted(k for k in body if k not in known))


# -- replies -----------------------------------------------------------------------------------------------------
def not_unicode(body: Any) -> bool:
    """Whether the request holds a lone surrogate (a "\\ud800" escape): no text a tokenizer can take. Asked only
    once rendering or tokenizing the request failed, to say why."""
    try:
        json.dumps(body, ensure_ascii=False).encode("utf-8")
        return False
    except UnicodeEncodeError:
        return True


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def tool_calls_of(done: Any) -> list[dict[str, Any]]:
    return openai_tool_calls(done.parsed.tool_calls, done.call_ids)


def openai_tool_calls(calls: list[Any], ids: list[str]) -> list[dict[str, Any]]:
    """Parsed tool calls (tool_parser.ParsedCall) in OpenAI's message shape, arguments as JSON text."""
    return [{"id": call_id, "type": "function",
             "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)}}
            for call_id, call in zip(ids, calls)]


def first_tool_call_only(done: Any) -> Any:
    """The reply as returned under `parallel_tool_calls: false`: its first tool call only. Its record (what is
    trained on) stays as the engine generated it."""
    if len(done.parsed.tool_calls) <= 1:
        return done
    return replace(done, parsed=replace(done.parsed, tool_calls=done.parsed.tool_calls[:1]),
                   call_ids=done.call_ids[:1])


def finish_reason(done: Any) -> str:
    if done.parsed.tool_calls:
        return "tool_calls"
    return "length" if done.record.finish_reason == "length" else "stop"


def usage(done: Any) -> dict[str, int]:
    prompt, reply = done.record.prompt_tokens, done.record.completion_tokens
    return {"prompt_tokens": prompt, "completion_tokens": reply, "total_tokens": prompt + reply}


def completion(done: Any, model: str, ident: str) -> dict[str, Any]:
    """A `chat.completion` object for a generated call (`ModelTuner.complete`'s result)."""
    message: dict[str, Any] = {"role": "assistant", "content": done.parsed.text or None}
    if done.parsed.thinking:
        message["reasoning_content"] = done.parsed.thinking
    calls = tool_calls_of(done)
    if calls:
        message["tool_calls"] = calls
    elif message["content"] is None:
        message["content"] = ""
    return {"id": ident, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason(done), "logprobs": None}],
            "usage": usage(done)}


def chunk(ident: str, model: str, delta: Optional[dict[str, Any]] = None, finish: Optional[str] = None,
          with_usage: Optional[dict[str, int]] = None) -> dict[str, Any]:
    out: dict[str, Any] = {"id": ident, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                           "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish,
                                                                 "logprobs": None}]}
    if with_usage is not None:
        out["usage"] = with_usage
    return out


def reply_chunks(done: Any, model: str, ident: str, include_usage: bool) -> list[dict[str, Any]]:
    """The reply after the opening role chunk: thinking, text, each tool call, then the finish (and usage)."""
    out = []
    if done.parsed.thinking:
        out.append(chunk(ident, model, {"reasoning_content": done.parsed.thinking}))
    if done.parsed.text:
        out.append(chunk(ident, model, {"content": done.parsed.text}))
    for index, call in enumerate(tool_calls_of(done)):
        out.append(chunk(ident, model, {"tool_calls": [{"index": index, **call}]}))
    out.append(chunk(ident, model, {}, finish_reason(done)))
    if include_usage:
        out.append(chunk(ident, model, None, with_usage=usage(done)))
    return out


def sse(payload: Any) -> bytes:
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n".encode()
