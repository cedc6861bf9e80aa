"""astuner: improve AgentScope agents with reinforcement learning.

The user API: subclass `Workflow` (or write an async workflow function), return a `WorkflowOutput`, and
name a judge; `astuner --conf my_agent.yaml` does the rest.
"""

from astuner.schema import JudgeOutput, Task, WorkflowOutput, WorkflowTask
from astuner.workflow import Workflow

__version__ = "0.1.0"

__all__ = ["Workflow", "WorkflowTask", "WorkflowOutput", "JudgeOutput", "Task", "__version__"]
