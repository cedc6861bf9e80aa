"""Which episode (and which agent in it) a gateway request belongs to: one secret key per episode and agent.

A key is issued by `ModelTuner.as_openai_base_url()` (or for the episode's task when the gateway is on) and
expires when the episode ends (its recorder closes); a request with a missing, unknown or expired key is
answered 401 and reaches neither the engine nor the records. `on_expire` (the gateway's) is told which key expired,
so that the connections that key's requests came on can be closed.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional

PREFIX = "astuner-ep-"


@dataclass(frozen=True)
class Lease:
    tuner: Any  # the episode's ModelTuner
    agent: str  # the agent name its calls are recorded under


class KeyRing:
    def __init__(self) -> None:
        self._leases: dict[str, Lease] = {}
        self._issued: dict[tuple[int, str], str] = {}  # (recorder id, agent) -> key: one key per episode and agent
        self._lock = threading.Lock()
        self.on_expire: Optional[Callable[[str], None]] = None  # called with each key as it expires

    def issue(self, tuner: Any, agent: str) -> str:
        recorder = tuner.recorder
        if recorder.closed:
            raise RuntimeError("the episode is over; no gateway key is issued for it")
        slot = (id(recorder), agent)
        with self._lock:
            found = self._issued.get(slot)
            if found is not None:
                return found
            key = PREFIX + secrets.token_urlsafe(24)
            self._leases[key] = Lease(tuner, agent)
            self._issued[slot] = key
        recorder.on_close.append(lambda: self._expire(key, slot))
        return key

    def lookup(self, key: Optional[str]) -> Optional[Lease]:
        """The lease of a live key; None for a missing, unknown or expired one."""
        lease = self._leases.get(key) if key else None
        if lease is None or lease.tuner.recorder.closed:
            return None
        return lease

    def _expire(self, key: str, slot: tuple[int, str]) -> None:
        with self._lock:
            self._leases.pop(key, None)
            self._issued.pop(slot, None)
        if self.on_expire is not None:
            self.on_expire(key)

    def __len__(self) -> int:
        return len(self._leases)
