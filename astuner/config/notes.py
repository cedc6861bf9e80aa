"""What the checks tell the user about a config before a run: notes, each one line, said at INFO, or at WARNING
when the run will do something the user may not have asked for (`WarningNote`)."""

from __future__ import annotations

from typing import Any


class WarningNote(str):
    """A note said at WARNING level: a seed file's Trinity schedule making a run off-policy, keys set that change
    nothing in the configuration."""


def say(note: str, logger: Any) -> None:
    """`note` in the run's log, at its level."""
    (logger.warning if isinstance(note, WarningNote) else logger.info)(note)


def shown(note: str) -> str:
    """`note` as a dry run prints it."""
    return f"WARNING: {note}" if isinstance(note, WarningNote) else note

