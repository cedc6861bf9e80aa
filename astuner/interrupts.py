"""Ctrl-C: the first one asks the run to wind down (the CLI raises KeyboardInterrupt; the debug trainer
finishes its step and saves); the second one stops the process at once with the CLI's one line and exit
code 130 — no traceback, no dump of pending asyncio tasks — after giving the open trackers (`remember_closer`)
up to `GRACE_S` to write their last step. SIGTERM abandons the current step and winds the run down through
every `finally` (trackers closed, a never-stepped run folder marked, a Ray head stopped), exit 143; a second
SIGTERM stops it at once (on verl and Trinity, Ray's own SIGTERM handler, which their ray.init installs, does
the first part). A Ray head this run started is stopped by its own reaper process when this one is gone."""

from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143
SECOND_INTERRUPT = "astuner: error: interrupted twice; stopped at once"
SECOND_TERMINATE = "astuner: error: terminated twice; stopped at once"
GRACE_S = 5.0
_CLOSERS: list[Callable[[], None]] = []


def remember_closer(close: Callable[[], None]) -> None:
    """`close` (a tracker writer's) runs before a stop at once, so the tracker keeps its last step."""
    _CLOSERS.append(close)


def forget_closer(close: Callable[[], None]) -> None:
    if close in _CLOSERS:
        _CLOSERS.remove(close)


def stop_at_once(code: int = EXIT_INTERRUPTED) -> None:
    try:
        sys.stderr.write(f"\n{SECOND_INTERRUPT if code == EXIT_INTERRUPTED else SECOND_TERMINATE}\n")
        sys.stderr.flush()
        closers = list(_CLOSERS)
        if closers:  # in a thread of its own: a tracker that hangs cannot keep the process alive past GRACE_S
            worker = threading.Thread(target=lambda: [close() for close in closers], daemon=True)
            worker.start()
            worker.join(GRACE_S)
    finally:
        os._exit(code)


class Terminated(SystemExit):
    """SIGTERM: the run winds down through its `finally` blocks and the process exits with 143."""

    def __init__(self) -> None:
        super().__init__(EXIT_TERMINATED)


def on_sigterm(signum: int, frame: object) -> None:
    if getattr(on_sigterm, "seen", False):
        stop_at_once(EXIT_TERMINATED)
    on_sigterm.seen = True  # type: ignore[attr-defined]
    raise Terminated()


@contextmanager
def held_signals() -> Iterator[None]:
    """Ctrl-C and SIGTERM that arrive inside are handled when it ends, by the handlers that were in place: a
    step's records are written whole (metrics.jsonl, tensorboard and every tracker), or not at all."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[tuple[int, object]] = []
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    for signum in previous:
        signal.signal(signum, lambda got, frame: pending.append((got, frame)))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if handler is not None:
                signal.signal(signum, handler)
        for signum, frame in pending:
            handler = previous[signum]
            if callable(handler):
                handler(signum, frame)
            elif handler == signal.SIG_DFL:  # Python's default for each: what would have happened
                if signum == signal.SIGINT:
                    raise KeyboardInterrupt
                os.kill(os.getpid(), signum)
