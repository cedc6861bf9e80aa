"""What a workflow returns and what a judge returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union


@dataclass
class WorkflowOutput:
    """The result of one episode.

    `reward`: set it to score the episode yourself (it wins over the judge); leave None to let the
    configured judge score it. In a multi-agent workflow it may be a mapping {agent or policy name: reward}: each
    sample takes its agent's reward, else its policy's. `is_success`: optional success flag (defaults to the
    (mean) reward > 0).
    `metadata`: judge input, e.g. {"final_answer": ...}. `response`: the agent's final message (the
    function API's judges receive it). `metrics`: extra per-episode scalars, averaged into the step metrics.
    """

    reward: Optional[Union[float, dict[str, float]]] = None
    is_success: Optional[bool] = None
    metadata: dict[str, Any] = field(default_factory=dict)
    response: Any = None
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class JudgeOutput:
    """A judge's verdict on one episode."""

    reward: Union[float, dict[str, float]]  # a number, or {agent or policy name: number}
    is_success: Optional[bool] = None
    metrics: Optional[dict[str, float]] = None


def as_workflow_output(value: Any) -> Optional[WorkflowOutput]:
    """`value` as our WorkflowOutput: ours as it is, agentscope.tuner's (reward, response, metrics) converted."""
    if isinstance(value, WorkflowOutput):
        return value
    if type(value).__name__ != "WorkflowOutput" or not hasattr(value, "reward"):
        return None  # duck-typed by class name: agentscope.tuner need not be importable (it needs dspy)
    return WorkflowOutput(reward=value.reward, is_success=getattr(value, "is_success", None),
                          metadata=dict(getattr(value, "metadata", None) or {}), response=getattr(value, "response", None),
                          metrics=dict(getattr(value, "metrics", None) or {}))


def as_judge_output(value: Any) -> Optional[JudgeOutput]:
    """`value` as our JudgeOutput: ours as it is, agentscope.tuner's (reward, metrics) converted."""
    if isinstance(value, JudgeOutput):
        return value
    if type(value).__name__ != "JudgeOutput" or not hasattr(value, "reward"):
        return None
    return JudgeOutput(reward=value.reward, is_success=getattr(value, "is_success", None),
                       metrics=dict(getattr(value, "metrics", None) or {}))
