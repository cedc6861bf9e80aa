"""The OpenAI-compatible engine takes token ids from the server, never from text."""

from __future__ import annotations

import asyncio

import pytest

from astuner.model.engines.base import SamplingParams
from astuner.model.engines.openai_engine import OpenAIEngine, OpenAIEngineError
from tests.helpers import LoopbackJSONServer


def completions(path, body):
    assert path == "/v1/completions"
    if body["prompt"] == [0]:
        return 200, {"choices": [{"text": "hi", "finish_reason": "stop"}]}  # no token ids
    return 200, {"choices": [{"text": "ignored", "token_ids": [7, 8, 9], "finish_reason": "length",
                              "logprobs": {"token_logprobs": [-0.1, -0.2, -0.3]}}]}


def test_ids_and_logprobs_come_from_the_server():
    with LoopbackJSONServer(completions) as server:
        engine = OpenAIEngine(f"{server.url}/v1", "tiny")
        result = asyncio.run(engine.generate([1, 2, 3], SamplingParams(0.5, 0.9, 3)))
        assert (result.token_ids, result.logprobs, result.finish_reason) == ([7, 8, 9], [-0.1, -0.2, -0.3], "length")
        sent = server.requests[0][1]
        assert sent["prompt"] == [1, 2, 3] and sent["return_token_ids"] is True and sent["max_tokens"] == 3
        assert (sent["temperature"], sent["top_p"], sent["model"]) == (0.5, 0.9, "tiny")
        with pytest.raises(OpenAIEngineError, match="returned no token ids"):
            asyncio.run(engine.generate([0], SamplingParams()))


def test_unreachable_server_names_url():
    engine = OpenAIEngine("http://127.0.0.1:9/v1", "tiny", timeout_s=2)
    with pytest.raises(OpenAIEngineError, match="cannot reach the inference server at http://127.0.0.1:9/v1"):
        asyncio.run(engine.generate([1], SamplingParams()))
