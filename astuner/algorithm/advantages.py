"""Group-relative advantages.

- `grpo`: every sample of a group (all samples of a task's `num_repeat` episodes) is normalised against
  the group: A = (r - mean) / (std + eps) (or r - mean with `norm_by_std` False).
- `multi_step_grpo`: the episodes of a group are normalised against each other, and every sample of an
  episode shares its episode's advantage, however many samples (branches) the episode produced; with
  `step_norm` divided by the episode's trained calls (Trinity-RFT's enable_step_norm divides each step's
  advantage by the run's step count: per token, the same).
With one sample per episode both are the same. std and one-value groups as verl defines them (normalise).
"""

from __future__ import annotations

import math
from typing import Sequence

from astuner.schema import Sample

from astuner.config.schema_trainer import ESTIMATORS  # declared with trainer_common.algorithm.adv_estimator


def normalise(values: Sequence[float], norm_by_std: bool, eps: float = 1e-6) -> list[float]:
    """(v - mean) / (std + eps), or v - mean, with verl's definitions (compute_grpo_outcome_advantage, which
    Trinity's GRPO shares): std is the sample standard deviation (torch.std, n - 1), and a group of one
    value has mean 0 and std 1 (its advantage is its reward). All equal gives zeros."""
    if not values:
        return []
    if len(values) == 1:
        return [values[0] / (1.0 + eps)] if norm_by_std else [float(values[0])]
    mean = sum(values) / len(values)
    centred = [v - mean for v in values]
    if not norm_by_std:
        return centred
    std = math.sqrt(sum(c * c for c in centred) / (len(values) - 1))
    return [c / (std + eps) for c in centred]


def group_key(sample: Sample, by: str = "task") -> tuple[str, ...]:
    """A sample's GRPO group (trainer_common.algorithm.adv_group): its task, or its task and agent."""
    return (sample.task_id, sample.agent) if by == "agent" else (sample.task_id,)


def assign_advantages(samples: Sequence[Sample], estimator: str, norm_by_std: bool = True,
                      eps: float = 1e-6, step_norm: bool = False, by: str = "task") -> None:
    """Set `sample.advantage` in place; groups are keyed by `group_key`."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {estimator!r}; choose one of {', '.join(ESTIMATORS)}")
    groups: dict[tuple[str, ...], list[Sample]] = {}
    for s in samples:
        groups.setdefault(group_key(s, by), []).append(s)
    for members in groups.values():
        if estimator == "grpo":
            for s, a in zip(members, normalise([s.reward for s in members], norm_by_std, eps)):
                s.advantage = a
            continue
        episodes: dict[str, float] = {}
        for s in members:
            episodes.setdefault(s.episode_uuid, s.reward)
        adv = dict(zip(episodes, normalise(list(episodes.values()), norm_by_std, eps)))
        calls: dict[str, int] = {}
        for s in members:
            calls[s.episode_uuid] = calls.get(s.episode_uuid, 0) + s.num_calls
        for s in members:
            s.advantage = adv[s.episode_uuid] / max(calls[s.episode_uuid], 1) if step_norm else adv[s.episode_uuid]


def zero_variance_groups(samples: Sequence[Sample], by: str = "task") -> set[tuple[str, ...]]:
    """The groups (`group_key`) whose samples all have the same reward (no learning signal under GRPO)."""
    rewards: dict[tuple[str, ...], set[float]] = {}
    for s in samples:
        rewards.setdefault(group_key(s, by), set()).add(s.reward)
    return {group for group, values in rewards.items() if len(values) == 1}
