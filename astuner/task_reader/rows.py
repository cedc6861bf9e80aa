"""Turn dataset rows into `Task`s, with errors that name the row."""

from __future__ import annotations

from typing import Any, Iterable

from astuner.errors import DataError
from astuner.schema import Task

TASK_FIELDS = ("task_id", "main_query", "init_messages", "env_type", "metadata")


def row_to_task(row: Any, index: int, split: str, query_field: str, where: str) -> Task:
    """A row with `main_query` (and optionally the other Task fields) becomes that Task, its remaining
    fields joining `metadata`; any other row keeps the whole row as metadata and takes its query from
    `query_field` where that is a string. A row without one (a game's seed, an environment's settings) is a
    task with no query: the workflow reads the row, and a workflow or judge that asks for the query is told
    which field it lacks. The task id is the row's `task_id` or `id`, else '{split}_{index}'."""
    if not isinstance(row, dict):
        raise DataError(f"{where}: a task row must be a JSON object, got {type(row).__name__}")
    no_query = ""
    if "main_query" in row:
        query = row["main_query"]
        metadata = row.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise DataError(f"{where}: 'metadata' must be an object, got {type(metadata).__name__}")
        metadata = {**metadata, **{k: v for k, v in row.items() if k not in TASK_FIELDS}}
        if not isinstance(query, str):  # astuner's own row format names its query: it must be one
            raise DataError(f"{where}: 'main_query' must be a string, got {type(query).__name__} {query!r}")
    else:
        metadata = dict(row)
        query = row.get(query_field)
        if not isinstance(query, str):
            fields = ", ".join(sorted(map(str, row))) or "none"
            no_query = (f"its row has no '{query_field}' (fields: {fields}; astuner.task_reader.query_field)"
                        if query_field not in row else
                        f"its '{query_field}' is {type(query).__name__} {short(query)}, not a string")
            query = None
    init_messages = row.get("init_messages") or []
    if not isinstance(init_messages, list) or not all(
            isinstance(m, dict) and "role" in m and "content" in m for m in init_messages):
        raise DataError(f"{where}: 'init_messages' must be a list of {{'role': ..., 'content': ...}} objects")
    raw_id = row.get("task_id", row.get("id"))
    task_id = str(raw_id) if raw_id is not None else f"{split}_{index}"
    env_type = row.get("env_type") or ""
    return Task(task_id=task_id, main_query=query, init_messages=init_messages, env_type=str(env_type),
                metadata=metadata, no_query=no_query)


def short(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def unique_ids(tasks: Iterable[Task], source: str) -> list[Task]:
    """The tasks as a list; duplicate task ids are an error (selectors and pass-rates key on them)."""
    seen: dict[str, int] = {}
    out = []
    for i, task in enumerate(tasks):
        if task.task_id in seen:
            raise DataError(f"{source}: task id {task.task_id!r} appears twice (rows {seen[task.task_id]} and {i}); "
                            f"task ids must be unique")
        seen[task.task_id] = i
        out.append(task)
    return out
