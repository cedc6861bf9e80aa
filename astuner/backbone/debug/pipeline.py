"""The off-policy experience source: rollouts keep running while the learner trains (`trainer_common.off_policy`).

A producer on the run's event loop (its own thread) rolls the steps out one after another on an engine of its
own, over a copy of the policy's weights; the learner (the main thread) trains each step when it is there, then
publishes its new weights (a snapshot of the trainable ones). The producer's engine takes weights at version
boundaries only, between two steps' rollouts:

- `wait`: step t is rolled out on exactly version `schedule.version_for(t)`; the producer waits for it when the
  learner is behind. Which weights roll out which step is a schedule, not a race: the run is reproducible, and
  its checkpoints resume it exactly (below).
- `drop`: the producer never waits for weights: each step takes the newest version published, with at most
  `bound + 1` steps rolled out ahead of the learner; samples that lag more than `bound` versions when trained are
  dropped, whole groups (a GRPO group's advantages need all of it), and counted. Faster, timing-dependent.

Checkpoint `s` holds, beside the learner's state, what the steps after `s` need and the learner no longer has:
the snapshots of the versions they are rolled out on (older than `s`), and the producer's state after step `s`
(the task selector's, the producer engine's sampler, the process's RNGs). A resumed run rolls those steps out
again, in-flight episodes included, and gets what the uninterrupted run got.
"""

from __future__ import annotations

import asyncio
import collections
import statistics
import threading
import time
from typing import Any, Callable, Optional

from loguru import logger

from astuner.algorithm.sync_schedule import SyncSchedule
from astuner.backbone.debug.checkpoint import restore_rng, rng_state
from astuner.backbone.debug.experience import RolloutSource, StepExperience


class PipelinedSource:
    def __init__(self, rollouts: RolloutSource, engine: Any, schedule: SyncSchedule, loop: asyncio.AbstractEventLoop,
                 first_step: int, total_steps: int):
        """`rollouts`: the producer's (its manager samples `engine`, which holds no other policy's module);
        `loop`: the event loop running in its own thread; `first_step`: the first step to roll out."""
        self.rollouts, self.engine, self.schedule, self.loop = rollouts, engine, schedule, loop
        self.total_steps = total_steps
        self.next_step = first_step  # the producer's next step
        self.engine_version: Optional[int] = None  # the weights the producer's engine holds
        self.snapshots: dict[int, dict[str, Any]] = {}  # version -> trainable weights, on the CPU
        self.ready: dict[int, StepExperience] = {}  # rolled out, not yet trained
        self.after: dict[int, dict[str, Any]] = {}  # step -> the producer's state once it was rolled out
        self.trained = first_step - 1  # the learner's last step
        self.failure: Optional[BaseException] = None
        self.stopping = False
        self.cond = threading.Condition()
        self._wake: Optional[asyncio.Event] = None
        self._task: Optional[Any] = None
        self.waits: collections.Counter = collections.Counter()  # step -> seconds the producer waited for weights

    # -- the learner's side (main thread) -------------------------------------------------------------------
    def publish(self, version: int, weights: dict[str, Any]) -> None:
        """The learner's weights after `version` updates (version 0: the initial ones)."""
        with self.cond:
            self.snapshots[version] = weights
            self._prune()
        self._notify()

    def start(self) -> None:
        self._task = asyncio.run_coroutine_threadsafe(self._produce(), self.loop)

    def collect(self, step: int) -> StepExperience:
        """Step `step`'s experience (waiting for the producer), with samples lagging beyond the bound dropped (under
        `drop`) and the step's off-policy metrics."""
        t0 = time.perf_counter()
        with self.cond:
            while step not in self.ready and self.failure is None:
                self.cond.wait(timeout=1.0)
            if step not in self.ready:
                raise self.failure  # type: ignore[misc]
            experience = self.ready.pop(step)
            self.trained = step
        self._notify()  # room for the producer (drop) or nothing to do (wait)
        waited = time.perf_counter() - t0
        learner_version = step - 1
        lag = learner_version - experience.version
        dropped = 0
        if lag > self.schedule.bound:  # drop: the whole step's samples are of one version
            dropped = len(experience.samples)
            experience.samples = []
        groups = len({s.task_id for s in experience.samples})
        lags = [learner_version - s.policy_version for s in experience.samples]
        metrics = {"off_policy/version_lag": float(lag), "off_policy/learner_wait_s": waited,
                   "off_policy/rollout_wait_s": float(self.waits.pop(step, 0.0)),
                   "off_policy/dropped_samples": float(dropped),
                   "off_policy/dropped_groups": float(len({s.task_id for s in experience.batch.samples})
                                                      if dropped else 0),
                   "off_policy/lag_mean": statistics.fmean(lags) if lags else 0.0,
                   "off_policy/lag_max": float(max(lags, default=0)), "off_policy/groups": float(groups)}
        for value in range(self.schedule.bound + 2 if self.schedule.on_stale == "drop" else self.schedule.bound + 1):
            metrics[f"off_policy/lag_{value}"] = float(sum(1 for x in lags if x == value))  # the histogram
        if dropped:
            logger.warning(f"step {step}: its rollouts are {lag} versions old (> max_staleness "
                           f"{self.schedule.bound}): {dropped} samples dropped")
        experience.metrics = {**experience.metrics, **metrics}
        return experience

    def state(self, step: int) -> dict[str, Any]:
        """What checkpoint `step` holds for the steps after it (see the module's docstring)."""
        needed = sorted({self.schedule.version_for(t) for t in range(step + 1, self.total_steps + 1)
                         if self.schedule.version_for(t) < step} if self.schedule.on_stale == "wait" else set())
        with self.cond:
            while step not in self.after and self.failure is None and step > 0:
                self.cond.wait(timeout=1.0)
            if self.failure is not None:
                raise self.failure
            return {"snapshots": {v: self.snapshots[v] for v in needed}, "producer": self.after.get(step)}

    def restore(self, saved: dict[str, Any]) -> None:
        """A resumed run: the snapshots of older versions its next steps need, the producer's state."""
        self.snapshots.update(saved["snapshots"])
        producer = saved.get("producer")
        if producer is not None:
            self.rollouts.selector.load_state_dict(producer["selector"])
            restore_rng(producer["rng"], self.engine)

    def stop(self) -> None:
        """The producer stops (its episodes in flight are cancelled: a resumed run rolls their step out again)."""
        self.stopping = True
        self._notify()
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                self._task.result(timeout=60)
            except BaseException:  # noqa: BLE001 - cancelled, or its failure was handed to collect() already
                pass

    # -- the producer's side (the event loop's thread) -------------------------------------------------------
    def _notify(self) -> None:
        with self.cond:
            self.cond.notify_all()
        if self._wake is not None:
            self.loop.call_soon_threadsafe(self._wake.set)

    def _prune(self) -> None:
        """Keep the snapshots a step not yet trained may still need."""
        if self.schedule.on_stale == "wait":
            keep = self.schedule.version_for(self.trained + 1)
        else:
            keep = max(self.snapshots)
        for version in [v for v in self.snapshots if v < keep]:
            del self.snapshots[version]

    async def _weights_for(self, step: int) -> int:
        """The version step `step` is rolled out on, once there (waiting is counted)."""
        t0 = time.perf_counter()
        while True:
            with self.cond:
                if self.stopping:
                    raise asyncio.CancelledError
                if self.schedule.on_stale == "wait":
                    version = self.schedule.version_for(step)
                    ok = version in self.snapshots
                else:
                    version = max(self.snapshots, default=-1)
                    ok = version >= 0 and step - self.trained <= self.schedule.bound + 1
            if ok:
                break
            self._wake.clear()
            await self._wake.wait()
        waited = time.perf_counter() - t0
        if waited > 0.001:
            self.waits[step] += waited
        return version

    async def _produce(self) -> None:
        self._wake = asyncio.Event()
        try:
            while self.next_step <= self.total_steps and not self.stopping:
                step = self.next_step
                version = await self._weights_for(step)
                if version != self.engine_version:
                    with self.cond:
                        weights = self.snapshots[version]
                    await self.engine.update_weights(weights, strict=False)
                    self.engine_version = version
                experience = await self.rollouts.roll_out(step, version)
                state = {"selector": self.rollouts.selector.state_dict(), "rng": rng_state(self.engine)}
                with self.cond:
                    self.ready[step] = experience
                    self.after[step] = state
                    for old in [s for s in self.after if s < self.trained]:
                        del self.after[old]
                    self.cond.notify_all()
                self.next_step += 1
        except asyncio.CancelledError:
            pass
        except BaseException as exc:  # noqa: BLE001 - handed to the learner, which raises it
            with self.cond:
                self.failure = exc
                self.cond.notify_all()


def weight_snapshot(model: Any) -> dict[str, Any]:
    """The trainable weights of `model`, copied to the CPU: what a producer's engine loads (strict=False)."""
    return {name: param.detach().to("cpu", copy=True) for name, param in model.named_parameters()
            if param.requires_grad}


def producer_engine(cfg: Any, tokenizer: Any, model: Any, model_path: str) -> Any:
    """An hf engine over a frozen copy of `model` (the learner keeps training the original)."""
    import copy

    from astuner.model.engines.factory import build_engine

    twin = copy.deepcopy(model)
    twin.requires_grad_(False)
    twin.eval()
    return build_engine(cfg, tokenizer, model=twin, model_path=model_path)


def run_forever(loop: asyncio.AbstractEventLoop) -> threading.Thread:
    """`loop` running in a thread of its own (the rollouts' thread)."""
    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_forever()

    thread = threading.Thread(target=serve, name="astuner-rollouts", daemon=True)
    thread.start()
    return thread


def threadsafe_await(loop: asyncio.AbstractEventLoop) -> Callable[[Any], Any]:
    return lambda coroutine: asyncio.run_coroutine_threadsafe(coroutine, loop).result()
