"""Task selectors: which training tasks make up each batch. State round-trips through checkpoints."""

from __future__ import annotations

import random
from typing import Any, Sequence

from astuner.schema import Task


class SequentialSelector:
    """Tasks in reader order, epoch after epoch. A batch never spans two epochs (the last one may be short)."""

    def __init__(self, tasks: Sequence[Task], seed: int = 0):
        if not tasks:
            raise ValueError("a task selector needs at least one task")
        self.tasks = list(tasks)
        self.seed = seed
        self.epoch = 0
        self.cursor = 0
        self.order = self._order(0)

    def _order(self, epoch: int) -> list[int]:
        return list(range(len(self.tasks)))

    def steps_per_epoch(self, batch_size: int) -> int:
        return -(-len(self.tasks) // batch_size)

    def next_batch(self, batch_size: int) -> list[Task]:
        if self.cursor >= len(self.order):
            self.epoch += 1
            self.cursor = 0
            self.order = self._order(self.epoch)
        picked = self.order[self.cursor:self.cursor + batch_size]
        self.cursor += len(picked)
        return [self.tasks[i] for i in picked]

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "cursor": self.cursor, "order": list(self.order)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["order"]) != len(self.tasks):
            raise ValueError(f"the checkpoint's task order covers {len(state['order'])} tasks, the reader gave "
                             f"{len(self.tasks)}: resume with the same training data")
        self.epoch, self.cursor, self.order = state["epoch"], state["cursor"], list(state["order"])


class ShuffleSelector(SequentialSelector):
    """A new seeded permutation of the tasks each epoch."""

    def _order(self, epoch: int) -> list[int]:
        order = list(range(len(self.tasks)))
        random.Random(f"{self.seed}:{epoch}").shuffle(order)
        return order


SELECTORS = {"sequential": SequentialSelector, "shuffle": ShuffleSelector}


def build_selector(kind: str, tasks: Sequence[Task], seed: int) -> SequentialSelector:
    return SELECTORS[kind](tasks, seed)
