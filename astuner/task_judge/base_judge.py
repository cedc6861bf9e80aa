"""The seed system's path of `BaseJudge` (`from astuner.task_judge.base_judge import BaseJudge`), kept for the
files written for it; the judge contract lives in `astuner.task_judge.base`."""

from astuner.schema import WorkflowOutput, WorkflowTask
from astuner.task_judge.base import BaseJudge

__all__ = ["BaseJudge", "WorkflowOutput", "WorkflowTask"]
