"""What docs/gateway.md promises about the wire, each through the real openai SDK or raw HTTP against the real
server: max_tokens taken up to the run's limit, the run's sampling unless request_sampling, finish_reason
"length", tool calls as OpenAI writes them (type, one id each), the stream's closing [DONE], tool_choice "none",
parallel_tool_calls false, the refused fields, Bearer keys only, and unused fields logged once."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest
from loguru import logger

from astuner import ModelTuner
from astuner.config.schema import OpenAIGatewayConfig
from astuner.model.engines.base import SamplingParams
from tests.gateway.test_gateway import ADD
from tests.helpers import ScriptedEngine

USER = {"role": "user", "content": "add things"}
TWO_CALLS = ('Adding twice.\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>\n'
             '<tool_call>\n{"name": "add", "arguments": {"a": 3, "b": 4}}\n</tool_call>')


def tuner_of(engine, tokenizer, max_tokens=32, temperature=1.0, top_p=1.0, **gateway):
    return ModelTuner(engine, tokenizer, SamplingParams(temperature, top_p, max_tokens), 8192,
                      loop=asyncio.get_running_loop(), gateway_settings=OpenAIGatewayConfig(**gateway))


@pytest.fixture
def log_lines():
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m).rstrip("\n")), level="INFO", format="{message}")
    yield lines
    logger.remove(sink)


async def post(tuner, body, headers=None, key=None):
    """A raw POST /v1/chat/completions with the episode's key; (status, JSON or the SSE data lines)."""
    base_url, issued = tuner.as_openai_base_url()
    headers = headers if headers is not None else {"Authorization": f"Bearer {key or issued}"}
    async with httpx.AsyncClient(timeout=30) as http:
        answer = await http.post(f"{base_url}/chat/completions", json=body, headers=headers)
    if body.get("stream") and answer.status_code == 200:
        return answer.status_code, [line[6:] for line in answer.text.splitlines() if line.startswith("data: ")]
    return answer.status_code, answer.json()


def test_max_tokens_is_taken_up_to_the_runs_limit(tokenizer):
    async def go():
        engine = ScriptedEngine(tokenizer, ["x"] * 4)
        client = tuner_of(engine, tokenizer, max_tokens=32).as_openai_client()
        for extra in ({"max_tokens": 5}, {"max_completion_tokens": 7}, {"max_tokens": 10_000}, {}):
            await client.chat.completions.create(model="m", messages=[USER], **extra)
        return engine

    engine = asyncio.run(go())
    assert [s.max_tokens for s in engine.samplings] == [5, 7, 32, 32]


def test_replies_are_sampled_at_the_runs_temperature_unless_request_sampling_is_on(tokenizer, log_lines):
    async def go():
        engine = ScriptedEngine(tokenizer, ["x"] * 3)
        run = tuner_of(engine, tokenizer, temperature=0.9, top_p=0.95).as_openai_client()
        for _ in range(2):
            await run.chat.completions.create(model="m", messages=[USER], temperature=0.2, top_p=0.5)
        taken = tuner_of(engine, tokenizer, temperature=0.9, top_p=0.95, request_sampling=True).as_openai_client()
        await taken.chat.completions.create(model="m", messages=[USER], temperature=0.2, top_p=0.5)
        return engine

    engine = asyncio.run(go())
    assert [(s.temperature, s.top_p) for s in engine.samplings] == [(0.9, 0.95), (0.9, 0.95), (0.2, 0.5)]
    said = [line for line in log_lines if "request_sampling: true takes" in line]
    assert len(said) == 1  # once: each test module starts its own gateway (conftest)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_reply_cut_by_its_token_limit_finishes_with_length(tokenizer, stream):
    async def go():
        engine = ScriptedEngine(tokenizer, ["cut sho"], finish_reason="length")
        return await post(tuner_of(engine, tokenizer), {"messages": [USER], "max_tokens": 7, "stream": stream})

    status, answer = asyncio.run(go())
    assert status == 200
    if stream:
        finishes = [c["choices"][0]["finish_reason"] for c in map(json.loads, answer[:-1]) if c["choices"]]
        assert finishes[-1] == "length"
    else:
        assert answer["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_tool_calls_go_out_as_openai_writes_them_and_a_stream_ends_with_done(tokenizer, stream):
    """Each tool call with "type": "function", an id of its own and JSON arguments; finish_reason tool_calls; a
    stream's last event is [DONE]. Checked on the raw wire: the SDK would accept a call without its type."""
    async def go():
        engine = ScriptedEngine(tokenizer, [TWO_CALLS])
        return await post(tuner_of(engine, tokenizer), {"messages": [USER], "tools": [ADD], "stream": stream})

    status, answer = asyncio.run(go())
    assert status == 200
    if stream:
        assert answer[-1] == "[DONE]"
        chunks = [json.loads(data) for data in answer[:-1]]
        calls = [c for chunk in chunks if chunk["choices"] for c in chunk["choices"][0]["delta"].get("tool_calls", [])]
        assert [c["index"] for c in calls] == [0, 1]
        finish = [chunk["choices"][0]["finish_reason"] for chunk in chunks if chunk["choices"]][-1]
    else:
        calls = answer["choices"][0]["message"]["tool_calls"]
        finish = answer["choices"][0]["finish_reason"]
    assert finish == "tool_calls"
    assert [c["type"] for c in calls] == ["function", "function"]
    assert len({c["id"] for c in calls}) == 2 and all(c["id"] for c in calls)
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [{"a": 1, "b": 2}, {"a": 3, "b": 4}]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_parallel_tool_calls_false_returns_only_the_first_call_and_records_the_reply_as_generated(tokenizer,
                                                                                                    stream):
    async def go():
        engine = ScriptedEngine(tokenizer, [TWO_CALLS, TWO_CALLS])
        tuner = tuner_of(engine, tokenizer)
        client = tuner.as_openai_client()
        replies = []
        for parallel in (False, True):
            if stream:
                events = await client.chat.completions.create(model="m", messages=[USER], tools=[ADD], stream=True,
                                                              parallel_tool_calls=parallel)
                replies.append([t for c in [c async for c in events] if c.choices
                                for t in c.choices[0].delta.tool_calls or []])
            else:
                reply = await client.chat.completions.create(model="m", messages=[USER], tools=[ADD],
                                                             parallel_tool_calls=parallel)
                replies.append(reply.choices[0].message.tool_calls)
        return replies, tuner, engine

    (alone, both), tuner, engine = asyncio.run(go())
    assert [json.loads(c.function.arguments) for c in alone] == [{"a": 1, "b": 2}]
    assert len(both) == 2
    # what is trained on is what the engine generated, both calls included
    assert tuner.recorder.calls[0].response_ids == engine.outputs[0]


def test_tool_choice_none_leaves_the_tools_out_of_the_prompt(tokenizer):
    async def go():
        engine = ScriptedEngine(tokenizer, [TWO_CALLS, TWO_CALLS])
        client = tuner_of(engine, tokenizer).as_openai_client()
        offered = await client.chat.completions.create(model="m", messages=[USER], tools=[ADD])
        withheld = await client.chat.completions.create(model="m", messages=[USER], tools=[ADD], tool_choice="none")
        return engine, offered, withheld

    engine, offered, withheld = asyncio.run(go())
    with_tools, without = (tokenizer.decode(p) for p in engine.prompts)
    assert "Add two integers." in with_tools and "Add two integers." not in without
    assert len(offered.choices[0].message.tool_calls) == 2
    assert withheld.choices[0].message.tool_calls is None and "<tool_call>" in withheld.choices[0].message.content


@pytest.mark.parametrize("extra, param", [
    ({"logprobs": True}, "logprobs"), ({"top_logprobs": 3}, "top_logprobs"), ({"logit_bias": {"1": 5}}, "logit_bias"),
    ({"presence_penalty": 0.5}, "presence_penalty"), ({"frequency_penalty": 0.5}, "frequency_penalty"),
    ({"response_format": {"type": "json_object"}}, "response_format"), ({"extra_body": {"min_p": 0.1}}, "min_p"),
    ({"reasoning_effort": "low"}, "reasoning_effort"), ({"parallel_tool_calls": "no"}, "parallel_tool_calls"),
    ({"tools": [ADD], "tool_choice": {"type": "function", "function": {"name": "mul"}}}, "tool_choice"),
    ({"temperature": 3}, "temperature"), ({"max_tokens": 0}, "max_tokens"),
    ({"functions": [ADD["function"]]}, "functions"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_fields_that_would_change_the_reply_are_refused_naming_the_field(tokenizer, extra, param):
    async def go():
        engine = ScriptedEngine(tokenizer, ["never"])
        tuner = tuner_of(engine, tokenizer)
        with pytest.raises(openai.BadRequestError) as err:
            await tuner.as_openai_client(max_retries=0).chat.completions.create(model="m", messages=[USER], **extra)
        return err.value, engine, tuner

    error, engine, tuner = asyncio.run(go())
    assert error.status_code == 400 and error.body["param"] == param and error.body["type"] == "invalid_request_error"
    assert len(error.body["message"]) <= 300
    assert engine.prompts == [] and tuner.recorder.calls == []


def test_the_same_fields_at_their_neutral_values_are_served(tokenizer):
    async def go():
        engine = ScriptedEngine(tokenizer, ["fine"])
        client = tuner_of(engine, tokenizer).as_openai_client(max_retries=0)
        return await client.chat.completions.create(
            model="m", messages=[USER], logprobs=False, n=1, response_format={"type": "text"}, presence_penalty=0,
            modalities=["text"], parallel_tool_calls=True, extra_body={"top_k": -1, "min_p": 0})

    assert asyncio.run(go()).choices[0].message.content == "fine"


@pytest.mark.parametrize("scheme", ["Basic", "Token", "Bearer-ish", ""])
def test_only_a_bearer_key_is_taken(tokenizer, scheme):
    async def go():
        engine = ScriptedEngine(tokenizer, ["never", "yes"])
        tuner = tuner_of(engine, tokenizer)
        _, key = tuner.as_openai_base_url()
        refused = await post(tuner, {"messages": [USER]}, headers={"Authorization": f"{scheme} {key}".strip()})
        taken = await post(tuner, {"messages": [USER]}, headers={"Authorization": f"bearer {key}"})  # any case
        return refused, taken, engine

    (status, body), (ok, _), engine = asyncio.run(go())
    assert status == 401 and body["error"]["code"] == "invalid_api_key"
    assert ok == 200 and len(engine.prompts) == 1


def test_fields_taken_and_not_used_are_logged_once_per_field(tokenizer, log_lines):
    async def go():
        engine = ScriptedEngine(tokenizer, ["a", "b"])
        client = tuner_of(engine, tokenizer).as_openai_client()
        for _ in range(2):
            await client.chat.completions.create(model="m", messages=[USER], seed=7, extra_body={"gizmo_level": 3})

    asyncio.run(go())
    seed = [line for line in log_lines if "'seed'" in line]
    gizmo = [line for line in log_lines if "'gizmo_level'" in line]
    assert len(seed) == 1 and "not used" in seed[0] and "no seed per request" in seed[0]
    assert len(gizmo) == 1 and "not known here" in gizmo[0]
