"""`env_service` reader: task ids from an environment service; the query arrives when an episode
creates its instance (`EnvServiceClient.create` returns `query` and `init_messages`)."""

from __future__ import annotations

from typing import Optional

from astuner.env_service import EnvServiceClient
from astuner.errors import DataError
from astuner.schema import Task
from astuner.task_reader.rows import unique_ids


class EnvServiceReader:
    def __init__(self, env_url: str, env_type: str, training_split: str, validation_split: Optional[str],
                 timeout_s: float = 30.0, retries: int = 3, retry_backoff_s: float = 0.5):
        self.client = EnvServiceClient(env_url, timeout_s, retries, retry_backoff_s)
        self.env_url, self.env_type = env_url, env_type
        self.training_split, self.validation_split = training_split, validation_split

    def _tasks(self, split: str) -> list[Task]:
        ids = self.client.task_ids(self.env_type, split)
        if not ids:
            raise DataError(f"environment service {self.env_url} lists no tasks for env_type {self.env_type!r}, "
                            f"split {split!r}")
        tasks = [Task(task_id=i, main_query="", env_type=self.env_type,
                      metadata={"env_url": self.env_url, "split": split}) for i in ids]
        return unique_ids(tasks, f"{self.env_url} [{split}]")

    def train_tasks(self) -> list[Task]:
        return self._tasks(self.training_split)

    def val_tasks(self) -> list[Task]:
        return self._tasks(self.validation_split) if self.validation_split else []
