"""The process's open-file descriptors against its limit (`ulimit -n`, RLIMIT_NOFILE), for the rollouts.

Each episode's agent may open connections (to the run's OpenAI gateway, whose end of each connection lives in the
same process, to tools, to services); an agent that opens a client per episode and never closes it holds them
until the garbage collector frees the client. The gateway closes its end when the episode ends and the rollouts'
garbage is collected when they end (astuner.rollout.gc_freeze); what is left is watched here:

- `raise_soft_limit()`, once per process that runs episodes: the soft limit raised to the hard one, as servers
  do, and said in the log (`ulimit -n 1024` sets both: then nothing changes).
- `episode_ended()`, after each episode (counted every `CHECK_EVERY`): past `COLLECT_AT` of the limit while
  rollouts run, their garbage is collected at once rather than when the step's rollouts end (again only after
  the count grew by `COLLECT_AT`'s tenth since).
- `check()`: past `WARN_AT` of the limit, one warning line, once per process, naming the limit, the likely cause
  and the fix; `rollouts_ended()` checks at the end of each step's rollouts.
"""

from __future__ import annotations

import os
import threading
from typing import Optional

from loguru import logger

from astuner.rollout.gc_freeze import collect_rollout_garbage

WARN_AT = 0.8
COLLECT_AT = 0.5
CHECK_EVERY = 8  # episodes between two counts (a count lists /proc/self/fd: about 50 us for a few hundred)

_lock = threading.Lock()
_raised = False
_warned = False
_ended = 0
_collected_at: Optional[int] = None  # the count after the last collection made for lack of descriptors


def soft_limit() -> Optional[int]:
    """RLIMIT_NOFILE's soft limit; None where there is none (unlimited, or no such limit on this system)."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def open_count() -> Optional[int]:
    """How many descriptors the process holds; None where the system does not say (/proc/self/fd, /dev/fd)."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(folder)) - 1  # less the one listing the folder
        except OSError:
            continue
    return None


def raise_soft_limit() -> Optional[str]:
    """Raise the soft open-file limit to the hard one (once per process); what was done, as logged, or None."""
    global _raised
    with _lock:
        if _raised:
            return None
        _raised = True
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY or (hard != resource.RLIM_INFINITY and soft >= hard):
            return None
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ImportError, ValueError, OSError):  # no such limit here, or the system refused it: left as it was
        return None
    note = f"open-file limit raised from {soft} to {target} (the hard limit; ulimit -n)"
    logger.info(note)
    return note


def check(where: str = "") -> bool:
    """Warn once when open descriptors pass WARN_AT of the soft limit; whether they have."""
    global _warned
    limit, count = soft_limit(), open_count()
    if not limit or count is None or count < WARN_AT * limit:
        return False
    with _lock:
        first, _warned = not _warned, True
    if first:
        logger.warning(f"{count} of {limit} open files (ulimit -n) in use{where}; at the limit the run fails with "
                       f"Too many open files. Likely cause: an agent that opens a client per episode "
                       f"(openai.AsyncOpenAI, httpx.AsyncClient) and never closes it (use `async with`); or raise the "
                       f"limit: ulimit -n 65536")
    return True


def episode_ended() -> None:
    """After an episode: every CHECK_EVERY of them, the count; short of descriptors, the rollouts' garbage
    collected at once; near the limit, the warning."""
    global _ended, _collected_at
    with _lock:
        _ended += 1
        if _ended % CHECK_EVERY:
            return
    limit, count = soft_limit(), open_count()
    if not limit or count is None or count < COLLECT_AT * limit:
        return
    if _collected_at is None or count >= _collected_at + COLLECT_AT * limit / 10:
        if collect_rollout_garbage() is not None:
            _collected_at = open_count()
    check(" while episodes run")


def rollouts_ended() -> None:
    """At the end of a step's rollouts (their garbage collected): the warning when near the limit."""
    global _collected_at
    _collected_at = None
    check(" after this step's episodes")
