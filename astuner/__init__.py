"""astuner: improve AgentScope agents with reinforcement learning.

The user API: subclass `Workflow` (or write an async workflow function), return a `WorkflowOutput`, and
name a judge; `astuner --conf my_agent.yaml` does the rest.
"""

from astuner.schema import JudgeOutput, Task, WorkflowOutput, WorkflowTask
from astuner.version import __version__
from astuner.workflow import Workflow

__all__ = ["Workflow", "WorkflowTask", "WorkflowOutput", "JudgeOutput", "Task", "ModelTuner", "__version__"]


def __getattr__(name: str):
    # ModelTuner pulls in agentscope (about 2 s); import it only when a user's code asks for it.
    if name == "ModelTuner":
        from astuner.model.model_tuner import ModelTuner

        return ModelTuner
    raise AttributeError(f"module 'astuner' has no attribute {name!r}")
