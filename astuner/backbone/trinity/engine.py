"""Our engine protocol over Trinity's own vLLM engine actor, for a run that trains a LoRA adapter.

Trinity-RFT 0.6's OpenAI-compatible server (what `OpenAIClientEngine` calls) serves the base model only: the
adapter its trainer saves reaches the engine as a `LoRARequest` that only Trinity's own generate calls carry. So
with `astuner.model.lora` each call goes to the engine actor itself (`vLLMRolloutModel._generate_internal`, the
call behind Trinity's own `generate`) with the adapter's current request (`ModelWrapper.get_lora_request_async`,
which follows each weight sync: Trinity points it at the newest checkpoint's `actor/lora_adapter`): token ids in,
token ids and log-probs out, as from vLLM's completions endpoint.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional, Sequence

from astuner.model.engines.base import GenerateResult, SamplingParams

_STEP = re.compile(r"global_step_(\d+)")


def learning_policies(a: Any) -> list[str]:
    """The run's learning policies (astuner.policies, of the `astuner` tree), in the config's order: on Trinity each
    an adapter of its own (lora_policies)."""
    return [name for name, policy in a.policies.items() if policy.trainable]


def policy_request(current: Any, policy: str, learners: Sequence[str]) -> Any:
    """The `LoRARequest` of `policy` beside Trinity's own (`current`, which follows each weight sync): its adapter in
    the same checkpoint (`.../global_step_N/actor/lora_adapter/<policy>`, lora_policies.save_policy_adapters), or
    before any (Trinity's untrained dummy adapter) that same untrained adapter. The id is fixed by (step, policy), so
    every workflow process names one adapter alike, and each step's adapter is a new id (vLLM caches adapters by
    id); Trinity's own is id 1."""
    path = Path(current.lora_path)
    step = _STEP.search(str(path)) if path.name == "lora_adapter" else None
    version = int(step.group(1)) if step else 0
    return type(current)(lora_name=f"{policy}-{version}", lora_int_id=2 + version * len(learners) +
                         list(learners).index(policy), lora_path=str(path / policy if step else path))


class TrinityEngine:
    """`policy` (with `learners`, the run's learning policies): calls with that policy's adapter
    (`policy_request`); `base`: calls with no adapter (a frozen policy of a LoRA run: its untrained adapter is the
    base model); neither: Trinity's one adapter."""

    def __init__(self, wrapper: Any, policy: Optional[str] = None, learners: Sequence[str] = (), base: bool = False):
        self.wrapper = wrapper  # Trinity's ModelWrapper of the rollout model; .model is the engine actor
        self.policy, self.learners, self.base = policy, list(learners), base

    async def lora_request(self) -> Any:
        if self.base:
            return None
        current = await self.wrapper.get_lora_request_async()
        return current if self.policy is None else policy_request(current, self.policy, self.learners)

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> GenerateResult:
        lora = await self.lora_request()
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
