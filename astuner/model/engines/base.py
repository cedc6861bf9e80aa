"""The engine contract."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol, runtime_checkable


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one response. temperature 0 = greedy. `seed`: the request's own sampling seed, so its draws
    do not depend on what else the engine batches with it or sampled before (None: the engine's generator)."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256
    seed: Optional[int] = None


def derived_seed(*parts: Any) -> int:
    """A 63-bit seed from `parts` (a run's seed, an episode's id, a call's index): the same on every machine and
    Python (no hash randomisation)."""
    digest = hashlib.blake2b(":".join(str(p) for p in parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


@dataclass
class GenerateResult:
    """The sampled token ids, the log-prob of each under the sampling distribution actually used
    (temperature and top_p applied; for greedy decoding the model's plain log-prob), and why it stopped:
    'stop' (an end-of-turn token, included in token_ids) or 'length' (max_tokens reached)."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Engine(Protocol):
    """Safe to call from many coroutines at once."""

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> GenerateResult: ...

    async def update_weights(self, state_dict: Any) -> None:
        """Load new policy weights (a state dict, or None when the engine shares the policy's module)."""
        ...
