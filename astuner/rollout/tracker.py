"""Calls -> samples.

A call whose prompt ids begin with an earlier chain's ids (exact token prefix) extends that chain: the
new prompt tokens get loss mask 0, the new response tokens mask 1 and their recorded log-probs. A call
that continues no chain (the template rewrote history, another agent's context, ...) starts a new
chain; a chain holds the calls of one agent (`CallRecord.target`), whose name (and policy) its sample carries. Each chain
is one sample; with `max_samples` set, at most that many are kept: those with the most generated (trained)
tokens, ties to the later chain (it holds more of the episode's end); the kept ones stay in call order.
Calls of agents outside `trainable` (when given) are not trained on: they start or extend no chain.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Collection, Optional, Sequence

from astuner.schema.sample import Sample
from astuner.schema.calls import CallRecord


@dataclass
class _Chain:
    tokens: list[int]
    prompt_length: int
    agent: str = ""
    policy: str = "default"
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    calls: int = 0
    truncated: bool = False

    def extend(self, call: CallRecord) -> None:
        given = call.prompt_ids[len(self.tokens):]
        self.tokens += given + call.response_ids
        self.mask += [0] * len(given) + [1] * len(call.response_ids)
        self.logprobs += [0.0] * len(given) + list(call.logprobs)
        self.calls += 1
        self.truncated |= call.finish_reason == "length"


@dataclass
class TrackerStats:
    calls: int = 0
    samples: int = 0
    merged_calls: int = 0  # calls that extended an earlier chain
    dropped_samples: int = 0  # beyond max_samples
    clipped_samples: int = 0  # response part cut to max_response_length
    overlong_prompts: int = 0  # dropped: prompt longer than max_prompt_length
    untrained_calls: int = 0  # calls of agents that no trainable policy serves


def _is_prefix(prefix: list[int], ids: list[int]) -> bool:
    return len(prefix) <= len(ids) and ids[: len(prefix)] == prefix


def build_chains(calls: Sequence[CallRecord]) -> tuple[list[_Chain], int]:
    chains: list[_Chain] = []
    merged = 0
    for call in calls:
        if len(call.logprobs) != len(call.response_ids):
            raise ValueError(f"a call recorded {len(call.response_ids)} response ids but {len(call.logprobs)} log-probs")
        candidates = [c for c in chains if c.agent == call.target and _is_prefix(c.tokens, call.prompt_ids)]
        if candidates:
            chain = max(candidates, key=lambda c: len(c.tokens))
            merged += 1
        else:
            chain = _Chain(tokens=list(call.prompt_ids), prompt_length=len(call.prompt_ids), agent=call.target,
                           policy=call.policy)
            chains.append(chain)
        chain.extend(call)
    return chains, merged


def build_samples(calls: Sequence[CallRecord], *, task_id: str, episode_uuid: str, repeat_index: int,
                  max_samples: Optional[int], max_prompt_length: int, max_response_length: int,
                  stats: TrackerStats | None = None, trainable: Optional[Collection[str]] = None) -> list[Sample]:
    """Samples of one episode (reward not yet set); `max_samples` None keeps every one. `stats` accumulates
    counts for metrics."""
    stats = stats if stats is not None else TrackerStats()
    if trainable is not None:
        kept = [c for c in calls if c.target in trainable]
        stats.untrained_calls += len(calls) - len(kept)
        calls = kept
    chains, merged = build_chains(calls)
    stats.calls += len(calls)
    stats.merged_calls += merged
    samples = []
    for chain in chains:
        if chain.prompt_length > max_prompt_length:
            stats.overlong_prompts += 1
            continue
        tokens, mask, logprobs = chain.tokens, chain.mask, chain.logprobs
        truncated = chain.truncated
        if len(mask) > max_response_length:
            cut = chain.prompt_length + max_response_length
            tokens, mask, logprobs = tokens[:cut], mask[:max_response_length], logprobs[:max_response_length]
            truncated = True
            stats.clipped_samples += 1
        samples.append(Sample(task_id=task_id, episode_uuid=episode_uuid, repeat_index=repeat_index,
                              input_ids=tokens, prompt_length=chain.prompt_length, loss_mask=mask,
                              logprobs=logprobs, num_calls=chain.calls, truncated=truncated, agent=chain.agent,
                              policy=chain.policy))
    if max_samples is not None and len(samples) > max_samples:
        ranked = sorted(range(len(samples)), key=lambda i: (sum(samples[i].loss_mask), i), reverse=True)
        chosen = sorted(ranked[:max_samples])
        stats.dropped_samples += len(samples) - max_samples
        samples = [samples[i] for i in chosen]
    stats.samples += len(samples)
    return samples
