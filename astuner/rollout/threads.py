"""Workflows that block run in threads of their own (`rollout.run_workflow_in_thread`).

Not asyncio's default executor: its few workers (CPU count + 4, at most 32) are shared with everything else
that uses `asyncio.to_thread`, so as many blocked workflows as it has workers leave nothing to run the calls
they wait on, and every episode times out. Here each workflow gets a daemon thread (the rollout manager's
`max_env_worker` semaphore bounds how many run at once); a thread whose episode timed out no longer holds a
slot, and is neither waited for nor joined when the process exits. The thread runs in a copy of the episode's
context, as `asyncio.to_thread` would (the episode's tally of auxiliary calls lives there).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any, Callable


async def run_in_own_thread(fn: Callable[[], Any], name: str = "astuner-workflow") -> Any:
    """`fn()` in a new daemon thread; its result (or exception) here. Cancelling the await abandons it."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():
            future.set_result(value) if ok else future.set_exception(value)

    context = contextvars.copy_context()  # the episode's context (its auxiliary-call tally), as asyncio.to_thread

    def target() -> None:
        try:
            ok, value = True, context.run(fn)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine as is
            ok, value = False, exc
        try:
            loop.call_soon_threadsafe(settle, ok, value)
        except RuntimeError:  # the loop is gone (the episode was abandoned and the rollout ended)
            pass

    threading.Thread(target=target, name=name, daemon=True).start()
    return await future
