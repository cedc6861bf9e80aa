"""Experience sources for the debug backbone's learner: what a step trains on, as groups of samples, each stamped
with the policy version that generated it (`Sample.policy_version`) beside its behaviour log-probs (the engine's,
`Sample.logprobs`).

`RolloutSource` is the synchronous source (and the rollouts of the off-policy one, `pipeline.py`): per step, `data.train_batch_size` tasks from the task selector,
`rollout.num_repeat` episodes of each through the workflow and the judge on the engines' current weights, their
samples, then the experience pipeline's operators (`data_processor.experience_pipeline`). Validation rolls the
validation tasks out the same way, without training on them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from loguru import logger

from astuner.data.operators import apply_operators, selection_metrics
from astuner.rollout.manager import RolloutBatch


@dataclass
class StepExperience:
    tasks: list[Any]  # the step's tasks
    batch: RolloutBatch  # their episodes (the records: trajectories, token records)
    samples: list[Any]  # what the learner trains on: the episodes' samples after the operators
    metrics: dict[str, float]  # the rollouts', the selection's and the operators'
    rollout_s: float  # the rollouts' wall time
    epoch: int = 0  # the task selector's epoch when the step's tasks were drawn
    version: int = 0  # the weights that rolled them out (every sample's policy_version)
    drawn: tuple[int, int] = (0, 0)  # the selector's positions before and after the draw (`PromptLedger`)


class RolloutSource:
    def __init__(self, cfg: Any, manager: Any, selector: Any, run_async: Callable[[Any], Any], experiment: str,
                 version: Callable[[], int]):
        """`run_async` runs a coroutine on the run's event loop; `version()` is the learner's current version,
        the one the engines sample."""
        self.cfg, self.manager, self.selector = cfg, manager, selector
        self.run_async, self.experiment, self.version = run_async, experiment, version

    def collect(self, step: int) -> StepExperience:
        tasks, epoch, drawn = self.draw()
        return self.run_async(self.roll_out(step, tasks, epoch, self.version(), drawn=drawn))

    def draw(self) -> tuple[list[Any], int, tuple[int, int]]:
        """The next step's tasks from the selector, its epoch then, and its positions before and after."""
        start = self.selector.position()
        tasks = self.selector.next_batch(self.cfg.data.train_batch_size)
        return tasks, self.selector.epoch, (start, self.selector.position())

    async def roll_out(self, step: int, tasks: list[Any], epoch: int, version: int, manager: Any = None,
                       feedback: Optional[Callable[[dict[str, float]], None]] = None,
                       drawn: tuple[int, int] = (0, 0)) -> StepExperience:
        """Step `step`'s tasks rolled out (by `manager`, default this source's) on the engines' weights (`version`),
        then the operators; their feedback goes to `feedback` (default: the selector's, before the next step's
        tasks are drawn)."""
        t0 = time.perf_counter()
        batch = await (manager or self.manager).run(tasks, "train", tag=f"{self.experiment}:train:{step}",
                                                    draws=f"train:{step}")
        rollout_s = time.perf_counter() - t0
        for sample in batch.samples:
            sample.policy_version = version
        selection = selection_metrics(batch.samples)
        samples, operator_metrics = apply_operators(self.cfg.data_processor.experience_pipeline.operators,
                                                    batch.samples, feedback or self.selector.feedback)
        return StepExperience(tasks, batch, samples, {**batch.metrics, **selection, **operator_metrics}, rollout_s,
                              epoch, version, drawn)

    def validate(self, tasks: list[Any], step: int, label: Optional[str] = None) -> dict[str, float]:
        batch = self.run_async(self.manager.run(tasks, "val", tag=f"{self.experiment}:val:{step}", draws=f"val:{step}"))
        groups = batch.groups()
        out = {"val/reward_mean": batch.metrics["reward/mean"], "val/success_rate": batch.metrics["reward/success_rate"],
               "val/error_rate": batch.metrics["rollout/error_rate"]}
        k = self.cfg.rollout.val_kwargs.num_repeat
        if k > 1:
            out[f"val/pass@{k}"] = sum(any(e.is_success for e in g) for g in groups.values()) / max(len(groups), 1)
        logger.info(f"validation {label or f'at step {step}'}: reward {out['val/reward_mean']:.3f}, "
                    f"success {out['val/success_rate']:.3f} over {len(tasks)} tasks")
        return out


class PromptLedger:
    """What a run's trained steps drew from the task selector, across kills and resumes: each step's draw should
    begin where the last trained step's ended. A draw that begins later skipped prompts (`resume/prompts_lost`);
    one that begins earlier trains some again (`resume/prompts_replayed`). Checkpointed with the run, so the counts
    cover every session of it."""

    def __init__(self, state: Optional[dict[str, int]] = None):
        state = state or {}
        self.through = state.get("through", 0)  # where the last trained step's draw ended
        self.lost = state.get("lost", 0)
        self.replayed = state.get("replayed", 0)

    def trained(self, drawn: tuple[int, int]) -> dict[str, float]:
        start, end = drawn
        self.lost += max(0, start - self.through)
        self.replayed += max(0, min(end, self.through) - start)
        self.through = end
        return {"resume/prompts_lost": float(self.lost), "resume/prompts_replayed": float(self.replayed)}

    def state_dict(self) -> dict[str, int]:
        return {"through": self.through, "lost": self.lost, "replayed": self.replayed}
