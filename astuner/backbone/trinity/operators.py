"""astuner's experience operators inside Trinity: the same names, statistics over episodes.

Trinity's `pass_rate_calculator` and `reward_std_filter` compute a task's pass rate and reward std over its
experiences. An astuner episode hands Trinity 0 … `max_sample_per_task` experiences that all carry the
episode's reward, so an episode split into more samples would weigh more. These subclasses take one
experience per episode (`info.episode_uuid`) for the statistic, as the debug backbone does
(`astuner.data.operators`), and are otherwise Trinity's operators: the same metrics, the same feedback to
Trinity's task selector. `reward_filter` keeps or drops single experiences and is used unchanged.

`ShortGroups`, always first, acts on the groups (all of a task's, `task_of`) a failed episode left short (rollout.short_group), as the debug
backbone's rollout manager does. `StepPadding`, always last of these operators, makes every explorer step hand the
trainer the same number of experiences (see its docstring).
"""

from __future__ import annotations

from typing import Any

from trinity.buffer.operators.experience_operator import ExperienceOperator
from trinity.buffer.operators.filters.reward_filter import RewardSTDFilter
from trinity.buffer.operators.mappers.pass_rate_calculator import PassRateCalculator
from trinity.common.experience import EID, Experience

PADDING_TASK = "astuner-padding"
FAILED = "astuner_failed"  # info key of the one experience a failed, untrained episode hands Trinity (workflow.py)
TASK = "astuner_task"  # info key: the task of an experience whose group is a part of it (workflow.group_of)


def one_per_episode(exps: list[Any]) -> list[Any]:
    """The first experience of each episode in each group (an episode's experiences in one group share its reward;
    with several policies, or `adv_group: agent`, an episode has experiences in several groups)."""
    seen: dict[Any, Any] = {}
    for exp in exps:
        seen.setdefault((exp.info.get("episode_uuid") or id(exp), exp.eid.tid), exp)
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


class ShortGroups(ExperienceOperator):
    """The groups (a task's episodes in one explorer step, `eid.tid`) that a failed episode left short of one:
    `drop` = every experience of the group leaves the step (the survivors' advantages would describe the episodes
    that did not fail); otherwise the survivors stay. The failed episodes' markers (`FAILED`) leave either way.
    Metrics: `short_groups`, `dropped_short_groups` (a group whose every episode failed is short, never dropped:
    nothing of it is trained)."""

    def __init__(self, drop: bool = True):
        self.drop = bool(drop)

    def process(self, exps: list[Any]) -> tuple[list[Any], dict]:
        short = {task_of(exp) for exp in exps if exp.info.get(FAILED)}
        survivors = {task_of(exp) for exp in exps if not exp.info.get(FAILED)}
        dropped = short & survivors if self.drop else set()
        kept = [exp for exp in exps if not exp.info.get(FAILED) and task_of(exp) not in dropped]
        return kept, {"short_groups": len(short), "dropped_short_groups": len(dropped)}


def task_of(exp: Any) -> tuple[Any, Any]:
    """The task an experience's group belongs to: with several policies or per-agent groups a task has several
    groups (`eid.task` = `<task>/<policy>[/<agent>]`, `TASK` naming the task), and a failed episode leaves each
    of them short."""
    return exp.eid.batch, str(exp.info.get(TASK, exp.eid.task))


class StepPadding(ExperienceOperator):
    """Every explorer step's experiences, padded to `size` (train_batch_size × num_repeat × max_sample_per_task,
    Trinity's `buffer.train_batch_size`) with experiences that train nothing.

    Trinity's trainer reads a fixed number of experiences per step (its queue reader) and its verl trainer
    splits them into mini-batches of that same fixed size. An astuner episode yields 0 (failed, timed out,
    made no call) … `max_sample_per_task` experiences, and filters drop groups, so a step's count varies: a
    short step would leave the trainer waiting out its read timeout while the explorer waits for its weights;
    a long one would spill into the next trainer step. Padded to the upper bound, trainer step t trains on
    exactly explorer step t's experiences in one optimizer step, as on the debug backbone. A padding row is one
    token with no loss mask (advantage 0): no policy, KL or entropy term. Trinity's own per-row trainer
    metrics (critic/score, response_length, prompt_length) count these rows; `experience_pipeline/padding`
    says how many there were."""

    def __init__(self, size: int):
        self.size = int(size)

    def process(self, exps: list[Any]) -> tuple[list[Any], dict]:
        if len(exps) > self.size:
            raise ValueError(f"{len(exps)} experiences in one explorer step, more than the {self.size} its trainer "
                             f"step takes (buffer.train_batch_size); leave trinity.buffer.train_batch_size to astuner")
        versions = [exp.info.get("model_version", 0) for exp in exps]
        batch = exps[0].eid.batch if exps else ""
        pad = [padding_experience(batch, max(versions, default=0)) for _ in range(self.size - len(exps))]
        return exps + pad, {"padding": len(pad)}


def padding_experience(batch: Any, model_version: int) -> Any:
    """A one-token response after a one-token prompt, masked out, reward 0: it adds no loss term."""
    return Experience(eid=EID(batch=batch, task=PADDING_TASK), tokens=[0, 0], prompt_length=1, logprobs=[0.0],
                      action_mask=[False], reward=0.0,
                      info={"astuner_padding": True, "model_version": model_version, "use_count": 0})
