"""EndpointTuner's wire: what it sends to an endpoint's chat completions (field by field) and what it makes of the
reply (text, thinking, tool calls and their ids, malformed calls, the length limit, the usage counts)."""

from __future__ import annotations

import asyncio
import json

import pytest

from astuner.model.endpoint_tuner import Endpoint, EndpointTuner
from astuner.model.engines.base import SamplingParams
from astuner.schema.calls import EpisodeRecorder
from tests.evaluate.scripted_endpoint import KEY, ScriptedEndpoint

TOOLS = [{"type": "function", "function": {"name": "read_sensor", "description": "Read the sensor.",
                                           "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}}}}]


@pytest.fixture
def endpoint():
    server = ScriptedEndpoint()
    yield server
    server.close()


def tuner(endpoint: ScriptedEndpoint, model: str, monkeypatch) -> EndpointTuner:
    monkeypatch.setenv("ENDPOINT_TEST_KEY", KEY)
    return EndpointTuner(None, None, SamplingParams(0.3, 0.9, 40), 1024, EpisodeRecorder(),
                         endpoint=Endpoint(endpoint.base_url, model, "ENDPOINT_TEST_KEY"))


def test_the_request_carries_each_field_as_the_chat_completions_api_takes_it(endpoint, monkeypatch):
    model = tuner(endpoint, "careful", monkeypatch)
    messages = [{"role": "system", "content": "Call read_sensor."}, {"role": "user", "content": "S1?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "read_sensor", "arguments": {"id": 1}}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "469"}]
    reply = asyncio.run(model(messages, tools=TOOLS))
    sent = endpoint.requests[-1]
    assert sent["model"] == "careful" and sent["authorization"] == f"Bearer {KEY}"
    assert (sent["temperature"], sent["top_p"], sent["max_tokens"]) == (0.3, 0.9, 40)
    assert sent["tools"] == TOOLS
    assert [m["role"] for m in sent["messages"]] == ["system", "user", "assistant", "tool"]
    call = sent["messages"][2]["tool_calls"][0]
    assert call["function"] == {"name": "read_sensor", "arguments": '{"id": 1}'} and call["id"] == "c1"
    assert sent["messages"][3]["tool_call_id"] == "c1" and sent["messages"][3]["content"] == "469"
    assert reply.content[-1]["text"] == "The sensor reads \\boxed{469}."
    record = model.recorder.calls[-1]
    assert record.response_text == "The sensor reads \\boxed{469}." and record.finish_reason == "stop"
    assert record.prompt_ids == [] and record.response_ids == []  # an endpoint returns no ids: nothing to train
    assert (record.prompt_tokens, record.completion_tokens) == (len(json.dumps(sent["messages"])) // 4, 7)
    assert not model.recorder.truncated


def test_the_reply_keeps_thinking_call_ids_and_flags_malformed_calls(endpoint, monkeypatch):
    model = tuner(endpoint, "odd", monkeypatch)
    reply = asyncio.run(model([{"role": "user", "content": "S1?"}], tools=TOOLS))
    kinds = [block["type"] for block in reply.content]
    assert kinds == ["thinking", "text", "tool_use"]
    assert reply.content[0]["thinking"] == "let me think" and reply.content[1]["text"] == "partial"
    use = reply.content[2]
    assert (use["id"], use["name"], use["input"]) == ("call_kept", "read_sensor", {"id": 3})
    record = model.recorder.calls[-1]
    assert len(record.tool_call_errors) == 2
    assert "no JSON object" in record.tool_call_errors[0] and "no such tool" in record.tool_call_errors[1]
    assert record.finish_reason == "length" and model.recorder.truncated  # cut by its length limit
    assert (record.prompt_tokens, record.completion_tokens) == (11, 5)
    assert "tools" in endpoint.requests[-1]
    asyncio.run(model([{"role": "user", "content": "S1?"}], tools=TOOLS, tool_choice="none"))
    assert "tools" not in endpoint.requests[-1]  # tool_choice none: no tools offered
