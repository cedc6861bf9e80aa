"""The run's plug-ins: the workflow, the judge and the warm start's expert a config names, imported and checked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from astuner.config import RunConfig


@dataclass
class Plugins:
    workflow: Any
    judge: Optional[Any]
    expert: Optional[Any] = None  # trainer_common.sft.expert


def resolve_plugins(run: RunConfig) -> Plugins:
    """Import the workflow and the judge the config names; `PluginError` if either is wrong."""
    from astuner.config.plugin import async_function_problem, resolve_plugin
    from astuner.task_judge.base import check_judge_plugin
    from astuner.workflow import check_workflow_plugin

    workflow = resolve_plugin(run.astuner.rollout.agentscope_workflow, "astuner.rollout.agentscope_workflow",
                              check_workflow_plugin, run.extra_roots)
    judge = None
    if run.astuner.task_judge.judge_protocol:
        judge = resolve_plugin(run.astuner.task_judge.judge_protocol, "astuner.task_judge.judge_protocol",
                               check_judge_plugin, run.extra_roots)
    expert = None
    if run.astuner.trainer_common.sft.expert:
        expert = resolve_plugin(run.astuner.trainer_common.sft.expert, "astuner.trainer_common.sft.expert",
                                lambda obj: async_function_problem(obj, 1) and "an async function (prompt: str) -> str",
                                run.extra_roots)
    return Plugins(workflow=workflow, judge=judge, expert=expert)
