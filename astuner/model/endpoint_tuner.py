"""`EndpointTuner`: a ModelTuner whose calls go to an OpenAI-compatible endpoint's chat completions (a hosted model,
or a server of one's own) instead of an engine: how `astuner eval` runs a hosted model through the same workflow,
the AgentScope route and the gateway alike (both go through `prepare` / `complete`).

The endpoint renders its own chat template, so a call records messages, tools, the reply and its parsed tool calls
and the token counts the endpoint reports (`CallRecord.usage`), but no token ids: nothing it generates can be
trained on. Its key comes from an environment variable; the openai SDK makes the request (retries, timeouts,
the error types)."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from typing import Any, Optional

from astuner.model.chat.tool_parser import ParsedCall, ParsedReply
from astuner.model.model_tuner import CompletedCall, ModelTuner, PreparedCall
from astuner.schema.calls import CallRecord


class Endpoint:
    """Where the calls go: one `openai.AsyncOpenAI` per event loop (a workflow in its own thread runs its own)."""

    def __init__(self, base_url: str, model: str, api_key_env: Optional[str] = None, timeout_s: float = 600.0):
        self.base_url, self.model, self.timeout_s = base_url, model, timeout_s
        self.api_key = (os.environ.get(api_key_env) if api_key_env else None) or "EMPTY"
        self._clients: dict[int, Any] = {}
        self.unreached: list[str] = []  # the calls that could not reach it (after the SDK's retries), as errors

    def client(self) -> Any:
        import openai

        loop = id(asyncio.get_running_loop())
        if loop not in self._clients:
            self._clients[loop] = openai.AsyncOpenAI(base_url=self.base_url, api_key=self.api_key,
                                                     timeout=self.timeout_s, max_retries=2)
        return self._clients[loop]


def request_messages(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Normalised messages as the chat-completions API takes them: a tool call's arguments as a JSON string."""
    out = []
    for msg in msgs:
        msg = dict(msg)
        if msg.get("tool_calls"):
            msg["tool_calls"] = [{**call, "type": call.get("type", "function"), "function": {
                **call["function"], "arguments": call["function"]["arguments"]
                if isinstance(call["function"].get("arguments"), str)
                else json.dumps(call["function"].get("arguments") or {}, ensure_ascii=False)}}
                for call in msg["tool_calls"]]
        out.append(msg)
    return out


def parsed_reply(message: Any, tool_names: set[str]) -> tuple[ParsedReply, list[str]]:
    """The endpoint's message as a ParsedReply (its tool calls' ids kept): a call whose arguments are no JSON
    object, or that names a tool not offered, is an error (as a reply the parser could not read)."""
    calls, ids, errors = [], [], []
    for call in getattr(message, "tool_calls", None) or []:
        function = call.function
        raw = function.arguments or "{}"
        try:
            arguments = json.loads(raw)
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            errors.append(f"tool call {function.name!r}: arguments are no JSON object: {raw[:80]!r}")
            continue
        if tool_names and function.name not in tool_names:
            errors.append(f"tool call {function.name!r}: no such tool was offered")
            continue
        calls.append(ParsedCall(function.name, arguments, raw))
        ids.append(call.id or f"call_{uuid.uuid4().hex[:16]}")
    thinking = getattr(message, "reasoning_content", None) or None
    return ParsedReply(text=message.content or "", thinking=thinking, tool_calls=calls, errors=errors), ids


class EndpointTuner(ModelTuner):
    """Built by the rollout for each episode as ModelTuner is, with `endpoint=` naming where calls go."""

    def __init__(self, *args: Any, endpoint: Endpoint, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.endpoint = endpoint

    def register_model(self, target_name: str, default_model: Any = None) -> Any:
        model = super().register_model(target_name, default_model)
        if isinstance(model, ModelTuner) and not isinstance(model, EndpointTuner):
            model.__class__, model.endpoint = EndpointTuner, self.endpoint  # the same settings, the endpoint's calls
        return model

    def prepare(self, messages: Any, tools: Any = None, tool_choice: Optional[str] = None, *,
                target: Optional[str] = None, sampling: Any = None) -> PreparedCall:
        """Messages and tools checked; no rendering (the endpoint renders its own template)."""
        target, msgs, tool_list = self.checked(messages, tools, tool_choice, target)
        return PreparedCall(target, self.policy_of(target), msgs, tool_list, "", [], sampling or self.sampling)

    async def complete(self, call: PreparedCall) -> CompletedCall:
        call.engine_started = True
        body: dict[str, Any] = {"model": self.endpoint.model, "messages": request_messages(call.msgs),
                                "temperature": call.sampling.temperature, "top_p": call.sampling.top_p,
                                "max_tokens": call.sampling.max_tokens}
        if call.tools:
            body["tools"] = call.tools
        import openai

        try:
            response = await self.endpoint.client().chat.completions.create(**body)
        except openai.APIConnectionError as exc:  # (a timeout too): the endpoint's, not the model's, failure
            self.endpoint.unreached.append(f"{type(exc).__name__}: {exc}")
            raise
        choice = response.choices[0]
        names = {t["function"]["name"] for t in call.tools or []}
        parsed, ids = parsed_reply(choice.message, names)
        usage = response.usage
        record = CallRecord(
            target=call.target, policy=call.policy, messages=call.msgs, tools=call.tools, prompt_text="",
            prompt_ids=[], response_ids=[], logprobs=[],
            finish_reason="length" if choice.finish_reason == "length" else "stop",
            response_text=choice.message.content or "", tool_call_errors=parsed.errors,
            usage={} if usage is None else {"prompt_tokens": int(usage.prompt_tokens or 0),
                                            "completion_tokens": int(usage.completion_tokens or 0)})
        return CompletedCall(record, parsed, ids)
