"""The OpenAI-compatible gateway through the real clients (AgentScope's OpenAIChatModel, the openai SDK, httpx)
against a real uvicorn server: the same recorded tokens as the ModelTuner route, SSE as the SDK parses it, keys,
disconnects, 64 episodes at once, refusals in OpenAI's error shape."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import openai
import pytest
from agentscope.formatter import OpenAIChatFormatter
from agentscope.message import Msg
from agentscope.model import OpenAIChatModel

from astuner import ModelTuner
from astuner.gateway import server as gateway_server
from astuner.model.engines.base import SamplingParams
from astuner.rollout.tracker import build_samples
from tests.helpers import ScriptedEngine
from tests.model.test_model_tuner import make_agent

REPLIES = ['Let me compute.\n<tool_call>\n{"name": "add", "arguments": {"a": 12, "b": 3}}\n</tool_call>',
           'Now add 4.\n<tool_call>\n{"name": "add", "arguments": {"a": 15, "b": 4}}\n</tool_call>',
           "The answer is \\boxed{19}."]
ADD = {"type": "function", "function": {"name": "add", "description": "Add two integers.", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}


def tuner_for(engine, tokenizer, max_model_len=8192, max_tokens=256):
    return ModelTuner(engine, tokenizer, SamplingParams(1.0, 1.0, max_tokens), max_model_len,
                      loop=asyncio.get_running_loop())


def samples_of(tuner):
    return build_samples(tuner.recorder.calls, task_id="t", episode_uuid="e", repeat_index=0, max_samples=None,
                         max_prompt_length=10_000, max_response_length=10_000)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_an_agentscope_agent_with_its_own_openai_model_records_the_tokens_model_tuner_records(tokenizer, stream):
    """The same scripted three-call ReAct episode, once with model=ModelTuner and once with AgentScope's own
    OpenAIChatModel pointed at the gateway: identical calls (prompt ids, the engine's reply ids and log-probs,
    agent) and identical training samples."""
    async def both():
        direct_engine, gateway_engine = ScriptedEngine(tokenizer, list(REPLIES)), ScriptedEngine(tokenizer, list(REPLIES))
        direct = tuner_for(direct_engine, tokenizer)
        answer_direct = await make_agent(direct, OpenAIChatFormatter()).reply(Msg("user", "What is 12+3? Then add 4.", "user"))
        routed = tuner_for(gateway_engine, tokenizer)
        base_url, key = routed.as_openai_base_url(agent="math")
        model = OpenAIChatModel("any-name", api_key=key, stream=stream, client_kwargs={"base_url": base_url})
        answer_routed = await make_agent(model, OpenAIChatFormatter()).reply(Msg("user", "What is 12+3? Then add 4.", "user"))
        return direct, routed, answer_direct, answer_routed, direct_engine, gateway_engine

    direct, routed, a, b, direct_engine, gateway_engine = asyncio.run(both())
    assert a.get_text_content() == b.get_text_content() == "The answer is \\boxed{19}."
    assert len(direct.recorder.calls) == len(routed.recorder.calls) == 3
    for x, y in zip(direct.recorder.calls, routed.recorder.calls):
        assert (x.prompt_ids, x.response_ids, x.logprobs, x.target) == (y.prompt_ids, y.response_ids, y.logprobs, y.target)
        assert x.prompt_text == y.prompt_text and not y.tool_call_errors
    assert "<tool_response>\n15\n</tool_response>" in routed.recorder.calls[1].prompt_text
    (s1,), (s2,) = samples_of(direct), samples_of(routed)
    assert (s1.input_ids, s1.loss_mask, s1.logprobs) == (s2.input_ids, s2.loss_mask, s2.logprobs)
    # the engine's own ids, not the returned text tokenized again (ScriptedEngine's ids are char by char)
    assert s2.trained_spans() == gateway_engine.outputs
    assert gateway_engine.outputs[0] != tokenizer.encode(REPLIES[0], add_special_tokens=False)


def test_the_openai_sdk_reads_the_stream_tool_calls_and_usage(tokenizer):
    async def go():
        engine = ScriptedEngine(tokenizer, ["<think>adding</think>Sure.\n" + REPLIES[0].split("\n", 1)[1]])
        tuner = tuner_for(engine, tokenizer)
        client = tuner.as_openai_client()
        stream = await client.chat.completions.create(
            model="whatever", messages=[{"role": "user", "content": "12+3?"}], tools=[ADD], stream=True,
            stream_options={"include_usage": True})
        chunks = [c async for c in stream]
        return tuner, chunks

    tuner, chunks = asyncio.run(go())
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert deltas[0].role == "assistant"
    assert "".join(d.content or "" for d in deltas) == "Sure.\n"  # the text before the tool call, as generated
    assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == "adding"
    calls = [t for d in deltas for t in (d.tool_calls or [])]
    assert len(calls) == 1 and calls[0].function.name == "add"
    assert json.loads(calls[0].function.arguments) == {"a": 12, "b": 3}
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    record = tuner.recorder.calls[0]
    assert chunks[-1].usage.prompt_tokens == len(record.prompt_ids)
    assert chunks[-1].usage.completion_tokens == len(record.response_ids)


def test_a_bad_missing_or_expired_key_gets_401_and_reaches_nothing(tokenizer):
    async def go():
        engine = ScriptedEngine(tokenizer, ["hi"] * 4)
        tuner = tuner_for(engine, tokenizer)
        base_url, key = tuner.as_openai_base_url()
        outcomes = []
        for api_key in ("astuner-ep-forged", key + "x"):
            client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
            with pytest.raises(openai.AuthenticationError) as err:
                await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
            outcomes.append(err.value.body)
        async with httpx.AsyncClient() as http:
            missing = await http.post(f"{base_url}/chat/completions", json={"messages": [{"role": "user", "content": "x"}]})
            models = await http.get(f"{base_url}/models", headers={"Authorization": f"Bearer {key}"})
        tuner.recorder.close()  # the episode ended: its key expires
        with pytest.raises(openai.AuthenticationError):
            await openai.AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}])
        return engine, tuner, outcomes, missing, models

    engine, tuner, outcomes, missing, models = asyncio.run(go())
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "invalid_api_key"
    assert all(o["code"] == "invalid_api_key" for o in outcomes)
    assert models.status_code == 200 and models.json()["data"][0]["id"] == tuner.model_name
    assert engine.prompts == [] and tuner.recorder.calls == []


def test_refusals_come_in_openais_error_shape_and_reach_no_engine(tokenizer):
    async def go():
        engine = ScriptedEngine(tokenizer, ["hi"] * 4)
        tuner = tuner_for(engine, tokenizer, max_model_len=64, max_tokens=32)
        client = tuner.as_openai_client(max_retries=0)
        errors = {}
        for name, extra in (("n", {"n": 2}), ("stop", {"stop": ["\n"]}), ("context", {})):
            content = "x " * 200 if name == "context" else "x"
            with pytest.raises(openai.BadRequestError) as err:
                await client.chat.completions.create(model="m", messages=[{"role": "user", "content": content}],
                                                     **extra)
            errors[name] = err.value.body
        return engine, tuner, errors

    engine, tuner, errors = asyncio.run(go())
    assert errors["n"]["param"] == "n" and "must be 1" in errors["n"]["message"]
    assert errors["stop"]["param"] == "stop"
    assert errors["context"]["code"] == "context_length_exceeded" and "max_model_len 64" in errors["context"]["message"]
    assert engine.prompts == [] and tuner.recorder.calls == []
    assert tuner.recorder.truncated  # the episode ran out of context, as on the ModelTuner route


def test_a_client_that_leaves_mid_stream_or_times_out_leaves_nothing_recorded(tokenizer):
    async def go():
        engine = ScriptedEngine(tokenizer, ["first", "second", "third"], delay_s=0.4)
        tuner = tuner_for(engine, tokenizer)
        base_url, key = tuner.as_openai_base_url()
        headers = {"Authorization": f"Bearer {key}"}
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
        async with httpx.AsyncClient() as http:
            async with http.stream("POST", f"{base_url}/chat/completions", json={**body, "stream": True},
                                   headers=headers) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data:"):
                        break  # the opening role chunk; then the client goes away mid-stream
        async with httpx.AsyncClient(timeout=0.1) as http:
            with pytest.raises(httpx.ReadTimeout):
                await http.post(f"{base_url}/chat/completions", json=body, headers=headers)
        await asyncio.sleep(1.0)  # both generations finish meanwhile, and are dropped
        generated = len(engine.outputs)
        recorded_before = len(tuner.recorder.calls)
        ok = await tuner.as_openai_client().chat.completions.create(**body)
        return generated, recorded_before, ok, tuner

    generated, recorded_before, ok, tuner = asyncio.run(go())
    assert generated == 2 and recorded_before == 0
    assert ok.choices[0].message.content == "third" and len(tuner.recorder.calls) == 1


def reply_for(prompt: str) -> str:
    if "<tool_response>" in prompt:
        return "\\boxed{" + prompt.rsplit("<tool_response>\n", 1)[1].split("\n", 1)[0] + "}"
    return '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'


def test_64_episodes_at_once_each_record_their_own_calls(tokenizer):
    """64 openai-SDK tool loops at the same time, each with its own key: every call lands in its own episode,
    the second call continues the first (one sample each), and the engine saw them concurrently."""
    async def episode(tuner, k):
        async with tuner.as_openai_client() as client:
            return await tool_loop(client, k)

    async def tool_loop(client, k):
        messages = [{"role": "user", "content": f"episode {k}: add 1 and 2"}]
        first = await client.chat.completions.create(model="m", messages=messages, tools=[ADD])
        call = first.choices[0].message.tool_calls[0]
        messages += [first.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": str(k)}]
        second = await client.chat.completions.create(model="m", messages=messages, tools=[ADD])
        return second.choices[0].message.content

    async def go():
        engine = ScriptedEngine(tokenizer, reply_for, delay_s=0.05)
        tuners = [tuner_for(engine, tokenizer) for _ in range(64)]
        answers = await asyncio.gather(*(episode(t, k) for k, t in enumerate(tuners)))
        return engine, tuners, answers

    engine, tuners, answers = asyncio.run(go())
    assert answers == [f"\\boxed{{{k}}}" for k in range(64)]
    assert engine.max_in_flight >= 32
    for k, tuner in enumerate(tuners):
        calls = tuner.recorder.calls
        assert len(calls) == 2 and f"episode {k}:" in calls[0].prompt_text
        (sample,) = samples_of(tuner)
        assert sample.num_calls == 2


def test_tool_calls_that_do_not_parse_are_reported_and_kept_as_text(tokenizer):
    async def go():
        engine = ScriptedEngine(tokenizer, ['<tool_call>\n{"name": "add", "arguments": {"a": 1,\n</tool_call>'])
        tuner = tuner_for(engine, tokenizer)
        reply = await tuner.as_openai_client().chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], tools=[ADD])
        return tuner, reply

    tuner, reply = asyncio.run(go())
    assert reply.choices[0].message.tool_calls is None and "<tool_call>" in reply.choices[0].message.content
    assert reply.choices[0].finish_reason == "stop"
    assert tuner.recorder.calls[0].tool_call_errors == ["tool call JSON does not parse (Expecting property name "
                                                        "enclosed in double quotes)"]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_a_reply_is_returned_as_generated_whitespace_included(tokenizer, stream):
    """The message's content is the reply's text byte for byte, leading and trailing whitespace and blank lines
    included (it was stripped: every client's log, and anything rebuilt from it, lost them), whole or streamed, and
    the recorded text is the same."""
    generated = "  Two spaces first,\n\na blank line, and a newline last.\n"

    async def go():
        engine = ScriptedEngine(tokenizer, [generated])
        tuner = tuner_for(engine, tokenizer)
        create = tuner.as_openai_client().chat.completions.create
        messages = [{"role": "user", "content": "x"}]
        if not stream:
            return tuner, (await create(model="m", messages=messages)).choices[0].message.content
        chunks = [c async for c in await create(model="m", messages=messages, stream=True)]
        return tuner, "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    tuner, content = asyncio.run(go())
    assert content == generated == tuner.recorder.calls[0].response_text


def test_a_blocking_client_on_the_engines_loop_gets_503_naming_the_fix(tokenizer, monkeypatch):
    monkeypatch.setattr(gateway_server, "STALL_S", 0.5)

    async def go():
        engine = ScriptedEngine(tokenizer, ["hi"])
        tuner = tuner_for(engine, tokenizer)
        base_url, key = tuner.as_openai_base_url()
        started = time.monotonic()
        # a synchronous client inside the coroutine: the loop the engine serves on is blocked meanwhile
        answer = httpx.post(f"{base_url}/chat/completions", headers={"Authorization": f"Bearer {key}"}, timeout=30,
                            json={"model": "m", "messages": [{"role": "user", "content": "x"}]})
        return answer, time.monotonic() - started, tuner

    answer, took, tuner = asyncio.run(go())
    assert answer.status_code == 503 and "run_workflow_in_thread" in answer.json()["error"]["message"]
    assert took < 10 and tuner.recorder.calls == []


def test_the_rollout_hands_each_episode_its_endpoint_and_its_key_expires_with_it(tokenizer):
    """rollout.openai_gateway.enable: a function workflow finds its episode's base URL and key in its task, with
    no astuner in the agent's code; the episode's calls are its samples; a reply whose tool call does not parse is
    counted (rollout/tool_parse_failures); once the episode is over its key gets 401."""
    from astuner import Task, WorkflowOutput
    from astuner.config.schema import OpenAIGatewayConfig
    from astuner.rollout.manager import RolloutManager
    from tests.rollout.test_manager import config

    keys = []

    async def workflow(task, model_tuner, auxiliary_models=None):
        keys.append((task["openai_base_url"], task["openai_api_key"]))
        async with openai.AsyncOpenAI(base_url=task["openai_base_url"], api_key=task["openai_api_key"]) as client:
            answer = await tool_loop_of(client, task["main_query"])
        return WorkflowOutput(reward=1.0 if answer == "\\boxed{7}" else 0.0)

    async def tool_loop_of(client, question):
        messages = [{"role": "user", "content": question}]
        first = (await client.chat.completions.create(model="m", messages=messages, tools=[ADD])).choices[0].message
        if not first.tool_calls:
            return first.content
        messages += [first.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "7"}]
        return (await client.chat.completions.create(model="m", messages=messages, tools=[ADD])).choices[0].message.content

    def replies(prompt):
        if "broken" in prompt:
            return "<tool_call>\n{not json}\n</tool_call>"
        return reply_for(prompt)

    cfg = config(openai_gateway=OpenAIGatewayConfig(enable=True))
    manager = RolloutManager(cfg, workflow, None, ScriptedEngine(tokenizer, replies), tokenizer)
    batch = asyncio.run(manager.run([Task(task_id="ok", main_query="add"), Task(task_id="bad", main_query="broken")],
                                    num_repeat=2))
    good = [e for e in batch.episodes if e.task.task_id == "ok"]
    assert all(e.reward == 1.0 and len(e.recorder.calls) == 2 and len(e.samples) == 1 for e in good)
    assert all(e.tool_parse_failures == 1 for e in batch.episodes if e.task.task_id == "bad")
    assert batch.metrics["rollout/tool_parse_failures"] == 2.0
    assert len({key for _, key in keys}) == 4  # one key per episode
    base_url, key = keys[0]
    answer = httpx.post(f"{base_url}/chat/completions", headers={"Authorization": f"Bearer {key}"},
                        json={"model": "m", "messages": [{"role": "user", "content": "late"}]})
    assert answer.status_code == 401


def test_a_slow_engine_is_waited_for_not_taken_for_a_blocked_loop(tokenizer, monkeypatch):
    monkeypatch.setattr(gateway_server, "STALL_S", 0.3)

    async def go():
        tuner = tuner_for(ScriptedEngine(tokenizer, ["slow"], delay_s=1.0), tokenizer)
        reply = await tuner.as_openai_client().chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}])
        return reply, tuner

    reply, tuner = asyncio.run(go())
    assert reply.choices[0].message.content == "slow" and len(tuner.recorder.calls) == 1


class HeldEngine(ScriptedEngine):
    """Replies "held" once the test releases it (`release`); `started` is set as a generation begins, so a test
    acts once the server has the call, whatever the machine's load."""

    def __init__(self, tokenizer):
        super().__init__(tokenizer, lambda prompt: "held")
        self.started, self.release = threading.Event(), threading.Event()

    async def generate(self, prompt_ids, sampling):
        self.started.set()
        while not self.release.is_set():
            await asyncio.sleep(0.02)
        return await super().generate(prompt_ids, sampling)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_call_whose_episode_ends_while_it_is_generated_is_refused_not_recorded(tokenizer, stream):
    """The episode ends (its workflow returned, or its time ran out) once the engine has begun the call: the call
    is answered at once, 401 (a stream: an error event, no [DONE]), nothing recorded; the engine is released only
    after that answer, so the gateway never waits longer than the episode can."""
    async def go():
        engine = HeldEngine(tokenizer)
        tuner = tuner_for(engine, tokenizer)
        base_url, key = tuner.as_openai_base_url()
        async with httpx.AsyncClient(timeout=30) as http:
            pending = asyncio.ensure_future(http.post(
                f"{base_url}/chat/completions", headers={"Authorization": f"Bearer {key}"},
                json={"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": stream}))
            assert await asyncio.to_thread(engine.started.wait, 30)  # the server has the call
            tuner.recorder.close()  # the episode ends meanwhile
            try:
                answer = await asyncio.wait_for(pending, 20)
            finally:
                engine.release.set()
        return answer, tuner

    answer, tuner = asyncio.run(go())
    assert tuner.recorder.calls == []
    if stream:
        assert "the episode ended while this call was generated" in answer.text and "[DONE]" not in answer.text
    else:
        assert answer.status_code == 401 and "episode ended" in answer.json()["error"]["message"]


def test_a_reply_with_a_lone_surrogate_escape_is_sent_and_recorded_once(tokenizer):
    async def go():
        engine = ScriptedEngine(tokenizer, ['<tool_call>\n{"name": "add", "arguments": {"a": "\\ud800", "b": 1}}'
                                            '\n</tool_call>'])
        tuner = tuner_for(engine, tokenizer)
        reply = await tuner.as_openai_client().chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], tools=[ADD])
        return reply, tuner, engine

    reply, tuner, engine = asyncio.run(go())
    assert json.loads(reply.choices[0].message.tool_calls[0].function.arguments) == {"a": "\ud800", "b": 1}
    assert len(tuner.recorder.calls) == 1 and len(engine.outputs) == 1


USER = {"role": "user", "content": "x"}


@pytest.mark.parametrize("body, says", [
    ({"messages": [USER, {"role": "assistant", "content": "", "tool_calls": [{"function": "x"}]}]},
     "'function' must be an object"),
    ({"messages": [USER, {"role": "assistant", "content": "", "tool_calls": 5}]}, "tool_calls must be a list"),
    ({"messages": [USER], "tools": [{"type": "function", "function": "name"}]}, "not an OpenAI function schema"),
    ({"messages": [USER], "tools": [{"type": "function", "function": {"name": {"x": 1}}}]},
     "not an OpenAI function schema"),
    ('{"messages": [{"role": "user", "content": "x"}], "metadata": ' + "[" * 100_000 + "]" * 100_000 + "}",
     "nests too deep"),
    ({"messages": [USER], "chat_template_kwargs": {"enable_thinking": False}}, "astuner.rollout.chat_template_kwargs"),
    ({"messages": [USER], "top_k": 5}, "'top_k' is not supported"),
    ({"messages": [USER], "tool_choice": "required"}, "needs 'tools'"),
    ({"messages": [{"role": "user", "content": "\ud800"}]}, "not valid Unicode"),
], ids=["function-not-object", "tool-calls-not-list", "tool-schema-string", "tool-name-object", "deep-nesting",
        "chat-template-kwargs", "top-k", "required-without-tools", "lone-surrogate"])
def test_malformed_requests_get_400_in_openais_shape_and_reach_no_engine(tokenizer, body, says):
    async def go():
        engine = ScriptedEngine(tokenizer, ["never"])
        tuner = tuner_for(engine, tokenizer)
        base_url, key = tuner.as_openai_base_url()
        async with httpx.AsyncClient() as http:
            text = body if isinstance(body, str) else json.dumps(body)  # raw text where nothing else can say it
            answer = await http.post(f"{base_url}/chat/completions", content=text,
                                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        return answer, engine, tuner

    answer, engine, tuner = asyncio.run(go())
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error" and says in error["message"], error
    assert engine.prompts == [] and tuner.recorder.calls == []


def test_each_agent_of_an_episode_gets_its_own_key_and_records_under_its_name(tokenizer):
    async def go():
        engine = ScriptedEngine(tokenizer, ["wolf says", "villager says"])
        tuner = tuner_for(engine, tokenizer)
        tuner.trainable_targets = ["wolf", "villager"]
        wolf, villager = tuner.as_openai_base_url(agent="wolf"), tuner.as_openai_base_url(agent="villager")
        assert tuner.as_openai_base_url(agent="wolf") == wolf  # one key per episode and agent
        with pytest.raises(ValueError, match="not in trainable_targets"):
            tuner.as_openai_base_url(agent="seer")
        for base_url, key in (wolf, villager):
            async with openai.AsyncOpenAI(base_url=base_url, api_key=key) as client:
                await client.chat.completions.create(model="m", messages=[USER])
        return wolf, villager, tuner

    wolf, villager, tuner = asyncio.run(go())
    assert wolf[1] != villager[1]
    assert [c.target for c in tuner.recorder.calls] == ["wolf", "villager"]


def test_a_port_that_is_taken_is_a_one_line_config_error():
    import socket

    from astuner.errors import ConfigError
    from astuner.gateway import Gateway

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        with pytest.raises(ConfigError, match=r"cannot listen on 127\.0\.0\.1:\d+ .*openai_gateway\.host / port"):
            Gateway("127.0.0.1", taken.getsockname()[1]).start()
    finally:
        taken.close()


def test_with_several_policies_each_agent_asks_for_its_own_endpoint_and_is_served_by_its_policy(tokenizer):
    from astuner.model.policies import PolicyMap

    async def go():
        engines = {"a": ScriptedEngine(tokenizer, ["from a"]), "b": ScriptedEngine(tokenizer, ["from b"])}
        tuner = ModelTuner(engines["a"], tokenizer, SamplingParams(1.0, 1.0, 64), 8192, loop=asyncio.get_running_loop(),
                           policies=PolicyMap({"alice": "a", "bo*": "b"}, {"a": True, "b": False}), engines=engines)
        with pytest.raises(ValueError, match="matches no astuner.rollout.agent_policy entry"):
            tuner.as_openai_base_url()  # "default" is no agent of this map: each agent names itself
        for agent in ("bob", "alice"):
            base_url, key = tuner.as_openai_base_url(agent=agent)
            async with openai.AsyncOpenAI(base_url=base_url, api_key=key) as client:
                await client.chat.completions.create(model="m", messages=[USER])
        return tuner

    tuner = asyncio.run(go())
    assert [(c.target, c.policy, c.response_text) for c in tuner.recorder.calls] == [
        ("bob", "b", "from b"), ("alice", "a", "from a")]
