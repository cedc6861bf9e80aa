"""A training sample: one token sequence with the spans the model generated marked for the loss."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class Sample:
    """`input_ids` = prompt (the first `prompt_length` tokens) + response part. Over the response part,
    `loss_mask[i]` is 1 for tokens the model generated (trained) and 0 for tokens it was given (tool
    results, later user turns); `logprobs[i]` is the engine's log-prob of a generated token, 0.0 elsewhere.
    A sample belongs to one episode; it carries the episode's reward, or its agent's (or policy's) when the
    workflow or judge gave one per agent or policy."""

    task_id: str
    episode_uuid: str
    repeat_index: int
    input_ids: list[int]
    prompt_length: int
    loss_mask: list[int]
    logprobs: list[float]
    reward: float = 0.0
    num_calls: int = 1
    truncated: bool = False
    advantage: float = 0.0
    agent: str = ""  # the agent whose calls the sample holds (CallRecord.target)
    policy: str = "default"  # the policy that generated them, and that trains on it
    policy_version: int = 0  # the version of that policy's weights that generated them (its learner's steps so far)
    metadata: dict[str, Any] = field(default_factory=dict)
    # the trainer's log-probs of the response part before the step's update (its "old policy"), set by the
    # debug trainer for the trajectory viewer; None when the sample was not trained on
    trainer_logprobs: Optional[list[float]] = None

    @property
    def prompt_ids(self) -> list[int]:
        return self.input_ids[: self.prompt_length]

    @property
    def response_ids(self) -> list[int]:
        return self.input_ids[self.prompt_length:]

    def trained_spans(self) -> list[list[int]]:
        """The runs of generated tokens, in order."""
        spans, current = [], []
        for token, mask in zip(self.response_ids, self.loss_mask):
            if mask:
                current.append(token)
            elif current:
                spans.append(current)
                current = []
        if current:
            spans.append(current)
        return spans
