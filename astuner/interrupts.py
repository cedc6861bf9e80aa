"""Ctrl-C: the first one asks the run to wind down (the CLI raises KeyboardInterrupt; the debug trainer
finishes its step and saves); the second one stops the process at once with the CLI's one line and exit
code 130 — no traceback, no dump of pending asyncio tasks. A Ray head this run started is stopped by its
own reaper process when this one is gone."""

from __future__ import annotations

import os
import sys

EXIT_INTERRUPTED = 130
SECOND_INTERRUPT = "astuner: error: interrupted twice; stopped at once"


def stop_at_once() -> None:
    try:
        sys.stderr.write(f"\n{SECOND_INTERRUPT}\n")
        sys.stderr.flush()
    finally:
        os._exit(EXIT_INTERRUPTED)
