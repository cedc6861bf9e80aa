"""What bounds a gateway request, through raw HTTP and the openai SDK against the real server on 127.0.0.1: a body
over the limit is refused 413 before it is read (a 50 MB one leaves the process's memory and the other requests
alone), a large prompt is prepared off the loop that serves the others, a blocking client's call never outwaits
its episode, a slow call is logged with its state, and failures are answered with the right status and logged
with their cause. (A call whose episode ends while it is generated: test_gateway.py.)"""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest
from loguru import logger

from astuner import ModelTuner
from astuner.config.schema import OpenAIGatewayConfig
from astuner.gateway import limits
from astuner.model.engines.base import SamplingParams
from tests.gateway.test_gateway import HeldEngine
from tests.helpers import ScriptedEngine, captured_logs

USER = {"role": "user", "content": "hello"}


def tuner_of(engine, tokenizer, max_model_len=8192, **gateway):
    return ModelTuner(engine, tokenizer, SamplingParams(1.0, 1.0, 32), max_model_len, loop=asyncio.get_running_loop(),
                      gateway_settings=OpenAIGatewayConfig(**gateway))


@pytest.fixture
def log_lines():
    lines, sink = captured_logs("INFO")
    yield lines
    logger.remove(sink)


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


class PeakRSS:
    """The process's largest resident set while it runs, sampled every few milliseconds."""

    def __init__(self):
        self.base = self.peak = rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self):
        while not self._stop.wait(0.003):
            self.peak = max(self.peak, rss_bytes())

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_a_body_over_the_limit_is_413_in_openais_shape_and_one_within_it_is_served(tokenizer, declared):
    async def go():
        engine = ScriptedEngine(tokenizer, ["served"])
        tuner = tuner_of(engine, tokenizer, max_model_len=100_000, max_request_bytes=20_000)
        base_url, key = tuner.as_openai_base_url()
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        answers = []
        for size in (30_000, 10_000):
            text = ('{"messages": [{"role": "user", "content": "' + "x" * (size - 60) + '"}]}').encode()

            async def chunks(text=text):
                for at in range(0, len(text), 4096):
                    yield text[at:at + 4096]

            async with httpx.AsyncClient(timeout=30) as http:
                answers.append(await http.post(f"{base_url}/chat/completions", headers=headers,
                                               content=text if declared else chunks()))
        return answers, engine, tuner

    (over, within), engine, tuner = asyncio.run(go())
    assert over.status_code == 413, over.text
    error = over.json()["error"]
    assert error["code"] == "request_too_large" and error["type"] == "invalid_request_error"
    assert "limit of 20000 bytes" in error["message"] and "max_request_bytes" in error["message"]
    assert within.status_code == 200 and within.json()["choices"][0]["message"]["content"] == "served"
    assert len(engine.prompts) == 1 and len(tuner.recorder.calls) == 1


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_a_50_mb_body_leaves_the_processs_memory_and_the_other_requests_alone(tokenizer, declared):
    """A 50 MB chat-completions body with a valid key, sent 1 MiB at a time by a client that holds one MiB: the
    process's resident memory grows by far less than the body (it used to grow by gigabytes tokenizing it),
    other episodes' calls are answered while it comes in, and it gets its 413 (default limit: 64 bytes per token
    of max_model_len 8192, 1 MiB)."""
    mib = b"x" * (1 << 20)
    head, tail = b'{"model": "m", "messages": [{"role": "user", "content": "', b'"}]}'
    size = len(head) + 50 * len(mib) + len(tail)

    async def go():
        engine = ScriptedEngine(tokenizer, lambda prompt: "meanwhile")
        big, other = tuner_of(engine, tokenizer), tuner_of(engine, tokenizer)
        base_url, key = big.as_openai_base_url()
        client = other.as_openai_client(max_retries=0)
        answered = []

        async def body():
            yield head
            for k in range(50):
                yield mib
                if k in (5, 25, 45):  # another episode's call, answered while the body comes in
                    reply = await asyncio.wait_for(client.chat.completions.create(model="m", messages=[USER]), 30)
                    answered.append(reply.choices[0].message.content)
            yield tail

        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        if declared:
            headers["Content-Length"] = str(size)
        with PeakRSS() as rss:
            async with httpx.AsyncClient(timeout=60) as http:
                answer = await http.post(f"{base_url}/chat/completions", headers=headers, content=body())
            after = await client.chat.completions.create(model="m", messages=[USER])
        return answer, answered, after, rss, big

    answer, answered, after, rss, big = asyncio.run(go())
    assert answer.status_code == 413 and answer.json()["error"]["code"] == "request_too_large"
    assert f"limit of {1 << 20} bytes" in answer.json()["error"]["message"]
    assert answered == ["meanwhile"] * 3 and after.choices[0].message.content == "meanwhile"
    assert rss.peak - rss.base < 32 << 20, f"resident memory grew by {(rss.peak - rss.base) >> 20} MiB"
    assert big.recorder.calls == []


def test_a_large_prompt_is_prepared_off_the_loop_that_answers_the_other_requests(tokenizer):
    """While one request's prompt is rendered and tokenized (held here until another episode's call has its
    answer), the server answers that other call: preparing it does not hold the loop every request is served on."""
    async def go():
        engine = ScriptedEngine(tokenizer, lambda prompt: "answered")
        big, other = tuner_of(engine, tokenizer, max_model_len=200_000), tuner_of(engine, tokenizer)
        preparing, release = threading.Event(), threading.Event()
        prepare = big.prepare

        def held_prepare(*args, **kwargs):  # a tokenization that lasts as long as the test needs
            preparing.set()
            release.wait(60)
            return prepare(*args, **kwargs)

        big.prepare = held_prepare
        content = "x " * (limits.BYTES_PER_TOKEN << 10)  # over the size prepared on the loop
        pending = asyncio.ensure_future(big.as_openai_client(max_retries=0).chat.completions.create(
            model="m", messages=[{"role": "user", "content": content}]))
        assert await asyncio.to_thread(preparing.wait, 30)
        try:
            meanwhile = await asyncio.wait_for(other.as_openai_client(max_retries=0).chat.completions.create(
                model="m", messages=[USER]), 20)
        finally:
            release.set()
        return meanwhile, await pending

    meanwhile, large = asyncio.run(go())
    assert meanwhile.choices[0].message.content == "answered" and large.choices[0].message.content == "answered"


def test_a_blocking_client_in_a_timed_out_episode_gets_its_answer_when_the_episode_ends(tokenizer):
    """A workflow thread with a synchronous client whose call outlives episode_timeout_s: the gateway answers it
    401 as the episode times out instead of holding the connection until the engine is done."""
    from astuner import Task, WorkflowOutput
    from astuner.rollout.manager import RolloutManager
    from tests.rollout.test_manager import config

    engine = HeldEngine(tokenizer)
    answers, answered = [], threading.Event()

    async def workflow(task, model_tuner, auxiliary_models=None):
        reply = httpx.post(f"{task['openai_base_url']}/chat/completions", timeout=60,
                           headers={"Authorization": f"Bearer {task['openai_api_key']}"},
                           json={"model": "m", "messages": [USER]})
        answers.append(reply)
        answered.set()
        return WorkflowOutput(reward=1.0)

    async def go():
        cfg = config(openai_gateway=OpenAIGatewayConfig(enable=True), run_workflow_in_thread=True,
                     episode_timeout_s=4.0, num_repeat=1, max_error_rate=1.0)  # the call is in by then
        batch = await RolloutManager(cfg, workflow, None, engine, tokenizer).run([Task(task_id="t", main_query="q")],
                                                                                 num_repeat=1)
        try:  # the engine's call is still running on this loop: only the episode's end can answer the thread
            got = await asyncio.to_thread(answered.wait, 30)
        finally:
            engine.release.set()
        return batch, got

    batch, got = asyncio.run(go())
    assert "TimeoutError" in batch.episodes[0].error
    assert got and answers[0].status_code == 401 and "episode ended" in answers[0].json()["error"]["message"]


def test_a_call_in_flight_too_long_is_logged_with_its_state(tokenizer, monkeypatch, log_lines):
    monkeypatch.setattr(limits, "SLOW_S", 0.2)

    async def go():
        engine = HeldEngine(tokenizer)
        tuner = tuner_of(engine, tokenizer)
        tuner.recorder.label = "ep-7 (task t, repeat 0)"
        pending = asyncio.ensure_future(tuner.as_openai_client(agent="default").chat.completions.create(
            model="m", messages=[USER]))
        deadline = time.monotonic() + 30
        while not any("still in flight" in line for line in log_lines) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        engine.release.set()
        return await pending, tuner

    reply, tuner = asyncio.run(go())
    assert reply.choices[0].message.content == "held" and len(tuner.recorder.calls) == 1
    (line, *_) = [line for line in log_lines if "still in flight" in line]
    prompt = len(tuner.recorder.calls[0].prompt_ids)
    assert "episode ep-7 (task t, repeat 0), agent 'default'" in line and "generating on the engine" in line
    assert f"prompt {prompt} tokens, up to 32 reply tokens" in line


def test_a_template_failure_is_400_and_an_internal_failure_is_500_logged_with_its_traceback(tiny_model_dir,
                                                                                           log_lines):
    from transformers import AutoTokenizer

    strict = AutoTokenizer.from_pretrained(tiny_model_dir)
    strict.chat_template = ("{% for m in messages %}{% if m.content == 'forbidden' %}{{ raise_exception('this "
                            "template takes no forbidden message') }}{% endif %}{% endfor %}" + strict.chat_template)

    async def go():
        tuner = tuner_of(ScriptedEngine(strict, ["never"]), strict)
        answers = {}
        base_url, key = tuner.as_openai_base_url()
        async with httpx.AsyncClient(timeout=30) as http:
            async def ask(message):
                return await http.post(f"{base_url}/chat/completions", headers={"Authorization": f"Bearer {key}"},
                                       json={"model": "m", "messages": [message]})

            answers["template"] = await ask({"role": "user", "content": "forbidden"})
            answers["input"] = await ask({"role": "robot", "content": "x"})

            def broken(text):
                raise KeyError("a lookup the gateway got wrong")

            tuner._prompt_ids = broken  # a bug past the template: the gateway's own failure
            answers["internal"] = await ask(USER)
        return answers, tuner

    answers, tuner = asyncio.run(go())
    template, bad_input, internal = answers["template"], answers["input"], answers["internal"]
    assert template.status_code == 400
    assert "cannot be rendered by the model's chat template" in template.json()["error"]["message"]
    assert "takes no forbidden message" in template.json()["error"]["message"]
    assert bad_input.status_code == 400 and "role 'robot' is not one of" in bad_input.json()["error"]["message"]
    assert internal.status_code == 500, internal.text
    error = internal.json()["error"]
    assert error["type"] == "server_error" and "KeyError" in error["message"] and "log" in error["message"]
    said = [line for line in log_lines if "preparing a request" in line]
    assert len(said) == 1 and "Traceback" in said[0] and "a lookup the gateway got wrong" in said[0]
    assert tuner.recorder.calls == []


class FailingEngine(ScriptedEngine):
    async def generate(self, prompt_ids, sampling):
        raise RuntimeError("the engine fell over")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_generation_failure_is_answered_and_logged_with_its_traceback(tokenizer, stream, log_lines):
    async def go():
        tuner = tuner_of(FailingEngine(tokenizer, []), tokenizer)
        base_url, key = tuner.as_openai_base_url()
        async with httpx.AsyncClient(timeout=30) as http:
            return await http.post(f"{base_url}/chat/completions", headers={"Authorization": f"Bearer {key}"},
                                   json={"model": "m", "messages": [USER], "stream": stream}), tuner

    answer, tuner = asyncio.run(go())
    assert "generation failed: RuntimeError: the engine fell over" in answer.text
    assert answer.status_code == (200 if stream else 500) and "[DONE]" not in answer.text
    said = [line for line in log_lines if "generation failed" in line]
    assert len(said) == 1 and "Traceback" in said[0] and "the engine fell over" in said[0]
    assert tuner.recorder.calls == []


def test_a_declared_length_over_the_limit_is_refused_before_any_of_the_body_is_sent(tokenizer):
    """The Content-Length pre-check: a request declaring a body over the limit gets its 413 on its headers alone
    (no body follows here; a gateway that read the body first would wait for it), so a client is told at once and
    nothing of the body is read."""
    import socket
    from urllib.parse import urlsplit

    async def go():
        tuner = tuner_of(ScriptedEngine(tokenizer, ["unused"]), tokenizer, max_request_bytes=20_000)
        base_url, key = tuner.as_openai_base_url()
        where = urlsplit(base_url)

        def ask() -> str:
            with socket.create_connection((where.hostname, where.port), timeout=30) as sock:
                sock.sendall(f"POST {where.path}/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}"
                             f"\r\nContent-Type: application/json\r\nContent-Length: {10 << 20}\r\n\r\n".encode())
                return sock.recv(65536).decode(errors="replace")

        return await asyncio.to_thread(ask), tuner

    head, tuner = asyncio.run(go())
    assert head.startswith("HTTP/1.1 413") and "the request body is 10485760 bytes, over the gateway's limit of " \
        "20000 bytes" in head, head
    assert tuner.recorder.calls == []
