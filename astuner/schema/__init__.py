"""Plain data passed between the task reader, the workflow, the judge and the trainer (no torch)."""

from astuner.schema.task import Task, WorkflowTask
from astuner.schema.output import JudgeOutput, WorkflowOutput
from astuner.schema.sample import Sample

__all__ = ["Task", "WorkflowTask", "WorkflowOutput", "JudgeOutput", "Sample"]
