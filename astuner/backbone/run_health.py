"""The failed episodes of a run on Ray (verl, Trinity), counted as the debug backbone counts them, and the tasks
whose rows none of their episodes got past.

Neither backbone stops on a workflow's failure: Trinity catches it, logs it and goes on; verl trains our padded
stand-in for the failed episode. Either way a run whose every episode fails would end with exit 0. So each episode
(our Trinity workflow, our verl agent loop) reports its outcome to one named Ray actor, `RunHealth`, started by the
driver on the driver's node:
- per step, against the step's episodes: when more than `rollout.max_error_rate` of them failed, the actor writes
  the reason into the run folder and stops the backbone's own actors (Trinity's explorer and trainer, verl's task
  runner); the driver then ends the run with that reason (exit 1). Trinity names the step of each episode; verl's
  steps run one after another, so there a step is the next `train_batch_size × num_repeat` training episodes
  (a validation: the validation set's episodes) after the step the run resumed from;
- per task (`row_problems`): the episodes that failed because the task's row lacks what the workflow or judge read.
  The actor keeps the one line naming the tasks none of whose episodes got past their row in the run folder (Trinity
  shuts its Ray connection down as it ends, and the actor with it); at the end the driver reads it (`finish`): a
  warning, or the run's error when no training episode got past its row.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any, Optional

from loguru import logger

from astuner.errors import DataError
from astuner.rollout.row_problems import LIMIT, RowProblems

ACTOR_NAME = "astuner_run_health"
FAILURE_FILE = "run_failure.txt"
ROWS_FILE = "row_problems.json"


class RunHealth:
    """Per step (a number for training; Trinity's evaluations "<step>/<taskset>"): episodes, failed episodes, the
    first error. Per task: the row problems (`RowProblems`)."""

    def __init__(self, backbone: str, expected: dict[str, int], max_error_rate: float, actors: list[str],
                 namespace: str, failure_file: str, first_step: int = 0):
        self.backbone, self.expected, self.max_error_rate = backbone, expected, max_error_rate
        self.actors, self.namespace, self.failure_file = actors, namespace, failure_file
        self.first_step = first_step
        self.steps: dict[str, list[Any]] = {}
        self.arrived: Counter = Counter()  # per mode: the episodes reported without a step
        self.reason: Optional[str] = None
        self.rows = RowProblems()
        self.trained_past_row = 0  # training episodes that got past their row
        self.written: Optional[tuple] = None  # what the row file holds

    def record(self, mode: str, step: Optional[str], failed: bool, error: Optional[str],
               task_id: Optional[str] = None, problem: Any = None) -> None:
        """One episode: its mode ("train" / "val"), its step (None: the next of the mode's in order), whether it
        failed, its error, its task and, when its row failed it, the problem (a `RowLacks`)."""
        where = f"{self.backbone}'s {mode} step {step}"
        if step is None:
            size = max(self.expected.get(mode, 1), 1)
            index = self.arrived[mode] // size + 1
            self.arrived[mode] += 1
            step = str(self.first_step + index) if mode == "train" else f"v{index}"
            where = (f"{self.backbone}'s train step {step}" if mode == "train" else
                     f"{self.backbone}'s validation {index} of this run")
        if task_id is not None:
            self.rows.record(str(task_id), problem)
            if mode == "train" and problem is None:
                self.trained_past_row += 1
            if self.rows.problems:
                self._write_rows()
        counts = self.steps.setdefault(f"{mode}:{step}", [0, 0, None, ""])
        counts[0] += 1
        if failed:
            counts[1] += 1
            if counts[2] is None:  # the first error, and where its whole text is
                counts[2], counts[3] = last_line(error), "" if problem is not None else " (tracebacks in the log)"
        expected = max(self.expected.get(mode, counts[0]), counts[0])
        if self.reason is None and counts[1] / expected > self.max_error_rate:
            head = (f"{counts[1]} of {expected} episodes of {where} failed ({counts[1] / expected:.0%} > "
                    f"astuner.rollout.max_error_rate {self.max_error_rate}); first error: ")
            room = max(LIMIT - len(head) - len(counts[3]), 60)
            first = counts[2] if len(counts[2]) <= room else counts[2][:room - 3] + "..."
            self.reason = head + first + counts[3]
            Path(self.failure_file).write_text(self.reason, encoding="utf-8")
            self._stop()

    def row_summary(self) -> tuple[Optional[str], bool]:
        """The line naming the tasks every episode of which failed on its row (None: none did), and whether no
        training episode got past its row."""
        return self.rows.summary(LIMIT - len(NO_STEP)), self.trained_past_row == 0

    def _write_rows(self) -> None:
        """The row line into the run folder when it changed (once per change, not per episode)."""
        summary, none_trained = found = self.row_summary()
        if found == self.written:
            return
        self.written = found
        path = Path(self.failure_file).with_name(ROWS_FILE)
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps({"summary": summary, "none_trained": none_trained}), encoding="utf-8")
        os.replace(partial, path)  # the driver never reads half a file

    def _stop(self) -> None:
        """The backbone's actors (Trinity's explorer and trainer, which would otherwise wait for experiences that
        never come; verl's task runner, and with it its workers)."""
        import ray

        for name in self.actors:
            try:
                ray.kill(ray.get_actor(name, namespace=self.namespace))
            except ValueError:  # not started (explore mode) or already gone
                pass


NO_STEP = "no step trained: "


def last_line(error: Optional[str]) -> str:
    lines = (error or "").strip().splitlines()
    return lines[-1] if lines else "unknown"


def start(backbone: str, run: Any, root: Path, n_val: int, actors: list[str], namespace: str,
          first_step: int = 0) -> Any:
    """The run's `RunHealth` actor, named in `namespace`, on this (the driver's) node so that its failure file
    lands in the run folder. The caller holds the handle for the run: the actor lives as long."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ro = run.astuner.rollout
    expected = {"train": run.astuner.data.train_batch_size * ro.num_repeat, "val": n_val * ro.val_kwargs.num_repeat}
    for name in (FAILURE_FILE, ROWS_FILE):  # a resumed run's earlier ones
        (root / name).unlink(missing_ok=True)
    node = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)
    return ray.remote(RunHealth).options(name=ACTOR_NAME, namespace=namespace, num_cpus=0,
                                         scheduling_strategy=node).remote(
        backbone, expected, ro.max_error_rate, actors, namespace, str(root / FAILURE_FILE), first_step)


_ACTORS: dict[tuple, Any] = {}  # (Ray job, namespace) -> the run's health actor


def report(mode: str, step: Optional[Any], episode: Any) -> None:
    """From an episode's process: its outcome (nothing outside Ray, or when the run has no health actor, e.g. a
    backbone started by hand)."""
    import ray

    if not ray.is_initialized():  # the workflow driven directly
        return
    context = ray.get_runtime_context()
    where = (context.get_job_id(), context.namespace)
    if where not in _ACTORS:  # one lookup per worker process and run, not one per episode
        try:
            _ACTORS[where] = ray.get_actor(ACTOR_NAME, namespace=context.namespace)
        except ValueError:
            return
    _ACTORS[where].record.remote(mode, None if step is None else str(step), bool(episode.failed), episode.error,
                        str(episode.task.task_id), episode.row_problem)


def failure(root: Path) -> Optional[str]:
    path = root / FAILURE_FILE
    return path.read_text(encoding="utf-8") if path.exists() else None


def finish(root: Path) -> None:
    """The run's end: the tasks none of whose episodes got past their row, in one line (a warning); the run's error
    when no training episode got past its row."""
    path = root / ROWS_FILE
    if not path.exists():
        return
    found = json.loads(path.read_text(encoding="utf-8"))
    if found["summary"] is None:
        return
    if found["none_trained"]:
        raise DataError(NO_STEP + found["summary"])
    logger.warning(found["summary"])
