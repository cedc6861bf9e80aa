"""Experience operators: applied to a step's episodes before advantages (`astuner.data_processor.
experience_pipeline.operators`, the names Trinity-RFT uses).

- `pass_rate_calculator`: per-task mean reward of the group, handed to the task selector's `feedback`
  (difficulty-based selection learns from it);
- `reward_std_filter` (`threshold`, default 0): drop groups whose reward standard deviation is at most it;
- `reward_filter` (`threshold`, default 0): keep only samples whose reward is at least it.
"""

from __future__ import annotations

import statistics
from typing import Any, Callable, Sequence

from astuner.config.schema import OperatorConfig
from astuner.schema import Sample


def group_rewards(samples: Sequence[Sample]) -> dict[str, list[float]]:
    """Per task: one reward per episode (an episode's samples share its reward)."""
    per_episode: dict[tuple[str, str], float] = {}
    for s in samples:
        per_episode[(s.task_id, s.episode_uuid)] = s.reward
    groups: dict[str, list[float]] = {}
    for (task_id, _), reward in per_episode.items():
        groups.setdefault(task_id, []).append(reward)
    return groups


def selection_metrics(samples: Sequence[Sample]) -> dict[str, float]:
    """`selection/valid_ratio`: share of tasks whose episodes' rewards are not all equal (they carry signal);
    `selection/strict_valid_ratio`: share whose mean reward lies strictly between the group's min and
    max possible of 0 and 1; `selection/pass_rate_mean`."""
    groups = group_rewards(samples)
    if not groups:
        return {}
    means = [statistics.fmean(r) for r in groups.values()]
    return {"selection/valid_ratio": sum(len(set(r)) > 1 for r in groups.values()) / len(groups),
            "selection/strict_valid_ratio": sum(0.0 < m < 1.0 for m in means) / len(groups),
            "selection/pass_rate_mean": statistics.fmean(means)}


def apply_operators(operators: Sequence[OperatorConfig], samples: list[Sample],
                    feedback: Callable[[dict[str, float]], None]) -> tuple[list[Sample], dict[str, float]]:
    metrics: dict[str, float] = {}
    for op in operators:
        args: dict[str, Any] = dict(op.args)
        before = len(samples)
        if op.name == "pass_rate_calculator":
            feedback({task: statistics.fmean(r) for task, r in group_rewards(samples).items()})
        elif op.name == "reward_std_filter":
            threshold = float(args.get("threshold", 0.0))
            keep = {t for t, r in group_rewards(samples).items() if len(r) > 1 and statistics.pstdev(r) > threshold}
            samples = [s for s in samples if s.task_id in keep]
        elif op.name == "reward_filter":
            threshold = float(args.get("threshold", 0.0))
            samples = [s for s in samples if s.reward >= threshold]
        else:
            raise ValueError(f"unknown experience operator {op.name!r}")
        if op.name != "pass_rate_calculator":
            metrics[f"data/{op.name}_dropped"] = float(before - len(samples))
    return samples, metrics
