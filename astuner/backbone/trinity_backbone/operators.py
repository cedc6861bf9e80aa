"""astuner's experience operators inside Trinity: the same names, statistics over episodes.

Trinity's `pass_rate_calculator` and `reward_std_filter` compute a task's pass rate and reward std over its
experiences. An astuner episode hands Trinity 0 … `max_sample_per_task` experiences that all carry the
episode's reward, so an episode split into more samples would weigh more. These subclasses take one
experience per episode (`info.episode_uuid`) for the statistic, as the debug backbone does
(`astuner.data.operators`), and are otherwise Trinity's operators: the same metrics, the same feedback to
Trinity's task selector. `reward_filter` keeps or drops single experiences and is used unchanged.
"""

from __future__ import annotations

from typing import Any

from trinity.buffer.operators.filters.reward_filter import RewardSTDFilter
from trinity.buffer.operators.mappers.pass_rate_calculator import PassRateCalculator


def one_per_episode(exps: list[Any]) -> list[Any]:
    """The first experience of each episode (experiences of one episode share its reward)."""
    seen: dict[Any, Any] = {}
    for exp in exps:
        seen.setdefault(exp.info.get("episode_uuid") or id(exp), exp)
    return list(seen.values())


class EpisodePassRateCalculator(PassRateCalculator):
    def process(self, exps: list[Any]) -> tuple[list[Any], dict]:
        _, metrics = super().process(one_per_episode(exps))
        return exps, metrics


class EpisodeRewardSTDFilter(RewardSTDFilter):
    def process(self, exps: list[Any]) -> tuple[list[Any], dict]:
        kept, metrics = super().process(one_per_episode(exps))
        groups = {exp.eid.tid for exp in kept}
        result = [exp for exp in exps if exp.eid.tid in groups]
        metrics["operator_filtered_count"] = len(exps) - len(result)
        return result, metrics
