"""Engine backed by an OpenAI-compatible server that takes and returns token ids (e.g. vLLM's
`/v1/completions` with a token-id prompt, `logprobs` and `return_token_ids`). Token ids always come
from the server; text is never re-tokenized."""

from __future__ import annotations

from typing import Any, Optional

from astuner.model.engines.base import GenerateResult, SamplingParams


class OpenAIEngineError(RuntimeError):
    pass


def completion_request(model: str, prompt_ids: list[int], sampling: SamplingParams) -> dict[str, Any]:
    request = {"model": model, "prompt": list(prompt_ids), "max_tokens": sampling.max_tokens,
               "temperature": sampling.temperature, "top_p": sampling.top_p, "logprobs": 0,
               "return_token_ids": True, "skip_special_tokens": False}
    if sampling.seed is not None:  # the request's own seed (the completions API's `seed`; vLLM honours it)
        request["seed"] = sampling.seed
    return request


def parse_choice(choice: dict[str, Any], where: str) -> GenerateResult:
    """A completions choice -> GenerateResult, insisting on server-side token ids and log-probs."""
    token_ids = choice.get("token_ids")
    if token_ids is None:
        raise OpenAIEngineError(f"inference server {where} returned no token ids; astuner needs a server that "
                                f"returns them (vLLM: request field return_token_ids)")
    logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
    if logprobs is None or len(logprobs) != len(token_ids):
        raise OpenAIEngineError(f"inference server {where} returned {len(logprobs or [])} log-probs for "
                                f"{len(token_ids)} tokens")
    finish = "length" if choice.get("finish_reason") == "length" else "stop"
    return GenerateResult(list(token_ids), [float(x) for x in logprobs], finish)


class OpenAIClientEngine:
    """The same over an `openai.AsyncOpenAI` client someone else configured (Trinity hands one to its
    workflows)."""

    def __init__(self, client: Any, model: str):
        self.client, self.model = client, model

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> GenerateResult:
        body = completion_request(self.model, prompt_ids, sampling)
        standard = {k: body.pop(k) for k in ("model", "prompt", "max_tokens", "temperature", "top_p", "logprobs")}
        response = await self.client.completions.create(**standard, extra_body=body)
        choice = response.choices[0]
        return parse_choice(choice.model_dump() if hasattr(choice, "model_dump") else dict(choice),
                            str(getattr(self.client, "base_url", "the inference server")))

    async def update_weights(self, state_dict: Any) -> None:
        return None  # the serving side owns the weights


class OpenAIEngine:
    def __init__(self, base_url: str, model: str, api_key: Optional[str] = None, timeout_s: float = 600.0):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout_s = timeout_s
        self._client: Any = None

    def _http(self) -> Any:
        import httpx

        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.timeout_s, headers=self.headers)
        return self._client

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> GenerateResult:
        import httpx

        body = completion_request(self.model, prompt_ids, sampling)
        url = f"{self.base_url}/completions"
        try:
            response = await self._http().post(url, json=body)
        except httpx.HTTPError as exc:
            raise OpenAIEngineError(f"cannot reach the inference server at {url}: {exc!r}; check "
                                    f"astuner.rollout.openai_base_url") from None
        if response.status_code != 200:
            raise OpenAIEngineError(f"inference server {url} answered HTTP {response.status_code}: "
                                    f"{response.text[:300]}")
        return parse_choice(response.json()["choices"][0], url)

    async def update_weights(self, state_dict: Any) -> None:
        raise NotImplementedError("the openai engine serves a fixed model; it cannot receive new weights "
                                  "(use engine hf or vllm to train)")


__all__ = ["OpenAIEngine", "OpenAIClientEngine", "OpenAIEngineError"]
