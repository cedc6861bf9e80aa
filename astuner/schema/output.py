"""What a workflow returns and what a judge returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class WorkflowOutput:
    """The result of one episode.

    `reward`: set it to score the episode yourself (it wins over the judge); leave None to let the
    configured judge score it. `is_success`: optional success flag (defaults to reward > 0 when judged).
    `metadata`: judge input, e.g. {"final_answer": ...}. `response`: the agent's final message (the
    function API's judges receive it). `metrics`: extra per-episode scalars, averaged into the step metrics.
    """

    reward: Optional[float] = None
    is_success: Optional[bool] = None
    metadata: dict[str, Any] = field(default_factory=dict)
    response: Any = None
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class JudgeOutput:
    """A judge's verdict on one episode."""

    reward: float
    is_success: Optional[bool] = None
    metrics: Optional[dict[str, float]] = None
