"""Finding files the user names in a config: relative to the cwd first, then to the config's folder
and each of its parents (`extra_roots`)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence


def candidate_paths(raw: str, extra_roots: Sequence[Path] = ()) -> list[Path]:
    """Where `raw` may be, in order, each place once (a root may be the cwd itself)."""
    path = Path(raw).expanduser()
    if path.is_absolute():
        return [path]
    return list(dict.fromkeys([Path.cwd() / path] + [Path(r).absolute() / path for r in extra_roots]))


def looks_like_hub_id(raw: str) -> bool:
    """`organisation/name` or `name`, as the hub spells repository ids; anything else (./x, /opt/x, a/b/c, ~/x)
    is meant as a file or folder."""
    import re

    return re.fullmatch(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?", raw) is not None and ".." not in raw


def find_user_path(raw: str, extra_roots: Sequence[Path] = ()) -> Optional[Path]:
    """The existing path `raw` names (absolute, or relative to the cwd or one of `extra_roots`), else None."""
    return next((c.resolve() for c in candidate_paths(raw, extra_roots) if c.exists()), None)


def tried_paths(raw: str, extra_roots: Sequence[Path] = ()) -> str:
    """The first places looked at, for an error message."""
    candidates = candidate_paths(raw, extra_roots)
    shown = ", ".join(str(c) for c in candidates[:3])
    return shown + (f" and {len(candidates) - 3} more parent folders" if len(candidates) > 3 else "")
