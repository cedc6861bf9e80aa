"""Tasks as produced by task readers, and the per-episode view handed to a workflow."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Optional

from astuner.errors import DataError


class NoQuery(DataError):
    """A workflow or judge asked for the query of a task whose row has none."""


class _Query:
    """`Task.main_query`: the query, or NoQuery (saying which row field was looked for) when the row has none.
    A raw row (a game seed, an environment's settings) is a valid task: only the code that asks for a query
    needs one, and is told there where it is missing."""

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            return None  # the dataclass default
        value = obj.__dict__.get("_main_query")
        if value is None:
            raise NoQuery(f"task {obj.task_id!r} has no query: {obj.no_query or 'its row has none'}; read the row "
                          f"from workflow_task.task.metadata (a function workflow gets it as `task`)")
        return value

    def __set__(self, obj: Any, value: Optional[str]) -> None:
        obj.__dict__["_main_query"] = value


@dataclass(eq=False)
class Task:
    """One task from a task reader.

    `main_query` is the user query the agent answers (reading it from a task without one raises NoQuery;
    `has_query` asks first); `init_messages` optional chat messages that precede it; `env_type` names the
    environment for env-service tasks; `metadata` keeps the whole source row (ground truth, features, or
    all a raw row holds) so workflows, judges and selectors can read it; `no_query` says why there is no
    query (which field the row lacks).
    """

    task_id: str
    main_query: Optional[str] = field(default=_Query(), repr=False)  # type: ignore[assignment]
    init_messages: list[dict[str, Any]] = field(default_factory=list)
    env_type: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    no_query: str = ""

    @property
    def has_query(self) -> bool:
        return self.__dict__.get("_main_query") is not None

    @property
    def query_or_none(self) -> Optional[str]:
        return self.__dict__.get("_main_query")

    def to_dict(self) -> dict[str, Any]:
        out = {
            "task_id": self.task_id,
            "main_query": self.query_or_none,
            "init_messages": list(self.init_messages),
            "env_type": self.env_type,
            "metadata": dict(self.metadata),
        }
        if self.no_query:
            out["no_query"] = self.no_query
        return out

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Task) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return (f"Task(task_id={self.task_id!r}, main_query={self.query_or_none!r}, env_type={self.env_type!r}, "
                f"metadata={self.metadata!r})")


@dataclass
class WorkflowTask:
    """What a workflow receives for one episode: the task plus this episode's identity.

    `repeat_index` is the episode's index within its group (`rollout.num_repeat` episodes per task);
    `env` is the environment handle for env-service tasks (None otherwise); `workflow_args` the run's
    `astuner.rollout.workflow_args` (a Trinity taskset's `workflow_args`); `auxiliary_models` the frozen
    models by name (`astuner.auxiliary_models`, or tune()'s `auxiliary_models=`); `openai_base_url` /
    `openai_api_key` the episode's endpoint on the run's OpenAI-compatible gateway when
    `astuner.rollout.openai_gateway.enable` is set (an agent with its own OpenAI client trains through them).
    """

    task: Task
    repeat_index: int = 0
    episode_uuid: str = field(default_factory=lambda: uuid.uuid4().hex)
    env: Optional[Any] = None
    workflow_args: dict[str, Any] = field(default_factory=dict)
    auxiliary_models: dict[str, Any] = field(default_factory=dict)
    openai_base_url: Optional[str] = None  # this episode's OpenAI-compatible endpoint (rollout.openai_gateway.enable)
    openai_api_key: Optional[str] = None

    @property
    def task_id(self) -> str:
        return self.task.task_id
