"""Keep the garbage collector's full passes off the rollout's event loop.

A rollout allocates many small objects (messages, records, agent state), so the collector runs often, and now and
then a full pass walks every object the process holds: the model, the tokenizer's tables, every imported module.
That pass stops the event loop that serves all episodes: a rollout of bench/rollout_efficiency.py took 1233 ms
instead of 700, 531 of them in one such pass (in a process holding just torch, transformers, agentscope and a
tokenizer; a trainer holds far more).

While rollouts run, the objects that existed before the first of them are frozen (`gc.freeze`): collections
walk only what the rollouts made. When the last running rollout ends they are unfrozen, back in the oldest
generation, so garbage among them is still collected afterwards, between rollouts. Nothing is ever kept for good.
A process that froze objects itself (`gc.freeze()` after start-up, before forking) is left as it is.
"""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Iterator

_lock = threading.Lock()
_running = 0
_froze = False  # whether the freeze in place is this module's (to undo when the last rollout ends)


@contextmanager
def objects_frozen() -> Iterator[None]:
    """Freeze the collector's current objects for the duration (nested and concurrent uses share one freeze)."""
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
                gc.unfreeze()
                _froze = False
