"""`create_external_llm_fn`, the seed system's helper for judges that ask a hosted LLM (its template's
`task_judge.alien_llm_model`), kept for the judges written for it: a synchronous chat function over DashScope's
OpenAI-compatible endpoint through the openai SDK (its retries, its errors). astuner's own way to ask an LLM in a
judge is `task_judge.llm_judge` (an auxiliary model of the run, or any endpoint: docs/concepts.md).

The key is `DASHSCOPE_API_KEY` (as the seed system's: several keys joined with `|`, one picked per call; a
`DASHSCOPE_API_KEY_BACKUP` list is used too when set); the endpoint is `DASHSCOPE_BASE_URL` when set, else
DashScope's compatible mode."""

from __future__ import annotations

import os
import random
from typing import Any, Callable, Optional

DASHSCOPE_URL = "https://dashscope.aliyuncs.com/compatible-mode/v1"
RETRIES = 3  # the openai SDK's own retries (backoff, on connection errors, 408/409/429/5xx)


def _keys() -> list[str]:
    keys = [k for name in ("DASHSCOPE_API_KEY", "DASHSCOPE_API_KEY_BACKUP")
            for k in (os.environ.get(name) or "").split("|") if k.strip()]
    if not keys:
        raise RuntimeError("create_external_llm_fn: DASHSCOPE_API_KEY is not set (the hosted LLM's key); or judge "
                           "with astuner's task_judge.llm_judge, which takes any OpenAI-compatible endpoint")
    return keys


def create_external_llm_fn(alien_llm_model: str, alien_llm_response_length: int) -> Callable[..., dict[str, str]]:
    """`fn(messages, sampling_params_override={}, request_id="") -> {"role", "content"}`: one greedy reply of
    `alien_llm_model`, at most `alien_llm_response_length` tokens; the override's keys go to the request body."""
    from openai import OpenAI

    def external_llm_chat_fn(messages: list[dict[str, Any]], sampling_params_override: Optional[dict] = None,
                             request_id: str = "") -> dict[str, str]:
        client = OpenAI(api_key=random.choice(_keys()), max_retries=RETRIES,
                        base_url=os.environ.get("DASHSCOPE_BASE_URL") or DASHSCOPE_URL)
        body = {"n": 1, "max_completion_tokens": int(alien_llm_response_length), "temperature": 0.0,
                **(sampling_params_override or {})}
        completion = client.chat.completions.create(model=alien_llm_model, messages=messages, extra_body=body)
        message = completion.choices[0].message
        return {"role": message.role, "content": message.content or ""}

    return external_llm_chat_fn
