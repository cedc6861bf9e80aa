"""Configuration: compose (Hydra), validate (typed schema), resolve plug-ins."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from astuner.config.schema import AstunerConfig


@dataclass
class RunConfig:
    """Everything a backbone needs to know about the configuration of one run."""

    conf_path: Path
    merged: dict[str, Any]  # the whole resolved config: astuner tree, trinity subtree, verl keys
    astuner: AstunerConfig
    experiment_name: str
    # where relative plug-in files/modules and data paths are looked up when not found from the cwd:
    # the config file's folder, then each of its parents
    extra_roots: list[Path] = field(default_factory=list)


@dataclass
class Plugins:
    workflow: Any
    judge: Optional[Any]
    expert: Optional[Any] = None  # trainer_common.sft.expert


def load_run_config(conf_path: Path | str, overrides: Optional[list[str]] = None) -> RunConfig:
    """Compose and validate; raises `ConfigError` with file:line for anything wrong."""
    from astuner.config.compose import compose_config
    from astuner.config.validate import validate_astuner_tree

    composed = compose_config(conf_path, overrides)
    cfg = validate_astuner_tree(composed.merged.get("astuner"), composed.source)
    name = cfg.experiment_name or composed.conf_path.stem
    cfg.experiment_name = name
    composed.merged["astuner"]["experiment_name"] = name
    conf_dir = composed.conf_path.parent
    return RunConfig(conf_path=composed.conf_path, merged=composed.merged, astuner=cfg, experiment_name=name,
                     extra_roots=[conf_dir, *conf_dir.parents])


def resolve_plugins(run: RunConfig) -> Plugins:
    """Import the workflow and the judge the config names; `PluginError` if either is wrong."""
    from astuner.config.plugin import resolve_plugin
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
        from astuner.config.plugin import async_function_problem

        expert = resolve_plugin(run.astuner.trainer_common.sft.expert, "astuner.trainer_common.sft.expert",
                                lambda obj: async_function_problem(obj, 1) and "an async function (prompt: str) -> str",
                                run.extra_roots)
    return Plugins(workflow=workflow, judge=judge, expert=expert)
