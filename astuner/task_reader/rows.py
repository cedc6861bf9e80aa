"""Turn dataset rows into `Task`s, with errors that name the row."""

from __future__ import annotations

from typing import Any, Iterable

from astuner.errors import DataError
from astuner.schema import Task

TASK_FIELDS = ("task_id", "main_query", "init_messages", "env_type", "metadata")


def row_to_task(row: Any, index: int, split: str, query_field: str, where: str) -> Task:
    """A row with `main_query` (and optionally the other Task fields) becomes that Task, its remaining
    fields joining `metadata`; any other row takes its query from `query_field` and keeps the whole row as
    metadata. The task id is the row's `task_id` or `id`, else '{split}_{index}'."""
    if not isinstance(row, dict):
        raise DataError(f"{where}: a task row must be a JSON object, got {type(row).__name__}")
    if "main_query" in row:
        query = row["main_query"]
        metadata = row.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise DataError(f"{where}: 'metadata' must be an object, got {type(metadata).__name__}")
        metadata = {**metadata, **{k: v for k, v in row.items() if k not in TASK_FIELDS}}
    elif query_field in row:
        query = row[query_field]
        metadata = dict(row)
    else:
        fields = ", ".join(sorted(map(str, row))) or "none"
        raise DataError(f"{where}: the row has neither 'main_query' nor '{query_field}' (its fields: {fields}); "
                        f"set astuner.task_reader.query_field to the field that holds the query")
    if not isinstance(query, str):
        raise DataError(f"{where}: the query must be a string, got {type(query).__name__} {query!r}")
    init_messages = row.get("init_messages") or []
    if not isinstance(init_messages, list) or not all(
            isinstance(m, dict) and "role" in m and "content" in m for m in init_messages):
        raise DataError(f"{where}: 'init_messages' must be a list of {{'role': ..., 'content': ...}} objects")
    raw_id = row.get("task_id", row.get("id"))
    task_id = str(raw_id) if raw_id is not None else f"{split}_{index}"
    env_type = row.get("env_type") or ""
    return Task(task_id=task_id, main_query=query, init_messages=init_messages, env_type=str(env_type),
                metadata=metadata)


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
