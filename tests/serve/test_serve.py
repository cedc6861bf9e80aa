"""`astuner serve`: a served episode's rows in the trace store are the engine's ids (a spy around the real hf engine,
the real openai SDK as the client, the gateway's own code in between); sessions, feedback, the key; and the
command itself in a subprocess (start, a call, a reward, SIGTERM)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from astuner.records.trace_store import TraceStore
from astuner.serve import send_feedback
from astuner.serve.feedback import FeedbackRefused

TOOLS = [{"type": "function", "function": {"name": "read_sensor", "description": "Read the sensor.",
                                           "parameters": {"type": "object", "properties": {}}}}]
KEY = "sk-serve-test"


class SpyEngine:
    """The real hf engine, each generation it returns kept."""

    def __init__(self, engine):
        self.engine, self.results = engine, []

    async def generate(self, prompt_ids, sampling):
        result = await self.engine.generate(prompt_ids, sampling)
        self.results.append((list(prompt_ids), result))
        return result

    async def update_weights(self, state_dict):
        return None


def serving(model_dir, store_path, name="tiny"):
    """A ServeGateway over the real hf engine (spied) writing into the store at `store_path`, serving as `name`."""
    from transformers import AutoTokenizer

    from astuner.model.chat.tool_parser import resolve_format, resolve_reasoning
    from astuner.model.engines.base import SamplingParams
    from astuner.model.engines.hf import HFEngine
    from astuner.model.model_tuner import ModelTuner
    from astuner.serve.server import ServeGateway, serving_settings

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    engine = SpyEngine(HFEngine.from_pretrained(str(model_dir), tokenizer, seed=0))
    store = TraceStore.open_for_writing(store_path, name)

    def new_tuner(recorder):
        return ModelTuner(engine, tokenizer, SamplingParams(1.0, 1.0, 24), 1024, recorder, model_name="tiny",
                          reply_format=(resolve_format("auto", tokenizer), resolve_reasoning("auto")),
                          gateway_settings=serving_settings())

    return ServeGateway(new_tuner, store, KEY, name).start(), engine, store


@pytest.fixture
def served(tiny_model_dir, tmp_path):
    gateway, engine, store = serving(tiny_model_dir, tmp_path / "traces.db")
    yield gateway, engine, store
    gateway.stop()
    store.close()


def client(gateway, session=None, key=KEY):
    import openai

    headers = {"X-Session-Id": session} if session else {}
    return openai.OpenAI(base_url=gateway.base_url, api_key=key, default_headers=headers, max_retries=0)


def test_a_served_episodes_rows_are_the_engines_ids(served):
    gateway, engine, store = served
    sdk = client(gateway, session="episode-1")
    messages = [{"role": "system", "content": "Call read_sensor, then answer."},
                {"role": "user", "content": "What does sensor S1 read?"}]
    first = sdk.chat.completions.with_raw_response.create(model="tiny", messages=messages, tools=TOOLS,
                                                          temperature=0.7, max_tokens=16)
    assert first.headers["x-session-id"] == "episode-1"
    reply = first.parse().choices[0].message
    messages += [{"role": "assistant", "content": reply.content or ""}, {"role": "user", "content": "And now?"}]
    second = sdk.chat.completions.create(model="tiny", messages=messages, tools=TOOLS, max_tokens=8)
    store.flush()

    reader = TraceStore.read(store.path)  # a reader beside the writer, while it serves
    (episode,) = reader.episodes()
    assert (episode["id"], episode["source"], episode["model"], episode["calls"], episode["reward"]) == \
        ("episode-1", "served", "tiny", 2, None)
    calls = reader.calls("episode-1")
    assert len(engine.results) == 2
    for call, (prompt_ids, result) in zip(calls, engine.results):
        assert call.prompt_ids == prompt_ids and call.response_ids == result.token_ids
        assert call.logprobs == pytest.approx(result.logprobs, abs=1e-5)  # stored as float32
        assert call.finish_reason == result.finish_reason and call.tools == TOOLS
    assert calls[0].messages == messages[:2] and calls[1].messages[-1] == {"role": "user", "content": "And now?"}
    # the sampling each reply's log-probs are of: the request's temperature (the first), the default (the second)
    assert calls[0].sampling == {"temperature": 0.7, "top_p": 1.0} and calls[1].sampling["temperature"] == 1.0
    # the second call continues the first: its prompt begins with the first's prompt and reply, id for id
    assert calls[1].prompt_ids[:len(calls[0].prompt_ids)] == calls[0].prompt_ids
    assert second.usage.prompt_tokens == len(calls[1].prompt_ids)
    assert second.usage.completion_tokens == len(calls[1].response_ids)

    # a reward for it (the helper), its metadata kept; then a second reward: the last is the episode's
    assert send_feedback(gateway.base_url, KEY, "episode-1", 0.5, {"by": "user"}) == \
        {"episode": "episode-1", "reward": 0.5, "recorded": True}
    send_feedback(gateway.base_url, KEY, "episode-1", 1.0)
    store.flush()
    assert reader.episodes()[0]["reward"] == 1.0
    assert [(f["reward"], f["metadata"]) for f in reader.feedback("episode-1")] == [(0.5, {"by": "user"}), (1.0, None)]


def test_a_session_continues_across_a_restart_of_serve_on_its_store(tiny_model_dir, tmp_path):
    """`astuner serve` stopped and started again on its store: a session's next call continues its stored calls
    exactly as within one process (the earlier prompt and reply, id for id), and a request that continues none of
    them (the client's episode started over under the same id) is rendered afresh. It used to be matched against
    the stored calls as if each reply were empty: the old prompt and reply were sent again as its prompt, the
    engine answered from there and the store held a call whose messages and ids disagree."""
    from transformers import AutoTokenizer

    from astuner.model.chat.rerender import check_call

    messages = [{"role": "system", "content": "Call read_sensor, then answer."},
                {"role": "user", "content": "What does sensor S1 read?"}]
    gateway, _, store = serving(tiny_model_dir, tmp_path / "traces.db")
    reply = client(gateway, session="episode-0").chat.completions.create(
        model="tiny", messages=messages, max_tokens=12, temperature=1.0).choices[0].message.content
    gateway.stop()
    store.close()

    gateway, engine, store = serving(tiny_model_dir, tmp_path / "traces.db")  # the restart, the same store
    try:
        sdk = client(gateway, session="episode-0")
        later = messages + [{"role": "assistant", "content": reply}, {"role": "user", "content": "And now?"}]
        sdk.chat.completions.create(model="tiny", messages=later, max_tokens=8)
        again = sdk.chat.completions.create(model="tiny", messages=messages, max_tokens=8)  # started over
        store.flush()
        first, second, third = TraceStore.read(store.path).calls("episode-0")
    finally:
        gateway.stop()
        store.close()
    assert second.prompt_ids[:len(first.prompt_ids) + len(first.response_ids)] == \
        first.prompt_ids + first.response_ids  # continued from the store, the reply's ids as generated
    assert second.prompt_ids[len(first.prompt_ids) + len(first.response_ids):]  # then the new user turn
    assert third.messages == messages and third.prompt_ids == first.prompt_ids  # rendered afresh, not continued
    assert [prompt for prompt, _ in engine.results] == [second.prompt_ids, third.prompt_ids]
    assert again.choices[0].message.content == third.response_text or third.finish_reason == "length"
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert check_call(tokenizer, third) is None  # its fresh call's prompt re-renders to its ids


def test_a_session_another_model_served_is_not_continued(tiny_model_dir, tmp_path):
    """The store served by one model, then by another (a newer checkpoint under another name): a session the first
    served is refused (409: its recorded ids are the first model's tokens), a new session is served."""
    import openai

    one = [{"role": "user", "content": "hi"}]
    gateway, _, store = serving(tiny_model_dir, tmp_path / "traces.db", name="tiny-v1")
    client(gateway, session="old").chat.completions.create(model="x", messages=one, max_tokens=4)
    gateway.stop()
    store.close()
    gateway, engine, store = serving(tiny_model_dir, tmp_path / "traces.db", name="tiny-v2")
    try:
        with pytest.raises(openai.ConflictError, match="session 'old' was served by model 'tiny-v1'; this server "
                                                        "serves 'tiny-v2'"):
            client(gateway, session="old").chat.completions.create(model="x", messages=one, max_tokens=4)
        assert engine.results == []
        client(gateway, session="new").chat.completions.create(model="x", messages=one, max_tokens=4)
        store.flush()
        reader = TraceStore.read(store.path)
        assert (reader.episode_model("old"), reader.episode_model("new")) == ("tiny-v1", "tiny-v2")
        assert len(reader.calls("old")) == 1
    finally:
        gateway.stop()
        store.close()


def test_sessions_keys_and_feedback_errors(served):
    import openai

    gateway, engine, store = served
    one = [{"role": "user", "content": "hi"}]
    alone = client(gateway).chat.completions.with_raw_response.create(model="tiny", messages=one, max_tokens=4)
    single = alone.headers["x-session-id"]
    assert re.fullmatch(r"call-[0-9a-f]{32}", single)  # no session named: an episode of its own, its id returned
    client(gateway, "s2").chat.completions.create(model="tiny", messages=one, max_tokens=4)
    client(gateway, "s2").chat.completions.create(model="tiny", messages=one, max_tokens=4)
    store.flush()
    counts = {e["id"]: e["calls"] for e in TraceStore.read(store.path).episodes()}
    assert counts == {single: 1, "s2": 2}

    with pytest.raises(openai.AuthenticationError):
        client(gateway, key="wrong").chat.completions.create(model="tiny", messages=one, max_tokens=4)
    with pytest.raises(openai.BadRequestError, match="X-Session-Id"):
        client(gateway, "has space").chat.completions.create(model="tiny", messages=one, max_tokens=4)
    assert len(engine.results) == 3  # refused requests reach no engine
    with pytest.raises(FeedbackRefused, match="404.*no episode 'nope'"):
        send_feedback(gateway.base_url, KEY, "nope", 1.0)
    with pytest.raises(FeedbackRefused, match="401"):
        send_feedback(gateway.base_url, "wrong", "s2", 1.0)
    with pytest.raises(FeedbackRefused, match="finite number"):
        send_feedback(gateway.base_url, KEY, "s2", "1")
    import httpx

    for body, needle in [(b'{"episode": "s2", "reward": NaN}', "finite number"),
                         (b'{"episode": "s2", "reward": 1, "score": 2}', "unknown feedback field(s) score"),
                         (b'{"episode": "s2", "reward": 1, "metadata": [1]}', "'metadata' must be a JSON object"),
                         (b'{"reward": 1}', "feedback needs 'episode'"), (b"[1]", "must be a JSON object"),
                         (b"{", "not JSON"),
                         # metadata the store could not write (it would stop the server): refused, the server goes on
                         (b'{"episode": "s2", "reward": 1, "metadata": {"a": "\\ud800"}}', "cannot be stored"),
                         (b'{"episode": "s2", "reward": 1, "metadata": {"a": NaN}}', "cannot be stored")]:
        answer = httpx.post(f"{gateway.base_url}/feedback", headers={"Authorization": f"Bearer {KEY}"}, content=body)
        assert answer.status_code == 400 and needle in answer.json()["error"]["message"], (body, answer.text)
    # an oversized body: refused (413) on its declared length, before any of it is read (no body follows here: a
    # server reading it would wait), and a body without a length as soon as it passes the limit
    import socket
    from urllib.parse import urlsplit

    where = urlsplit(gateway.base_url)
    with socket.create_connection((where.hostname, where.port), timeout=30) as sock:
        sock.sendall(f"POST /v1/feedback HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\nContent-Type: "
                     f"application/json\r\nContent-Length: {10 << 20}\r\n\r\n".encode())
        head = sock.recv(65536).decode(errors="replace")
    assert head.startswith("HTTP/1.1 413") and "over the gateway's limit of 1048576 bytes" in head, head
    big = httpx.post(f"{gateway.base_url}/chat/completions", headers={"Authorization": f"Bearer {KEY}"},
                     content=b'{"messages": "' + b"y" * (2 << 20) + b'"}')
    assert big.status_code == 413, big.text  # the limit named by serve's own option, not a config key
    assert "astuner serve --max-request-bytes sets it" in big.json()["error"]["message"], big.text
    answer = httpx.post(f"{gateway.base_url}/feedback", headers={"Authorization": f"Bearer {KEY}"},
                        content=iter([b'{"episode": "s2", "reward": 1, "metadata": {"x": "', b"y" * (2 << 20), b'"}}']))
    assert answer.status_code == 413 and answer.json()["error"]["code"] == "request_too_large"
    store.flush()
    assert TraceStore.read(store.path).feedback("s2") == []  # nothing refused was recorded


def test_the_command_serves_records_and_stops_on_sigterm(tiny_model_dir, tmp_path):
    import openai

    store = tmp_path / "traces.db"
    env = {**os.environ, "ASTUNER_SERVE_KEY": KEY}
    proc = subprocess.Popen([sys.executable, "-m", "astuner", "serve", str(tiny_model_dir), "--store", str(store),
                             "--port", "0", "--max-tokens", "8"], stderr=subprocess.PIPE, text=True, env=env)
    try:
        lines = []
        while not any(line.startswith("astuner: serving") for line in lines):
            line = proc.stderr.readline()
            assert line, "".join(lines)
            lines.append(line)
        base_url = re.search(r"at (http://\S+/v1)", lines[-1]).group(1)
        assert "key: the value of ASTUNER_SERVE_KEY" in proc.stderr.readline()
        sdk = openai.OpenAI(base_url=base_url, api_key=KEY, default_headers={"X-Session-Id": "cli"})
        sdk.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}])
        send_feedback(base_url, KEY, "cli", 1.0)
        assert (tmp_path / "traces.db.writer").is_file()  # one writer: a second serve on the store is refused
        second = subprocess.run([sys.executable, "-m", "astuner", "serve", str(tiny_model_dir), "--store", str(store),
                                 "--port", "0"], capture_output=True, text=True, env=env, timeout=120)
        assert second.returncode == 2 and f"pid {proc.pid}) writes to it" in second.stderr, second.stderr[-500:]
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 0
    assert not (tmp_path / "traces.db.writer").exists()
    (episode,) = TraceStore.read(store).episodes()
    assert episode["id"] == "cli" and episode["calls"] == 1 and episode["reward"] == 1.0
    time.sleep(0)
    assert json.loads(json.dumps(episode))  # plain data


def test_play_waits_for_the_server_and_says_in_one_line_when_none_answers(tmp_path):
    """The traces tutorial's play.py started before `astuner serve` has loaded its model: it waits (up to --wait-s)
    and, with no server, says so in one line; feedback to no server is a FeedbackRefused, which play.py catches (an
    httpx.ConnectError escaped it as a traceback)."""
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    play = Path(__file__).resolve().parents[2] / "tutorial" / "example_traces" / "play.py"
    done = subprocess.run([sys.executable, str(play), "--base-url", url, "--key", KEY, "--episodes", "1", "--wait-s",
                           "2"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        f"play.py: no astuner serve answers at {url} after 2 s (ConnectError: [Errno 111] Connection refused); "
        f"start it first, or wait longer: --wait-s"], done.stderr
    with pytest.raises(FeedbackRefused, match=f"feedback not sent: no server answered at {url} \\(ConnectError"):
        send_feedback(url, KEY, "episode-0", 1.0)
