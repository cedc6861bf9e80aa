"""The disk under a run: whether a folder can be written (tried, not guessed from permission bits: root passes
every permission check on /proc and on a read-only mount), and the one-line reason a run was stopped by its disk
(full, over quota, read-only, not writable), whichever library's write hit it — torch and matplotlib report a full
disk as a RuntimeError without the OSError, so a failure on a disk with next to nothing free counts as full too."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator, Optional

# errno -> what it means for a write; EACCES and EPERM count only for an error that names a file
REASONS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "the disk quota is exceeded",
           errno.EROFS: "the file system is read-only", errno.EFBIG: "the file is too large for the file system",
           errno.EACCES: "permission denied", errno.EPERM: "the operation is not permitted"}
FULL_BELOW = 16 * 2**20  # bytes free under which a disk is taken as full


def free_bytes(folder: Path) -> Optional[int]:
    """Bytes this user can still write on `folder`'s file system (its nearest existing ancestor's)."""
    path = Path(folder).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def write_problem(folder: Path) -> Optional[str]:
    """None when files can be made in the existing folder `folder` (a temporary folder is made there and removed),
    else why not, e.g. "the file system is read-only"."""
    try:
        probe = tempfile.mkdtemp(prefix=".astuner-write-check-", dir=folder)
    except OSError as exc:
        return REASONS.get(exc.errno or 0) or (exc.strerror or type(exc).__name__)
    try:
        os.rmdir(probe)
    except OSError:
        pass
    free = free_bytes(folder)
    if free is not None and free < FULL_BELOW:
        return f"its disk is full ({free / 2**20:.1f} MiB free)"
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    todo = [exc]
    while todo:
        each = todo.pop()
        if each is None or id(each) in seen:
            continue
        seen.add(id(each))
        yield each
        todo += [each.__cause__, each.__context__]  # type: ignore[list-item]


def disk_failure(exc: BaseException, folder: Path) -> Optional[str]:
    """Why the disk stopped a write into `folder` that raised `exc` ("no space left on the device writing
    PATH"), or None when the failure was not the disk's."""
    for each in _chain(exc):
        if isinstance(each, OSError) and each.errno in REASONS and \
                (each.filename or each.errno not in (errno.EACCES, errno.EPERM)):
            return f"{REASONS[each.errno]} writing {each.filename or folder}"
    free = free_bytes(folder)
    if free is not None and free < FULL_BELOW:
        return f"no space left on the device writing {folder} ({free / 2**20:.1f} MiB free)"
    return None
