"""Failed episodes of a Trinity run, counted per explorer step, and the run stopped as the debug backbone
stops it: when more than `rollout.max_error_rate` of a step's episodes failed.

Trinity catches a workflow's failure, logs it and goes on (a run whose every episode fails ends with
exit 0), and its step metrics leave failed runs out. So each `AstunerTrinityWorkflow` reports its
episode's outcome to one named Ray actor (`RunHealth`, started by the driver on the driver's node). When a
step's failures pass the limit, the actor writes the reason into the run folder and stops Trinity's
explorer and trainer; the driver then ends the run with that reason (exit code 1).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional

from astuner.backbone.engine_errors import EXCEPTION_LINE

ACTOR_NAME = "astuner_run_health"
FAILURE_FILE = "trinity_failure.txt"


class RunHealth:
    """Per step (Trinity's batch id: a number for training, "<step>/<taskset>" for evaluation): episodes,
    failed episodes, the first error."""

    def __init__(self, expected: dict[str, int], max_error_rate: float, actors: list[str], namespace: str,
                 failure_file: str):
        self.expected, self.max_error_rate = expected, max_error_rate
        self.actors, self.namespace, self.failure_file = actors, namespace, failure_file
        self.steps: dict[str, list[Any]] = {}
        self.reason: Optional[str] = None

    def record(self, mode: str, step: str, failed: bool, error: Optional[str]) -> None:
        counts = self.steps.setdefault(str(step), [0, 0, None])
        counts[0] += 1
        if failed:
            counts[1] += 1
            counts[2] = counts[2] or last_line(error)
        expected = max(self.expected.get(mode, counts[0]), counts[0])
        if self.reason is None and counts[1] / expected > self.max_error_rate:
            self.reason = (f"{counts[1]} of {expected} episodes of Trinity's {mode} step {step} failed "
                           f"({counts[1] / expected:.0%} > astuner.rollout.max_error_rate {self.max_error_rate}); "
                           f"first error: {counts[2]} (tracebacks in the log)")
            Path(self.failure_file).write_text(self.reason, encoding="utf-8")
            self._stop_trinity()

    def _stop_trinity(self) -> None:
        """Trinity's explorer (and trainer, which would otherwise wait for experiences that never come)."""
        import ray

        for name in self.actors:
            try:
                ray.kill(ray.get_actor(name, namespace=self.namespace))
            except ValueError:  # not started (explore mode) or already gone
                pass


def last_line(error: Optional[str]) -> str:
    lines = (error or "").strip().splitlines()
    return lines[-1] if lines else "unknown"


def start(config: Any, run: Any, root: Path, n_val: int) -> Any:
    """The run's `RunHealth` actor, named in Trinity's namespace, on this (the driver's) node so that its
    failure file lands in the run folder. The caller holds the handle for the run: the actor lives as long."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ro = run.astuner.rollout
    expected = {"train": run.astuner.data.train_batch_size * ro.num_repeat, "val": n_val * ro.val_kwargs.num_repeat}
    (root / FAILURE_FILE).unlink(missing_ok=True)
    node = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)
    return ray.remote(RunHealth).options(name=ACTOR_NAME, namespace=config.ray_namespace, num_cpus=0,
                                         scheduling_strategy=node).remote(
        expected, ro.max_error_rate, [config.explorer.name, config.trainer.name], config.ray_namespace,
        str(root / FAILURE_FILE))


def report(namespace: Optional[str], mode: str, step: Any, failed: bool, error: Optional[str]) -> None:
    """From a workflow: one episode's outcome (nothing when the run has no health actor, e.g. Trinity
    started by hand)."""
    import ray

    try:
        actor = ray.get_actor(ACTOR_NAME, namespace=namespace)
    except ValueError:
        return
    actor.record.remote(mode, str(step), failed, error)


def failure(root: Path) -> Optional[str]:
    path = root / FAILURE_FILE
    return path.read_text(encoding="utf-8") if path.exists() else None


# Trinity's explorer and trainer catch an exception in their loops, log it ("Error in Explorer:" /
# "Error in Trainer:", then the traceback, each line under the same logger tag) and stop as if done.
CAUGHT = {"explorer": "Error in Explorer:", "trainer": "Error in Trainer:"}


def caught_error(log_dir: Path) -> Optional[str]:
    """The first of Trinity's explorer / trainer that stopped on an exception, with the exception's line,
    from Trinity's own logs (`<checkpoint job dir>/log/<role>.log`); None when neither did."""
    for role in ("trainer", "explorer"):
        path = Path(log_dir) / f"{role}.log"
        if not path.exists():
            continue
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        starts = [i for i, line in enumerate(lines) if CAUGHT[role] in line]
        if not starts:
            continue
        first = lines[starts[0]]
        tag = first[:first.index(CAUGHT[role])]
        tag = re.sub(r"\d\d:\d\d:\d\d", "", tag).strip()  # "ERROR 11-22 [trainer.py:156]" without the time
        block = [line.split("] ", 1)[-1] for line in lines[starts[0]:] if tag.split()[-1] in line]
        raised = [line.strip() for line in block if EXCEPTION_LINE.match(line.strip())]
        return f"Trinity's {role} stopped on an error: {raised[-1] if raised else first.strip()}"
    return None
