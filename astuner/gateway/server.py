"""The gateway's HTTP server: a Starlette app served by uvicorn on a thread of its own, one per process that runs
episodes (the agents run in that process too, so 127.0.0.1 with a port the OS picks reaches it).

A request goes: key -> the episode's `ModelTuner` and agent (keys.KeyRing; 401 otherwise) -> the request checked
(protocol.parse_request) -> `ModelTuner.prepare` (the model's chat template, the ids of the calls it continues, the
context check: 400 context_length_exceeded) -> `ModelTuner.complete` on the run's engine, on the loop the engine
serves on -> the call recorded on the episode, exactly as the AgentScope route records it, as the reply goes out
(whole, or as server-sent events: the opening chunk at once, then the reply's chunks and the closing `[DONE]` in
one write, recorded just before it, so that an agent that has its reply and ends the episode at once finds it
recorded). A client that disconnects first (a timeout, a
closed stream) leaves nothing recorded; the generation it started runs to its end and is dropped.

A synchronous client (openai.OpenAI, httpx.Client, requests) inside an async workflow blocks the loop the engine
serves on, and its own request can then never be answered: when that loop has not begun the generation after
`STALL_S` seconds, the gateway answers 503 naming the fix (rollout.run_workflow_in_thread).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from dataclasses import replace
from typing import Any, Optional

from loguru import logger

from astuner.errors import ConfigError
from astuner.gateway import protocol
from astuner.gateway.keys import KeyRing, Lease
from astuner.schema.calls import EpisodeClosed

STALL_S = 20.0  # seconds the engine's loop may take to begin a generation before it counts as blocked
START_S = 30.0


class LoopBlocked(RuntimeError):
    pass


def _json(payload: Any, status: int = 200) -> Any:
    """A JSON answer (`payload` an object, or its text already serialised)."""
    from starlette.responses import Response

    text = payload if isinstance(payload, str) else json.dumps(payload)
    return Response(text, status_code=status, media_type="application/json")


def _error(exc: protocol.RequestError) -> Any:
    return _json(exc.body(), exc.status)


def _bearer(header: Optional[str]) -> Optional[str]:
    if not header:
        return None
    kind, _, value = header.partition(" ")
    return value.strip() if kind.lower() == "bearer" else None


async def _generate(tuner: Any, call: Any) -> Any:
    """`tuner.complete(call)`; LoopBlocked when the loop the engine serves on has not even begun the generation after
    STALL_S seconds (a loop that is only slow begins it, and the call then waits as long as the engine takes)."""
    task = asyncio.ensure_future(tuner.complete(call))
    done, _ = await asyncio.wait({task}, timeout=STALL_S)
    if not done and not call.engine_started:
        raise LoopBlocked(
            f"the run's event loop has not run for {STALL_S:.0f}s: a synchronous client (openai.OpenAI, "
            f"httpx.Client, requests) inside an async workflow blocks the loop the model runs on; use an async "
            f"client, or set astuner.rollout.run_workflow_in_thread: true")
    return await task


def _loop_factory() -> Any:
    """uvloop's event loop where it is installed (uvicorn's own choice), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


class Gateway:
    """The server and its keys; `start()` binds and serves, `base_url` is what agents are given."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.host, self.port = host, port
        self.keys = KeyRing()
        self._warned: set[str] = set()
        self._server: Any = None
        self._thread: Optional[threading.Thread] = None
        self.loop: Optional[asyncio.AbstractEventLoop] = None

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else ("[::1]" if self.host == "::" else self.host)
        return f"http://{host}:{self.port}/v1"

    # -- serving ---------------------------------------------------------------------------------------------
    def start(self) -> "Gateway":
        import uvicorn

        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            # replies go out as two writes (head, body): without this, Nagle holds the second until the client's
            # delayed ACK, 40 ms a call (accepted connections inherit it)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.bind((self.host, self.port))
            sock.listen(2048)
        except OSError as exc:
            sock.close()
            raise ConfigError(f"the OpenAI gateway cannot listen on {self.host}:{self.port} ({exc.strerror or exc}); "
                              f"set astuner.rollout.openai_gateway.host / port (port 0 = any free one)") from None
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app(), log_level="warning", access_log=False, lifespan="off",
                                timeout_keep_alive=75, backlog=2048, proxy_headers=False, server_header=False,
                                date_header=False)
        self._server = uvicorn.Server(config)
        started = threading.Event()

        def serve() -> None:
            async def main() -> None:
                self.loop = asyncio.get_running_loop()
                started.set()
                await self._server.serve(sockets=[sock])

            with asyncio.Runner(loop_factory=_loop_factory()) as runner:
                runner.run(main())

        self._thread = threading.Thread(target=serve, name="astuner-openai-gateway", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_S
        while not self._server.started and time.monotonic() < deadline and self._thread.is_alive():
            time.sleep(0.005)
        if not self._server.started:
            raise RuntimeError(f"the OpenAI gateway did not start on {self.host}:{self.port}")
        logger.info(f"OpenAI gateway serving at {self.base_url}")
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)

    # -- the app ---------------------------------------------------------------------------------------------
    def app(self) -> Any:
        from starlette.applications import Starlette
        from starlette.routing import Route

        async def not_found(request: Any, exc: Any) -> Any:
            return _error(protocol.RequestError(f"{request.method} {request.url.path} is not served here; the gateway "
                                                f"serves POST /v1/chat/completions and GET /v1/models",
                                                status=getattr(exc, "status_code", 404), code="not_found"))

        return Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"]),
                                 Route("/v1/models", self.models, methods=["GET"])],
                         exception_handlers={404: not_found, 405: not_found})

    def _lease(self, request: Any) -> Optional[Lease]:
        return self.keys.lookup(_bearer(request.headers.get("authorization")))

    @staticmethod
    def _unauthorized() -> Any:
        return _error(protocol.RequestError(
            "missing, unknown or expired API key: use the base URL and key of this episode "
            "(model_tuner.as_openai_base_url(), or the task's openai_base_url / openai_api_key); a key expires when "
            "its episode ends", status=401, code="invalid_api_key"))

    async def models(self, request: Any) -> Any:
        lease = self._lease(request)
        if lease is None:
            return self._unauthorized()
        return _json({"object": "list", "data": [{"id": lease.tuner.model_name, "object": "model", "created": 0,
                                                   "owned_by": "astuner"}]})

    def _sampling(self, tuner: Any, req: protocol.ChatRequest) -> Any:
        run = tuner.sampling
        sampling = replace(run, max_tokens=min(req.max_tokens, run.max_tokens) if req.max_tokens else run.max_tokens)
        asked = {k: v for k, v in (("temperature", req.temperature), ("top_p", req.top_p)) if v is not None}
        if getattr(tuner.gateway_settings, "request_sampling", False):
            return replace(sampling, **asked)
        differs = {k: v for k, v in asked.items() if v != getattr(run, k)}
        if differs and "sampling" not in self._warned:
            self._warned.add("sampling")
            logger.info(f"OpenAI gateway: a request asked for {differs}; replies are sampled at the run's temperature "
                        f"{run.temperature} / top_p {run.top_p}, which training assumes "
                        f"(astuner.rollout.openai_gateway.request_sampling: true takes the request's)")
        return sampling

    async def chat(self, request: Any) -> Any:
        from starlette.responses import StreamingResponse

        lease = self._lease(request)
        if lease is None:
            return self._unauthorized()
        tuner = lease.tuner
        body: Any = None
        try:
            try:
                body = json.loads(await request.body())
            except (ValueError, UnicodeDecodeError, RecursionError):
                raise protocol.RequestError("the request body is not JSON (or nests too deep)") from None
            req = protocol.parse_request(body)
            for name in req.ignored:
                if name not in self._warned:
                    self._warned.add(name)
                    logger.info(f"OpenAI gateway: request field {name!r} is not used")
            call = tuner.prepare(req.messages, req.tools, req.tool_choice, target=lease.agent,
                                 sampling=self._sampling(tuner, req))
        except protocol.RequestError as exc:
            return _error(exc)
        except EpisodeClosed:
            return self._unauthorized()
        except Exception as exc:  # noqa: BLE001 - messages or tools the chat template cannot take
            if protocol.not_unicode(body):
                return _error(protocol.RequestError("the request holds text that is not valid Unicode (a lone "
                                                    "surrogate escape such as \\ud800)"))
            return _error(protocol.RequestError(f"the messages and tools cannot be rendered by the model's chat "
                                                f"template: {type(exc).__name__}: {exc}"[:500]))
        if call.refused:
            return _error(protocol.RequestError(
                f"this model's context is {tuner.max_model_len} tokens: {call.refused}; the episode is marked "
                f"truncated", param="messages", code="context_length_exceeded"))
        task = asyncio.ensure_future(_generate(tuner, call))
        ident = protocol.completion_id()
        if req.stream:
            return StreamingResponse(self._events(task, lease, req, ident), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        try:
            done = await asyncio.shield(task)
            body = protocol.completion(done, req.model, ident)
            payload = json.dumps(body)
        except LoopBlocked as exc:
            return _json(protocol.error_body(str(exc), "server_error", code="loop_blocked"), 503)
        except Exception as exc:  # noqa: BLE001 - the engine's failure, to the client as a 500
            logger.error(f"OpenAI gateway: generation failed: {exc!r}")
            return _json(protocol.error_body(f"generation failed: {type(exc).__name__}: {exc}"[:500], "server_error"),
                         500)
        if await request.is_disconnected():
            return _json(protocol.error_body("the client went away", "server_error"), 499)  # not recorded
        # recorded before the reply leaves: an agent that has its reply may end the episode at once
        if not tuner.recorder.add(done.record):
            return self._ended()
        return _json(payload)

    @staticmethod
    def _ended_body() -> dict[str, Any]:
        return protocol.error_body("the episode ended while this call was generated; nothing was recorded",
                                   "invalid_request_error", code="invalid_api_key")

    @classmethod
    def _ended(cls) -> Any:
        return _json(cls._ended_body(), 401)

    async def _events(self, task: asyncio.Future, lease: Lease, req: protocol.ChatRequest, ident: str) -> Any:
        yield protocol.sse(protocol.chunk(ident, req.model, {"role": "assistant", "content": ""}))
        try:
            done = await asyncio.shield(task)  # a disconnect cancels the stream here: nothing is recorded
            rest = b"".join([*(protocol.sse(part) for part in protocol.reply_chunks(done, req.model, ident,
                                                                                    req.include_usage)),
                             protocol.sse("[DONE]")])
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - an error event; the OpenAI SDK raises it as an APIError
            blocked = isinstance(exc, LoopBlocked)
            message = str(exc) if blocked else f"generation failed: {type(exc).__name__}: {exc}"[:500]
            yield protocol.sse(protocol.error_body(message, "server_error", code="loop_blocked" if blocked else None))
            return
        # recorded as the rest goes out, in one write (the reply's events and the closing [DONE]): an agent that
        # has its reply may end the episode at once
        if not lease.tuner.recorder.add(done.record):
            yield protocol.sse(self._ended_body())
            return
        yield rest


_GATEWAY: Optional[Gateway] = None
_LOCK = threading.Lock()


def gateway_for(settings: Any = None) -> Gateway:
    """This process's gateway, started on first use with `settings` (astuner.rollout.openai_gateway)."""
    global _GATEWAY
    with _LOCK:
        if _GATEWAY is None or _GATEWAY._thread is None or not _GATEWAY._thread.is_alive():
            host = getattr(settings, "host", "127.0.0.1")
            port = int(getattr(settings, "port", 0))
            _GATEWAY = Gateway(host, port).start()
        return _GATEWAY
