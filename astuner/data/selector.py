"""Task selectors: which training tasks make up each batch. State round-trips through checkpoints."""

from __future__ import annotations

import random
from typing import Any, Optional, Sequence

import numpy as np

from astuner.schema import Task


class SequentialSelector:
    """Tasks in reader order, epoch after epoch. A batch never spans two epochs (the last one may be short)."""

    def __init__(self, tasks: Sequence[Task], seed: int = 0, feature_keys: Sequence[str] = (),
                 kwargs: Optional[dict[str, Any]] = None):
        if not tasks:
            raise ValueError("a task selector needs at least one task")
        self.tasks = list(tasks)
        self.seed = seed
        self.feature_keys = list(feature_keys)
        self.kwargs = dict(kwargs or {})
        self.epoch = 0
        self.cursor = 0
        self.order = self._order(0)

    def feedback(self, pass_rates: dict[str, float]) -> None:
        """Per-task pass rates of the batch just run (the pass_rate_calculator operator); most selectors
        ignore them."""

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

    def position(self) -> int:
        """The prompts drawn so far, counted from the run's first (a batch never spans epochs: the epochs before
        this one were drawn whole). A run that trains each draw once moves it by each step's batch."""
        return self.epoch * len(self.tasks) + self.cursor

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


def feature(task: Task, key: str) -> float:
    value = task.metadata.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"task {task.task_id} has no numeric feature {key!r} (its fields: "
                         f"{', '.join(sorted(task.metadata))}); add the column or change feature_keys")
    return float(value)


class RandomSelector(SequentialSelector):
    """Each batch drawn uniformly with replacement (seeded per batch); an epoch is len(tasks) draws."""

    def next_batch(self, batch_size: int) -> list[Task]:
        rng = random.Random(f"{self.seed}:{self.cursor}")
        picked = [rng.randrange(len(self.tasks)) for _ in range(batch_size)]
        self.cursor += batch_size
        self.epoch = self.cursor // len(self.tasks)
        return [self.tasks[i] for i in picked]

    def position(self) -> int:
        return self.cursor


class OfflineEasy2HardSelector(SequentialSelector):
    """Sorted by the `feature_keys` columns (higher = easier; ties by the next key, then reader order),
    easiest first, the same order every epoch."""

    def _order(self, epoch: int) -> list[int]:
        if not self.feature_keys:
            raise ValueError("offline_easy2hard needs feature_keys (columns where higher means easier)")
        keyed = [(tuple(-feature(t, k) for k in self.feature_keys), i) for i, t in enumerate(self.tasks)]
        return [i for _, i in sorted(keyed)]


class DifficultyBasedSelector(SequentialSelector):
    """BOTS (see astuner.data.bots): tasks whose estimated pass rate is nearest `target_reward` first.
    `feature_keys`: [weaker model's pass-rate column, stronger model's]; kwargs: m (rollouts per task,
    default 16), lamb (0.2), rho (0.2), adaptive_rho (false), target_reward (1.0), tau (1.0), do_sample (false)."""

    def __init__(self, tasks: Sequence[Task], seed: int = 0, feature_keys: Sequence[str] = (),
                 kwargs: Optional[dict[str, Any]] = None):
        super().__init__(tasks, seed, feature_keys, kwargs)
        if len(self.feature_keys) != 2:
            raise ValueError("difficulty_based needs exactly two feature_keys: the pass-rate columns of a weaker "
                             "and of a stronger reference model")
        from astuner.data.bots import BetaPassRateEstimator

        k = self.kwargs
        self.estimator = BetaPassRateEstimator(
            [feature(t, self.feature_keys[0]) for t in self.tasks], [feature(t, self.feature_keys[1]) for t in self.tasks],
            m=int(k.get("m", 16)), lamb=float(k.get("lamb", 0.2)), rho=float(k.get("rho", 0.2)),
            adaptive_rho=bool(k.get("adaptive_rho", False)))
        self.target = float(k.get("target_reward", 1.0))
        self.tau = float(k.get("tau", 1.0))
        self.do_sample = bool(k.get("do_sample", False))
        self.index = {t.task_id: i for i, t in enumerate(self.tasks)}

    def scores(self) -> np.ndarray:
        rng = np.random.default_rng(self.seed + self.cursor)
        return -np.abs(self.target - self.estimator.pass_rates(rng, self.do_sample))

    def next_batch(self, batch_size: int) -> list[Task]:
        from astuner.data.bots import select

        picked = select(self.scores(), batch_size, self.tau, np.random.default_rng(self.seed + self.cursor))
        self.cursor += len(picked)
        self.epoch = self.cursor // len(self.tasks)
        return [self.tasks[i] for i in picked]

    def position(self) -> int:
        return self.cursor

    def feedback(self, pass_rates: dict[str, float]) -> None:
        known = [(self.index[t], r) for t, r in pass_rates.items() if t in self.index]
        if known:
            self.estimator.update([i for i, _ in known], [r for _, r in known])

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "estimator": self.estimator.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.estimator.load_state_dict(state["estimator"])


SELECTORS = {"sequential": SequentialSelector, "shuffle": ShuffleSelector, "random": RandomSelector,
             "offline_easy2hard": OfflineEasy2HardSelector, "difficulty_based": DifficultyBasedSelector}


def build_selector(kind: str, tasks: Sequence[Task], seed: int, feature_keys: Sequence[str] = (),
                   kwargs: Optional[dict[str, Any]] = None) -> SequentialSelector:
    return SELECTORS[kind](tasks, seed, feature_keys, kwargs)
