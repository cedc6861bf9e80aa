"""The root cause of a vLLM engine that failed to start, for the run's one-line error.

When vLLM's engine core dies while starting (its CPU worker refusing the memory it was asked for, say), the
exception that reaches verl's trainer or Trinity's explorer only says "Engine core initialization failed.
See root cause above."; the cause itself is in vLLM's log, which the engine's processes write to the stdout
of the Ray actor that hosts them. Ray forwards those lines to the driver (`log_to_driver`, on in verl's and
our `ray.init`); `EngineLog` listens there for the run, on this node and on every node of a cluster, and
`root_cause` picks the latest exception line vLLM logged as an error that is not one of its wrappers.
"""

from __future__ import annotations

import collections
import re
import threading
from typing import Any, Optional

ANSI = re.compile(r"\x1b\[[0-9;]*m")  # Ray's colours in the messages it forwards
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)(\(\w+\))?: ")  # "KeyError: ..."


STARTUP_FAILED = "Engine core initialization failed"
# vLLM's own wrappers around the cause: what is raised in the parent once the child process died
WRAPPERS = ("Exception: WorkerProc initialization failed", f"RuntimeError: {STARTUP_FAILED}",
            "RuntimeError: Worker failed with error", "ray.exceptions.")
PREFIXES = re.compile(r"^(\(\w+ pid=\d+\)\s*)?((ERROR|WARNING|INFO|DEBUG) \d\d-\d\d \d\d:\d\d:\d\d \[[\w.]+:\d+\]\s*)?")
HANDLER = "astuner_engine_errors"


def root_cause(lines: list[str]) -> Optional[str]:
    """The latest exception line among `lines` (Ray's and vLLM's prefixes removed) that is not one of vLLM's or
    Ray's wrappers, preferring those vLLM logged as errors (`ERROR mm-dd hh:mm:ss [file:line]`); else the
    wrapper that carries a cause; None when there is none."""
    candidates, logged = [], []
    for raw in lines:
        text = ANSI.sub("", raw).strip()
        match = PREFIXES.match(text)
        line = text[match.end():].strip()
        if EXCEPTION_LINE.match(line):
            candidates.append(line)
            if (match.group(3) or "") == "ERROR":
                logged.append(line)
    for line in reversed(logged or candidates):
        if not line.startswith(WRAPPERS):
            return line
    for line in reversed(candidates):
        if not line.startswith(WRAPPERS):
            return line
    carrying = [line for line in candidates if line.startswith("RuntimeError: Worker failed with error")]
    return carrying[0] if carrying else None


class EngineLog:
    """Exception lines the run's Ray workers print, kept while the run lasts (a bounded buffer). Uses Ray's
    driver-side log dispatcher (a private API: without it, nothing is kept and the error stays vLLM's)."""

    def __init__(self, keep: int = 200):
        self.lines: collections.deque[str] = collections.deque(maxlen=keep)
        self.lock = threading.Lock()
        self.dispatcher: Any = None

    def _handle(self, data: dict[str, Any]) -> None:
        kept = [line for line in data.get("lines", []) if "Error" in line or "Exception" in line]
        if kept:
            with self.lock:
                self.lines.extend(kept)

    def __enter__(self) -> "EngineLog":
        try:
            from ray._private.ray_logging import global_worker_stdstream_dispatcher
        except ImportError:
            return self
        self.dispatcher = global_worker_stdstream_dispatcher
        self.dispatcher.add_handler(HANDLER, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.dispatcher is not None:
            self.dispatcher.remove_handler(HANDLER)

    def cause(self, wait_s: float = 3.0) -> Optional[str]:
        """The root cause seen so far; the log lines may arrive shortly after the exception, so wait for them."""
        import time

        deadline = time.monotonic() + wait_s
        while True:
            with self.lock:
                found = root_cause(list(self.lines))
            if found or time.monotonic() >= deadline:
                return found
            time.sleep(0.2)

    def explain(self, text: str) -> Optional[str]:
        """For a failure whose text says vLLM's engine did not start: the one-line reason, with its cause."""
        if STARTUP_FAILED not in text:
            return None
        cause = self.cause()
        return f"vLLM's engine failed to start: {cause or 'no cause in its log (see the Ray worker logs above)'}"
