"""The off-policy experience source: rollouts keep running while the learner trains (`trainer_common.off_policy`).

A producer on the run's event loop (its own thread) starts the steps in order, each on an engine of its own from a
pool of `bound + 1` (each over a copy of the policy), so up to `bound + 1` steps are rolled out at once: a step's
slow episodes no longer hold the next step's. The learner (the main thread) trains each step when it is there,
then publishes its new weights (a snapshot of the trainable ones). An engine takes weights at version boundaries
only, when a step starts on it:

- `wait`: step t is rolled out on exactly version `schedule.version_for(t)`; the producer waits for it when the
  learner is behind. Which weights roll out which step is a schedule, not a race, and every episode samples from
  a seed of its own (the step and its place in it): the run is reproducible, and its checkpoints resume it exactly
  (below).
- `drop`: each step takes the newest version published when it starts (fresher than `wait`'s schedule when the
  learner keeps up); a step starts only while that version is within `bound` of the learner's version that will
  train it (`step - 1`), so the producer runs at most `bound + 1` steps ahead of the learner's *published* weights
  and waits for newer ones otherwise. A step whose samples would still lag more than `bound` is dropped whole and
  counted (a guard: the rule above keeps it from happening). Timing-dependent, not reproducible.

The task selector is drawn in step order; the experience operators' feedback to it (pass rates) reaches it in step
order too, that of step j just before step j + bound + 1 is drawn (by then step j has finished): in a reproducible
place, whatever the timing.

Checkpoint `s` holds, beside the learner's state, what the steps after `s` need and the learner no longer has:
the snapshots of the versions they are rolled out on (older than `s`), the selector's state before step s + 1 was
drawn and the feedback not yet given to it. A resumed run rolls those steps out again, in-flight episodes
included, and gets what the uninterrupted run got.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from typing import Any, Callable, Optional

from loguru import logger

from astuner.config.sync_schedule import SyncSchedule
from astuner.backbone.debug.experience import RolloutSource, StepExperience


class PipelinedSource:
    def __init__(self, rollouts: RolloutSource, pool: list[tuple[Any, Any]], schedule: SyncSchedule,
                 loop: asyncio.AbstractEventLoop, first_step: int, total_steps: int, seed: int):
        """`rollouts`: draws the tasks and rolls a step out; `pool`: (engine, its rollout manager) pairs, one per
        step that may be in flight; `loop`: the event loop running in its own thread; `first_step`: the first step
        to roll out; `seed`: the rollouts' (each step samples from `seed` and its number)."""
        self.rollouts, self.schedule, self.loop, self.seed = rollouts, schedule, loop, seed
        self.pool = list(pool)
        self.total_steps = total_steps
        self.next_step = first_step  # the producer's next step to start
        self.snapshots: dict[int, dict[str, Any]] = {}  # version -> trainable weights, on the CPU
        self.ready: dict[int, StepExperience] = {}  # rolled out, not yet trained
        self.finished: set[int] = set(range(1, first_step))  # steps whose rollouts are over
        self.rates: dict[int, list[dict[str, float]]] = {}  # step -> its operators' feedback to the selector
        self.fed = first_step - 1 - schedule.bound - 1  # the last step whose feedback the selector has
        self.engine_version: dict[int, int] = {}  # id(engine) -> the version it holds
        self.before: dict[int, dict[str, Any]] = {}  # step -> the selector's state just before it was drawn
        self.trained = first_step - 1  # the learner's last step
        self.failure: Optional[BaseException] = None
        self.stopping = False
        self.cond = threading.Condition()
        self._wake: Optional[asyncio.Event] = None
        self._task: Optional[Any] = None
        self.done = threading.Event()  # the producer's coroutine has returned
        self.waits: dict[int, float] = {}  # step -> seconds the producer waited for its weights

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
        """Step `step`'s experience (waiting for the producer), its samples dropped when they lag beyond the bound
        (`drop`), with the step's off-policy metrics."""
        t0 = time.perf_counter()
        with self.cond:
            while step not in self.ready and self.failure is None:
                self.cond.wait(timeout=1.0)
            if step not in self.ready:
                raise self.failure  # type: ignore[misc]
            experience = self.ready.pop(step)
            self.trained = step
        self._notify()  # room for the producer (drop)
        waited = time.perf_counter() - t0
        learner_version = step - 1
        lag = learner_version - experience.version
        dropped = 0
        if lag > self.schedule.bound:  # drop: the whole step's samples are of one version
            dropped = len(experience.samples)
            experience.samples = []
        lags = [learner_version - s.policy_version for s in experience.samples]
        metrics = {"off_policy/version_lag": float(lag), "off_policy/learner_wait_s": waited,
                   "off_policy/rollout_wait_s": self.waits.pop(step, 0.0),
                   "off_policy/dropped_samples": float(dropped),
                   "off_policy/dropped_groups": float(len({s.task_id for s in experience.batch.samples})
                                                      if dropped else 0),
                   "off_policy/lag_mean": statistics.fmean(lags) if lags else 0.0,
                   "off_policy/lag_max": float(max(lags, default=0))}
        for value in range(self.schedule.bound + 1):
            metrics[f"off_policy/lag_{value}"] = float(sum(1 for x in lags if x == value))  # the histogram
        if dropped:
            logger.warning(f"step {step}: its rollouts are {lag} versions old (> max_staleness "
                           f"{self.schedule.bound}): {dropped} samples dropped")
        experience.metrics = {**experience.metrics, **metrics}
        return experience

    def state(self, step: int) -> dict[str, Any]:
        """What checkpoint `step` holds for the steps after it (see the module's docstring)."""
        wait = self.schedule.on_stale == "wait"
        needed = {self.schedule.version_for(t) for t in range(step + 1, self.total_steps + 1)} if wait else set()
        with self.cond:
            while step + 1 not in self.before and self.failure is None and step < self.total_steps:
                self.cond.wait(timeout=1.0)
            if self.failure is not None:
                raise self.failure
            before = self.before.get(step + 1)
            return {"snapshots": {v: self.snapshots[v] for v in sorted(needed) if v < step},
                    "selector": None if before is None else before["selector"],
                    "fed": None if before is None else before["fed"],
                    "feedback": {j: list(self.rates.get(j, [])) for j in range(before["fed"] + 1, step + 1)}
                    if before is not None else {}}

    def resume_at(self, step: int, saved: Optional[dict[str, Any]]) -> None:
        """A run resumed from checkpoint `step`: the snapshots of older versions its next steps need, the selector
        as it was before step + 1 was drawn, the feedback it had not been given then (`saved`: None from a
        checkpoint written before the producer started)."""
        self.next_step, self.trained = step + 1, step
        self.finished = set(range(1, step + 1))
        self.fed = step - self.schedule.bound - 1
        if saved is None:
            return
        self.snapshots.update(saved["snapshots"])
        if saved["selector"] is not None:
            self.rollouts.selector.load_state_dict(saved["selector"])
            self.fed = saved["fed"]
        self.rates = {int(j): list(rates) for j, rates in saved["feedback"].items()}

    def stop(self) -> None:
        """The producer stops (its episodes in flight are cancelled: a resumed run rolls their step out again)."""
        self.stopping = True
        self._notify()
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self._task is not None:
            self.done.wait(timeout=60)

    # -- the producer's side (the event loop's thread) -------------------------------------------------------
    def _notify(self) -> None:
        with self.cond:
            self.cond.notify_all()
        if self._wake is not None:
            self.loop.call_soon_threadsafe(self._wake.set)

    def _prune(self) -> None:
        """Keep the snapshots a step not yet trained may still need."""
        keep = self.schedule.version_for(self.trained + 1) if self.schedule.on_stale == "wait" \
            else max(self.snapshots)
        for version in [v for v in self.snapshots if v < keep]:
            del self.snapshots[version]

    async def _until(self, ready: Callable[[], Any]) -> Any:
        """Wait (on the loop) until `ready()` (read under the lock) gives something other than None."""
        while True:
            with self.cond:
                if self.stopping:
                    raise asyncio.CancelledError
                value = ready()
            if value is not None:
                return value
            self._wake.clear()
            await self._wake.wait()

    def _version_for(self, step: int) -> Optional[int]:
        if self.schedule.on_stale == "wait":
            version = self.schedule.version_for(step)
            return version if version in self.snapshots else None
        # the newest weights, if the step's samples stay within the bound when trained (at version step - 1) on
        # them: a producer ahead of the learner's *published* weights waits, never rolls out a step to drop it
        if not self.snapshots or step - 1 - max(self.snapshots) > self.schedule.bound:
            return None
        return max(self.snapshots)

    def _give_feedback(self, step: int) -> bool:
        """Before step `step` is drawn: the feedback of every step up to step - bound - 1, in order (False while
        one of them is still rolling out)."""
        while self.fed < step - self.schedule.bound - 1:
            if self.fed + 1 > 0 and self.fed + 1 not in self.finished:
                return False
            self.fed += 1
            for rates in self.rates.get(self.fed, []):
                self.rollouts.selector.feedback(rates)
        return True

    async def _produce(self) -> None:
        self._wake = asyncio.Event()
        free = asyncio.Queue()
        for pair in self.pool:
            free.put_nowait(pair)
        running: set[asyncio.Task] = set()
        try:
            while self.next_step <= self.total_steps:
                step = self.next_step
                t0 = time.perf_counter()
                version = await self._until(lambda: self._version_for(step))
                await self._until(lambda: True if self._give_feedback(step) else None)
                if time.perf_counter() - t0 > 0.001:
                    self.waits[step] = time.perf_counter() - t0
                engine, manager = await free.get()
                with self.cond:
                    self.before[step] = {"selector": self.rollouts.selector.state_dict(), "fed": self.fed}
                    for old in [s for s in self.before if s <= self.trained]:
                        del self.before[old]
                    kept = min([b["fed"] for b in self.before.values()] + [self.fed])  # what a checkpoint saves
                    for old in [j for j in self.rates if j <= kept]:
                        del self.rates[old]
                    self.cond.notify_all()
                    if self.schedule.on_stale != "wait":  # newer weights may have come (and the older gone) meanwhile
                        version = max(self.snapshots)
                    weights = self.snapshots[version]
                tasks, epoch, drawn = self.rollouts.draw()
                task = asyncio.ensure_future(self._roll(step, tasks, epoch, drawn, version, weights, engine, manager,
                                                        free))
                running.add(task)
                task.add_done_callback(running.discard)
                self.next_step += 1
            if running:
                await asyncio.gather(*running)
        except asyncio.CancelledError:
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
        except BaseException as exc:  # noqa: BLE001 - handed to the learner, which raises it
            self._fail(exc)
        finally:
            self.done.set()

    async def _roll(self, step: int, tasks: list[Any], epoch: int, drawn: tuple[int, int], version: int,
                    weights: dict[str, Any], engine: Any, manager: Any, free: asyncio.Queue) -> None:
        try:
            if self.engine_version.get(id(engine)) != version:
                await engine.update_weights(weights, strict=False)
                self.engine_version[id(engine)] = version
            engine.generator.manual_seed(step_seed(self.seed, step))
            rates: list[dict[str, float]] = []
            experience = await self.rollouts.roll_out(step, tasks, epoch, version, manager, rates.append, drawn)
            with self.cond:
                self.ready[step] = experience
                self.rates[step] = rates
                self.finished.add(step)
                self.cond.notify_all()
            free.put_nowait((engine, manager))
            self._wake.set()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - handed to the learner, which raises it
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        with self.cond:
            if self.failure is None:
                self.failure = exc
            self.stopping = True
            self.cond.notify_all()


def step_seed(seed: int, step: int) -> int:
    """The sampling seed of a step's rollouts: its own, whatever ran before it on that engine."""
    return (seed * 1_000_003 + step) % (2 ** 63)


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
