"""Our engine protocol over Trinity's own vLLM engine actor, for a run that trains a LoRA adapter.

Trinity-RFT 0.6's OpenAI-compatible server (what `OpenAIClientEngine` calls) serves the base model only: the
adapter its trainer saves reaches the engine as a `LoRARequest` that only Trinity's own generate calls carry. So
with `astuner.model.lora` each call goes to the engine actor itself (`vLLMRolloutModel._generate_internal`, the
call behind Trinity's own `generate`) with the adapter's current request (`ModelWrapper.get_lora_request_async`,
which follows each weight sync: Trinity points it at the newest checkpoint's `actor/lora_adapter`): token ids in,
token ids and log-probs out, as from vLLM's completions endpoint.
"""

from __future__ import annotations

from typing import Any

from astuner.model.engines.base import GenerateResult, SamplingParams


class TrinityEngine:
    def __init__(self, wrapper: Any):
        self.wrapper = wrapper  # Trinity's ModelWrapper of the rollout model; .model is the engine actor

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> GenerateResult:
        lora = await self.wrapper.get_lora_request_async()
        out = await self.wrapper.model._generate_internal.remote(
            {"prompt_token_ids": list(prompt_ids)}, lora, n=1, temperature=sampling.temperature,
            top_p=sampling.top_p, max_tokens=sampling.max_tokens, logprobs=0, skip_special_tokens=False)
        completion = out.outputs[0]
        token_ids = list(completion.token_ids)
        if completion.logprobs is None or len(completion.logprobs) != len(token_ids):
            raise RuntimeError("Trinity's vLLM engine returned no log-probs for the reply")
        logprobs = [float(step[token].logprob) for token, step in zip(token_ids, completion.logprobs)]
        return GenerateResult(token_ids, logprobs, "length" if completion.finish_reason == "length" else "stop")

    async def update_weights(self, state_dict: Any) -> None:
        return None  # Trinity syncs its engines itself
