"""Errors Trinity caught and logged while it went on as if done (`caught_error`). Its failed episodes and rows
are counted by the run's health actor (`astuner.backbone.run_health`), as verl's are."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from astuner.backbone.engine_errors import EXCEPTION_LINE


# Trinity's explorer and trainer catch an exception in their loops, log it ("Error in Explorer:" /
# "Error in Trainer:", then the traceback, each line under the same logger tag) and stop as if done.
CAUGHT = {"explorer": "Error in Explorer:", "trainer": "Error in Trainer:"}


def caught_error(log_dir: Path) -> Optional[str]:
    """The first of Trinity's explorer / trainer that stopped on an exception, with the exception's line,
    from Trinity's own logs (`<checkpoint job dir>/log/<role>.log`); None when neither did."""
    for role in ("trainer", "explorer"):
        path = Path(log_dir) / f"{role}.log"
        if not path.exists():
            continue
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        starts = [i for i, line in enumerate(lines) if CAUGHT[role] in line]
        if not starts:
            continue
        first = lines[starts[0]]
        tag = first[:first.index(CAUGHT[role])]
        tag = re.sub(r"\d\d:\d\d:\d\d", "", tag).strip()  # "ERROR 11-22 [trainer.py:156]" without the time
        block = [line.split("] ", 1)[-1] for line in lines[starts[0]:] if tag.split()[-1] in line]
        raised = [line.strip() for line in block if EXCEPTION_LINE.match(line.strip())]
        return f"Trinity's {role} stopped on an error: {raised[-1] if raised else first.strip()}"
    return None
