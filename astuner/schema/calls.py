"""What the trainable model saw and produced, call by call, for one episode."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Optional


class EpisodeClosed(RuntimeError):
    """A model call from a workflow that is still running after its episode ended (a timed-out thread)."""


@dataclass
class CallRecord:
    """One model call: the exact token ids fed to the engine and the ids (and log-probs) it produced."""

    target: str  # the agent name (register_model target) that made the call
    messages: list[dict[str, Any]]
    tools: Optional[list[dict[str, Any]]]
    prompt_text: str
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    response_text: str
    tool_call_errors: list[str] = field(default_factory=list)
    decoded_response: str = ""  # all response ids decoded, end-of-turn token included (continuation matching)
    policy: str = "default"  # the policy that generated it (astuner.model.policies)
    # what an endpoint that returns no token ids counted (`prompt_tokens`, `completion_tokens`); empty: the ids
    usage: dict[str, int] = field(default_factory=dict)
    # how the reply was sampled (`temperature`, `top_p`): what its log-probs are log-probs of; empty: not recorded
    sampling: dict[str, float] = field(default_factory=dict)

    @property
    def prompt_tokens(self) -> int:
        return int(self.usage.get("prompt_tokens", len(self.prompt_ids)))

    @property
    def completion_tokens(self) -> int:
        return int(self.usage.get("completion_tokens", len(self.response_ids)))


@dataclass
class EpisodeRecorder:
    """Collects the calls of one episode; shared by every trainable model of that episode."""

    calls: list[CallRecord] = field(default_factory=list)
    # a reply was cut by its length limit (finish_reason "length": no end-of-turn token) or the context ran out
    truncated: bool = False
    notes: list[str] = field(default_factory=list)
    refused_agents: set[str] = field(default_factory=set)  # agents whose call was refused: their context ran out

    closed: bool = False  # the episode ended (or timed out): a workflow thread still running adds nothing more
    agents: set[str] = field(default_factory=set)  # every agent named in the episode (register_model, calls)
    label: str = ""  # which episode, for log lines (its uuid, task and repeat: set by the rollout)
    on_close: list[Callable[[], None]] = field(default_factory=list, repr=False)  # e.g. the gateway's keys expire
    prepared: int = 0  # the calls prepared so far (each one's index: its sampling seed, ModelTuner.prepare)
    # add and close come from different threads (the gateway's, a workflow's own)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def close(self) -> None:
        """The episode is over: later calls are refused, and what was bound to it is released."""
        with self._lock:
            self.closed = True
            callbacks, self.on_close = self.on_close, []
        for callback in callbacks:
            callback()

    def next_call_index(self) -> int:
        """The index of the episode's next prepared call (0, 1, ...), from any thread."""
        with self._lock:
            self.prepared += 1
            return self.prepared - 1

    def refuse(self, agent: str, why: str) -> None:
        """A call of `agent` was refused (its prompt leaves no room for the reply): the episode, and that agent's
        samples, are truncated."""
        with self._lock:
            self.truncated = True
            self.refused_agents.add(agent)
            self.notes.append(f"call refused: {why}")

    def add(self, call: CallRecord) -> bool:
        """Record a call; False (nothing recorded) when the episode is over."""
        with self._lock:
            if self.closed:
                return False
            self.calls.append(call)
            if call.finish_reason == "length":
                self.truncated = True
        return True


def conversations(calls: list[CallRecord]) -> list[CallRecord]:
    """The calls that hold an episode's whole conversation: each agent's calls that no later call of the same agent
    continues (whose messages do not open a later call's messages), in call order. One call for a single agent that
    keeps its history; one per agent (or per fresh start of an agent's context) in a multi-agent episode."""
    kept = []
    for i, call in enumerate(calls):
        n = len(call.messages)
        if not any(later.target == call.target and len(later.messages) > n and later.messages[:n] == call.messages
                   for later in calls[i + 1:]):
            kept.append(call)
    return kept
