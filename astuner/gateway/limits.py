"""What bounds a gateway request: the size of its body, and how long the gateway waits for its reply.

A body is read only up to its limit (`rollout.openai_gateway.max_request_bytes`; 0: `BYTES_PER_TOKEN` bytes per
token of the model's `max_model_len`, at least `MIN_BODY_BYTES`), which no prompt the model can take comes near: a
larger Content-Length is refused before any of the body is read, a chunked body as soon as it passes the limit, 413
in OpenAI's error shape. What the client still sends is dropped by the server as it comes, never held.

A generation is waited for until it is done, its client goes away or its episode ends (the workflow returned or its
`episode_timeout_s` ran out): the gateway never holds a connection longer than the episode can use the reply. A
call still in flight after `SLOW_S` seconds is logged with its state, and again each time that time doubles.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from typing import Any, Callable, Optional

from loguru import logger

from astuner.gateway.protocol import RequestError

BYTES_PER_TOKEN = 64  # JSON-escaped text runs a few bytes a token; whitespace runs and \u escapes more
MIN_BODY_BYTES = 1 << 20
SLOW_S = 60.0  # a call in flight this long is logged with its state (again at 2x, 4x, ...)


class EpisodeEnded(Exception):
    """The call's episode ended while it was generated: nothing is recorded."""


class ClientGone(Exception):
    """The client closed its connection while its call was generated: nothing is recorded."""


def body_limit(tuner: Any) -> tuple[int, str]:
    """The largest body taken for `tuner`'s episode, and where that number comes from."""
    settings = getattr(tuner, "gateway_settings", None)
    setting = getattr(settings, "limit_setting", None) or "astuner.rollout.openai_gateway.max_request_bytes"
    configured = int(getattr(settings, "max_request_bytes", 0) or 0)
    if configured > 0:
        return configured, setting
    return (max(MIN_BODY_BYTES, BYTES_PER_TOKEN * int(tuner.max_model_len)),
            f"{BYTES_PER_TOKEN} bytes per token of max_model_len {tuner.max_model_len}, at least 1 MiB; "
            f"{setting} sets it")


def _too_large(size: str, limit: int, why: str) -> RequestError:
    return RequestError(f"the request body is {size}, over the gateway's limit of {limit} bytes ({why})",
                        code="request_too_large", status=413)


async def read_body(request: Any, limit: int, why: str) -> bytes:
    """The request's body, read only while it stays within `limit` bytes (RequestError 413 otherwise)."""
    declared = (request.headers.get("content-length") or "").strip()
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(f"{int(declared)} bytes", limit, why)
    parts, size = [], 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise _too_large(f"over {limit} bytes", limit, why)
        parts.append(part)
    return b"".join(parts)


class EpisodeEnds:
    """One future per live episode (by its recorder) on the gateway's loop, done once the episode ends; used only
    on that loop (the recorder closes on the rollout's)."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        # id(recorder) -> (the recorder, weakly: an id is used again once its recorder is gone; its future)
        self._ends: dict[int, tuple[Any, asyncio.Future]] = {}

    def of(self, recorder: Any) -> asyncio.Future:
        slot = id(recorder)
        found = self._ends.get(slot)
        if found is not None and found[0]() is recorder:
            return found[1]
        ended = self.loop.create_future()
        self._ends[slot] = (weakref.ref(recorder, lambda _: self._drop(slot, ended)), ended)

        def settle() -> None:
            self._drop(slot, ended)
            if not ended.done():
                ended.set_result(None)

        def closed() -> None:  # on the thread that closed the recorder
            try:
                self.loop.call_soon_threadsafe(settle)
            except RuntimeError:  # the gateway's loop is closed: nothing waits on it
                pass

        recorder.on_close.append(closed)
        if recorder.closed:  # closed before the callback was in: it may never run
            settle()
        return ended

    def _drop(self, slot: int, ended: asyncio.Future) -> None:
        found = self._ends.get(slot)
        if found is not None and found[1] is ended:
            del self._ends[slot]


async def until_disconnect(receive: Callable[[], Any]) -> None:
    """Returns once the client has closed its connection (the request's body already read)."""
    while (await receive()).get("type") != "http.disconnect":
        pass


async def wait_reply(task: asyncio.Future, ended: asyncio.Future, gone: Optional[asyncio.Future],
                     state: Callable[[], str]) -> Any:
    """The generation's result, waited for until the episode ends (EpisodeEnded) or the client goes (ClientGone),
    whichever comes first; past SLOW_S, 2 * SLOW_S, ... seconds the call is logged with `state()`. The
    generation itself runs on to its end either way (its reply is then dropped)."""
    started = time.monotonic()
    slow = SLOW_S
    waits = {task, ended, *([gone] if gone is not None else [])}
    while True:
        done, _ = await asyncio.wait(waits, timeout=max(0.0, started + slow - time.monotonic()),
                                     return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        if ended in done:
            raise EpisodeEnded()
        if gone is not None and gone in done:
            raise ClientGone()
        if not done:
            logger.warning(f"OpenAI gateway: a call still in flight after {slow:.0f}s: {state()}")
            slow *= 2
