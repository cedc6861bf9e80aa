"""The judge contract."""

from __future__ import annotations

from typing import Any, Optional, Union

from astuner.config.plugin import subclass_or_async_function_problem
from astuner.schema import JudgeOutput, WorkflowOutput, WorkflowTask


class BaseJudge:
    """Scores one episode. Subclass and implement `compute_reward`, returning `(reward, is_success)` or a
    `JudgeOutput`; it may be `async def`. The judge is built once per run with the run's config."""

    def __init__(self, config: Any = None) -> None:
        self.config = config

    def compute_reward(self, workflow_task: WorkflowTask,
                       workflow_output: WorkflowOutput) -> Union[tuple[float, bool], JudgeOutput]:
        raise NotImplementedError(f"{type(self).__name__}.compute_reward is not implemented")


def check_judge_plugin(obj: Any) -> Optional[str]:
    """None when `obj` can serve as `task_judge.judge_protocol`, else what it must be."""
    return subclass_or_async_function_problem(
        obj, BaseJudge, "compute_reward",
        "a BaseJudge subclass with compute_reward(self, workflow_task, workflow_output) or an async function "
        "(task, response, ...)")
