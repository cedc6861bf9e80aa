"""The run's plug-ins: the workflow, the judge and the warm start's expert a config names, imported and checked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from astuner.config import RunConfig
from astuner.errors import Found


@dataclass
class Plugins:
    workflow: Any
    judge: Optional[Any]
    expert: Optional[Any] = None  # trainer_common.sft.expert


def resolve_plugins(run: RunConfig, found: Optional[Found] = None) -> Plugins:
    """Import the workflow and the judge the config names; `PluginError` if either is wrong. With `found`, each
    plug-in whose key was not refused is resolved and each failure kept there (the others still resolved)."""
    from astuner.config.plugin import async_function_problem, resolve_plugin
    from astuner.task_judge.base import check_judge_plugin
    from astuner.workflow import check_workflow_plugin

    def expert_problem(obj: Any) -> Any:
        return async_function_problem(obj, 1) and "an async function (prompt: str) -> str"

    cfg = run.astuner
    wanted = [("astuner.rollout.agentscope_workflow", cfg.rollout.agentscope_workflow, check_workflow_plugin, True),
              ("astuner.task_judge.judge_protocol", cfg.task_judge.judge_protocol, check_judge_plugin, False),
              ("astuner.trainer_common.sft.expert", cfg.trainer_common.sft.expert, expert_problem, False)]
    resolved: dict[str, Any] = {}
    for key, spec, check, required in wanted:
        if not (spec or required):
            continue
        if found is None:
            resolved[key] = resolve_plugin(spec, key, check, run.extra_roots)
        elif found.sound(key):
            resolved[key] = found.attempt(resolve_plugin, spec, key, check, run.extra_roots)[1]
    return Plugins(workflow=resolved.get("astuner.rollout.agentscope_workflow"),
                   judge=resolved.get("astuner.task_judge.judge_protocol"),
                   expert=resolved.get("astuner.trainer_common.sft.expert"))
