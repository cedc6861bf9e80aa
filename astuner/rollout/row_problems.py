"""Rows the workflow cannot use. An episode whose workflow or judge read what its task's row does not hold (a
field, the query, the reference answer: `astuner.schema.task.RowLacks`) fails with that one line, said once per
task rather than as a traceback per episode; the run counts the tasks none of whose episodes got past their row
and names them at its end (`RowProblems.summary`)."""

from __future__ import annotations

from collections import Counter
from typing import Any, Optional, Sequence

from astuner.schema.task import RowLacks

LIMIT = 300  # a line's length


def row_problem(exc: BaseException) -> Optional[RowLacks]:
    """The RowLacks behind `exc`: itself, or what it was raised from or while handling (a workflow that wraps it)."""
    seen: set[int] = set()
    current: Optional[BaseException] = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, RowLacks):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def one_line(problem: RowLacks, suffix: str) -> str:
    """The problem's message and `suffix`, within LIMIT characters (the message cut, the suffix kept)."""
    text = " ".join(str(problem).split())
    room = LIMIT - len(suffix)
    return (text if len(text) <= room else text[:room - 3] + "...") + suffix


class RowProblems:
    """Per task: the first row problem its episodes met, and how many of its episodes did and did not fail on it."""

    def __init__(self) -> None:
        self.problems: dict[str, RowLacks] = {}
        self.failed: dict[str, int] = {}
        self.other: dict[str, int] = {}

    def record(self, task_id: str, problem: Optional[RowLacks]) -> bool:
        """One episode of `task_id`: `problem` when its row failed it, else None. True when this is the task's first
        row problem (say it then, once)."""
        if problem is None:
            self.other[task_id] = self.other.get(task_id, 0) + 1
            return False
        self.failed[task_id] = self.failed.get(task_id, 0) + 1
        if task_id in self.problems:
            return False
        self.problems[task_id] = problem
        return True

    def skipped(self) -> dict[str, str]:
        """The tasks every episode of which failed on its row -> what the row lacks."""
        return {task: problem.lacks for task, problem in self.problems.items() if not self.other.get(task)}

    def only_skipped(self) -> bool:
        """Whether no episode of the run got past its row."""
        return not any(self.other.values())

    def summary(self, room: int = LIMIT) -> Optional[str]:
        """One line of at most `room` characters: how many tasks were skipped, what their rows lack, the first task
        ids; None when none was."""
        skipped = self.skipped()
        if not skipped:
            return None
        by_field: dict[str, list[str]] = {}
        for task, lacks in skipped.items():
            by_field.setdefault(lacks, []).append(task)
        parts = []
        for lacks, tasks in sorted(by_field.items(), key=lambda item: -len(item[1])):
            shown = ", ".join(repr(t) for t in tasks[:3]) + (f" and {len(tasks) - 3} more" if len(tasks) > 3 else "")
            parts.append(f"{len(tasks)} lacking {_field(lacks)} ({shown})")
        n = len(skipped)
        line = (f"{n} task{'s' if n != 1 else ''} skipped: every episode failed on its row, "
                f"{'; '.join(parts)}; fix those rows, or the code that reads them")
        return line if len(line) <= room else line[:room - 3] + "..."


def _field(lacks: str) -> str:
    return lacks if lacks == "a query" else f"field {lacks!r}"


def uneven_fields(tasks: Sequence[Any], split: str, skip: str = "") -> list[str]:
    """What a dry run can see of rows a workflow may not be able to use: the fields most rows of a split have and
    some lack (`skip` aside), most common first, each as "'name' (lacking from K of N split rows: ids)"."""
    counts: Counter = Counter(key for task in tasks for key in task.metadata)
    common = sorted((key for key, n in counts.items() if len(tasks) / 2 < n < len(tasks) and key != skip),
                    key=lambda k: -counts[k])
    out = []
    for key in common:
        lacking = [str(task.task_id) for task in tasks if key not in task.metadata]
        shown = ", ".join(lacking[:3]) + (", ..." if len(lacking) > 3 else "")
        out.append(f"{str(key)!r} (lacking from {len(lacking)} of {len(tasks)} {split} rows: {shown})")
    return out


def uneven_note(train: Sequence[Any], val: Sequence[Any], query_field: str) -> str:
    """The dry run's note on rows that lack what the other rows have (the query among them); "" when none does."""
    total = len(train) + len(val)
    bare = [t for t in [*train, *val] if not t.has_query]
    found = []
    if bare and len(bare) < total:
        shown = ", ".join(str(t.task_id) for t in bare[:3]) + (", ..." if len(bare) > 3 else "")
        found.append(f"the query {query_field!r} (lacking from {len(bare)} of {total} tasks: {shown})")
    for tasks, split in ((train, "training"), (val, "validation")):
        found += uneven_fields(tasks, split, skip=query_field if bare else "")
    if not found:
        return ""
    for shown in (2, 1):  # within a line, beside the note's start ("tasks: N training, M validation; ")
        more = f" and {len(found) - shown} more" if len(found) > shown else ""
        line = (f"some rows lack what most have: {'; '.join(found[:shown])}{more}; a workflow or judge that reads "
                f"one fails on those rows")
        if len(line) <= LIMIT - 60:
            break
    return line if len(line) <= LIMIT - 60 else line[:LIMIT - 63] + "..."


PROCESS = RowProblems()  # where each episode has a manager of its own (verl's agent loop, Trinity's workflow)
