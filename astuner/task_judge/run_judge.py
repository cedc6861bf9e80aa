"""Turn a finished episode into (reward, is_success, metrics): the workflow's own reward wins, else the
configured judge (a BaseJudge instance or an async judge function) decides."""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from typing import Any, Optional, Union

from astuner.schema import JudgeOutput, WorkflowOutput, WorkflowTask
from astuner.schema.output import as_judge_output
from astuner.schema.task import TaskRow
from astuner.task_judge.base import BaseJudge

Reward = Union[float, dict[str, float]]


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where} gave reward {value!r}; a reward must be a finite number")
    return float(value)


def _as_reward(value: Any, where: str) -> Reward:
    """A finite number, or a non-empty mapping of agent or policy names to finite numbers (one reward each)."""
    if not isinstance(value, Mapping):
        return _number(value, where)
    if not value:
        raise ValueError(f"{where} gave an empty reward mapping; give a number per agent or policy name")
    out = {}
    for name, item in value.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where} gave reward key {name!r}; the keys are agent or policy names")
        out[name] = _number(item, f"{where} (reward[{name!r}])")
    return out


def overall_reward(reward: Reward) -> float:
    """One number for an episode's reward: itself, or the mean of the per-agent (per-policy) rewards."""
    return sum(reward.values()) / len(reward) if isinstance(reward, dict) else reward


def task_as_dict(workflow_task: WorkflowTask) -> dict[str, Any]:
    """What function-style workflows and judges receive as `task`: the dataset row as it is (as agentscope.tuner
    hands it), plus `task_id`, `main_query` where the task has one, the run's `workflow_args` where it sets
    them (a Trinity taskset's) and the row has no field of that name, and `openai_base_url` / `openai_api_key` when
    the OpenAI gateway is on."""
    task = workflow_task.task
    out = TaskRow({**task.metadata, "task_id": task.task_id}, task.task_id)  # a missing field: MissingField
    if task.has_query:
        out["main_query"] = task.main_query
    if workflow_task.workflow_args and "workflow_args" not in out:
        out["workflow_args"] = dict(workflow_task.workflow_args)
    if workflow_task.openai_base_url:  # the gateway's endpoint for this episode (it wins over a row's field)
        out["openai_base_url"], out["openai_api_key"] = workflow_task.openai_base_url, workflow_task.openai_api_key
    return out


async def judge_episode(judge: Optional[Any], workflow_task: WorkflowTask, output: WorkflowOutput,
                        auxiliary_models: Optional[dict[str, Any]] = None) -> tuple[Reward, bool, dict[str, float]]:
    """(reward, is_success, metrics); the reward is a number or {agent or policy name: number}, and success
    defaults to the (mean) reward being above 0."""
    if output.reward is not None:
        reward = _as_reward(output.reward, "the workflow")
        success = bool(output.is_success) if output.is_success is not None else overall_reward(reward) > 0
        return reward, success, {}
    if judge is None:
        raise ValueError("the workflow returned reward=None and no judge is configured; return a reward or set "
                         "astuner.task_judge.judge_protocol")
    if isinstance(judge, BaseJudge):
        verdict = judge.compute_reward(workflow_task, output)
        if inspect.isawaitable(verdict):
            verdict = await verdict
    else:
        verdict = await judge(task_as_dict(workflow_task), output.response, auxiliary_models)
    name = type(judge).__name__ if isinstance(judge, BaseJudge) else getattr(judge, "__name__", "judge")
    verdict = as_judge_output(verdict) or verdict  # agentscope.tuner's JudgeOutput is taken too
    if isinstance(verdict, JudgeOutput):
        reward = _as_reward(verdict.reward, f"judge {name}")
        success = verdict.is_success if verdict.is_success is not None else overall_reward(reward) > 0
        return reward, bool(success), dict(verdict.metrics or {})
    if isinstance(verdict, tuple) and len(verdict) == 2:
        reward = _as_reward(verdict[0], f"judge {name}")
        return reward, bool(verdict[1]), {}
    reward = _as_reward(verdict, f"judge {name}")
    return reward, overall_reward(reward) > 0, {}
