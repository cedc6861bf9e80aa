"""`random_dummy` reader (the seed system's): tasks that carry only a number, for workflows that make their own
environment from it (frozenlake's map, a game's seed). 1000 tasks, ids "0".."999" in one fixed shuffled order,
each `main_query` "[dummy task @ N]" and `metadata["random_number"]` N; the validation tasks are the same."""

from __future__ import annotations

import random

from astuner.schema import Task

COUNT = 1000
SEED = 42


class RandomDummyReader:
    def _tasks(self) -> list[Task]:
        numbers = list(range(COUNT))
        random.Random(SEED).shuffle(numbers)  # a fixed order, the global random state untouched
        return [Task(task_id=str(n), main_query=f"[dummy task @ {n}]", env_type="no_env",
                     metadata={"random_number": n}) for n in numbers]

    def train_tasks(self) -> list[Task]:
        return self._tasks()

    def val_tasks(self) -> list[Task]:
        return self._tasks()
