"""Finding files the user names in a config: relative to the cwd first, then to the config's folder."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence


def find_user_path(raw: str, extra_roots: Sequence[Path] = ()) -> Optional[Path]:
    """The existing path `raw` names (absolute, or relative to the cwd or one of `extra_roots`), else None."""
    path = Path(raw).expanduser()
    candidates = [path] if path.is_absolute() else [Path.cwd() / path] + [Path(r) / path for r in extra_roots]
    return next((c.resolve() for c in candidates if c.exists()), None)


def tried_paths(raw: str, extra_roots: Sequence[Path] = ()) -> str:
    path = Path(raw).expanduser()
    candidates = [path] if path.is_absolute() else [Path.cwd() / path] + [Path(r) / path for r in extra_roots]
    return ", ".join(str(c) for c in candidates)
