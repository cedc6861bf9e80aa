"""Tasks as produced by task readers, and the per-episode view handed to a workflow."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Optional

from astuner.errors import DataError


class RowLacks(DataError):
    """A workflow or judge read what its task's row does not hold. `task_id`; `lacks`, what it lacks (a field's
    name: the same for every task that lacks it, so a run can count them). The message is one line."""

    def __init__(self, message: str, task_id: str, lacks: str):
        super().__init__(message)
        self.task_id, self.lacks = task_id, lacks

    def __str__(self) -> str:  # KeyError's own quotes the message (MissingField)
        return str(self.args[0]) if self.args else ""

    def __reduce__(self) -> Any:  # across processes (a workflow's thread, Ray) with its fields
        return (_rebuild, (type(self), self.args[0] if self.args else "", self.task_id, self.lacks))


def _rebuild(cls: type, message: str, task_id: str, lacks: str) -> "RowLacks":
    error = cls.__new__(cls)
    RowLacks.__init__(error, message, task_id, lacks)
    return error


class NoQuery(RowLacks):
    """A workflow or judge asked for the query of a task whose row has none."""


class MissingField(RowLacks, KeyError):
    """A workflow or judge read a field its task's row does not have (`task.metadata["x"]`, a function workflow's
    `task["x"]`). A KeyError too, so code that catches one, or reads with `.get`, behaves as with a dict."""


class NoGroundTruth(RowLacks, ValueError):
    """A judge that compares with the row's reference answer found none in it."""

    def __init__(self, message: str, task_id: str, lacks: str = "answer"):
        super().__init__(message, task_id, lacks)


def fields_of(row: Any, limit: int = 120) -> str:
    """A row's field names, sorted, cut to about `limit` characters."""
    text = ", ".join(sorted(map(str, row))) or "none"
    return text if len(text) <= limit else text[:limit].rsplit(", ", 1)[0] + ", ..."


class TaskRow(dict):
    """A task's row (`Task.metadata`, a function workflow's `task`): a dict whose missing field raises
    MissingField naming the field, the task and the fields the row has, not a bare KeyError."""

    def __init__(self, data: Any = (), task_id: str = "", **more: Any):
        super().__init__(data, **more)
        self.task_id = task_id

    def __missing__(self, key: Any) -> Any:
        raise MissingField(f"task {self.task_id!r} has no field {key!r}: its row has {fields_of(self)}",
                           self.task_id, str(key))

    def __reduce__(self) -> Any:
        return (type(self), (dict(self), self.task_id))


def _query_field(no_query: str) -> str:
    """The field a task without a query lacks, from the reader's account (`Task.no_query`)."""
    found = re.match(r"its (?:row has no )?'([^']*)'", no_query or "")
    return found.group(1) if found else "a query"


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
                          f"from workflow_task.task.metadata (a function workflow gets it as `task`)",
                          obj.task_id, _query_field(obj.no_query))
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

    def __post_init__(self) -> None:
        if isinstance(self.__dict__.get("_main_query"), _Query):  # the dataclass's default: no query given
            self.__dict__["_main_query"] = None
        if not isinstance(self.metadata, TaskRow) or self.metadata.task_id != self.task_id:
            self.metadata = TaskRow(self.metadata or {}, self.task_id)

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
