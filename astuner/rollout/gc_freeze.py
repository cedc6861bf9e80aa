"""Keep the garbage collector's full passes off the rollout's event loop, and leave nothing the rollouts made
waiting for one.

A rollout allocates many small objects (messages, records, agent state), so the collector runs often, and now and
then a full pass walks every object the process holds: the model, the tokenizer's tables, every imported module.
That pass stops the event loop that serves all episodes: a rollout of bench/rollout_efficiency.py took 1233 ms
instead of 700, 531 of them in one such pass (in a process holding just torch, transformers, agentscope and a
tokenizer; a trainer holds far more).

While rollouts run, the objects that existed before the first of them are frozen (`gc.freeze`): collections
walk only what the rollouts made. When the last running rollout ends, what the rollouts made is collected once
(`gc.collect()` with the freeze still in place walks only those objects: about 10-30 ms a step of the tiny demo's
128 episodes, against the full pass above), then the frozen objects are unfrozen, back in the oldest generation.
That collection is what frees an episode's garbage held in reference cycles: an `openai.AsyncOpenAI` or
`httpx.AsyncClient` an agent opened and never closed keeps its socket until the collector frees it, and without
it such clients waited, in the oldest generation, for a full pass that came once in many steps (the tiny demo's
agent written that way ran out of descriptors at step 4 under `ulimit -n 1024`). `collect_rollout_garbage()`
runs the same collection while rollouts run (astuner.rollout.descriptors does when descriptors run short).
A process that froze objects itself (`gc.freeze()` after start-up, before forking) is left as it is, and its
rollouts' garbage to its own collections.
"""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Iterator, Optional

_lock = threading.Lock()
_running = 0
_froze = False  # whether the freeze in place is this module's (to undo when the last rollout ends)


@contextmanager
def objects_frozen() -> Iterator[None]:
    """Freeze the collector's current objects for the duration (nested and concurrent uses share one freeze); when
    the last use ends, collect what was made meanwhile, then unfreeze."""
    global _running, _froze
    with _lock:
        _running += 1
        if _running == 1 and gc.get_freeze_count() == 0:
            gc.freeze()
            _froze = True
    try:
        yield
    finally:
        with _lock:
            _running -= 1
            if _running == 0 and _froze:
                try:
                    gc.collect()  # only the rollouts' objects: the rest is frozen
                finally:
                    gc.unfreeze()
                    _froze = False


def collect_rollout_garbage() -> Optional[int]:
    """While this module's freeze is in place, collect the objects made since (what the rollouts made; the
    objects it frees); None when no freeze of this module's is in place (a collection would walk everything)."""
    with _lock:
        if not _froze:
            return None
        return gc.collect()
