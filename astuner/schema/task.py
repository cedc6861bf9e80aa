"""Tasks as produced by task readers, and the per-episode view handed to a workflow."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class Task:
    """One task from a task reader.

    `main_query` is the user query the agent answers; `init_messages` optional chat messages that precede
    it; `env_type` names the environment for env-service tasks; `metadata` keeps the whole source row
    (ground truth, features) so judges and selectors can read it.
    """

    task_id: str
    main_query: str
    init_messages: list[dict[str, Any]] = field(default_factory=list)
    env_type: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "main_query": self.main_query,
            "init_messages": list(self.init_messages),
            "env_type": self.env_type,
            "metadata": dict(self.metadata),
        }


@dataclass
class WorkflowTask:
    """What a workflow receives for one episode: the task plus this episode's identity.

    `repeat_index` is the episode's index within its group (`rollout.num_repeat` episodes per task);
    `env` is the environment handle for env-service tasks (None otherwise).
    """

    task: Task
    repeat_index: int = 0
    episode_uuid: str = field(default_factory=lambda: uuid.uuid4().hex)
    env: Optional[Any] = None

    @property
    def task_id(self) -> str:
        return self.task.task_id
