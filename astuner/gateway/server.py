"""The gateway's HTTP server: a Starlette app served by uvicorn on a thread of its own, one per process that runs
episodes (the agents run in that process too, so 127.0.0.1 with a port the OS picks reaches it).

A request goes: key -> the episode's `ModelTuner` and agent (keys.KeyRing; 401 otherwise) -> the body, read only
within its size limit (limits.read_body; 413) -> the request checked (protocol.parse_request) ->
`ModelTuner.prepare` (the model's chat template, the ids of the calls it continues, the context check: 400
context_length_exceeded; a body over INLINE_BYTES is parsed and prepared on a worker thread, so that the loop
answers the other requests meanwhile) -> `ModelTuner.complete` on the run's engine, on the loop the engine serves
on -> the call recorded on the episode, exactly as the AgentScope route records it, as the reply goes out (whole,
or as server-sent events: the opening chunk at once, then the reply's chunks and the closing `[DONE]` in one write,
recorded just before it, so that an agent that has its reply and ends the episode at once finds it recorded). A
client that disconnects first (a timeout, a closed stream), or whose episode ends first, is answered at once and
leaves nothing recorded; the generation it started runs to its end and is dropped (limits.wait_reply, which also
logs a call in flight too long). Input the client must fix is a 400; a failure of the gateway's own or of the
engine is a 500 in OpenAI's shape, logged with its traceback.

A synchronous client (openai.OpenAI, httpx.Client, requests) inside an async workflow blocks the loop the engine
serves on, and its own request can then never be answered: when that loop has not begun the generation after
`STALL_S` seconds, the gateway answers 503 naming the fix (rollout.run_workflow_in_thread).

When an episode ends, the connections its requests came on are closed (once idle; those that requests of a live
episode came on too are left open): an agent that opens a client per episode and never closes it leaves no
socket of the gateway's open, and its own end is freed when the collector frees the client
(astuner.rollout.gc_freeze).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import socket
import threading
import time
from dataclasses import replace
from typing import Any, Optional

from loguru import logger

from astuner.errors import BadModelInput, ConfigError
from astuner.gateway import limits, protocol
from astuner.gateway.keys import KeyRing, Lease
from astuner.schema.calls import EpisodeClosed

STALL_S = 20.0  # seconds the engine's loop may take to begin a generation before it counts as blocked
START_S = 30.0
INLINE_BYTES = 64 << 10  # a larger body is parsed, rendered and tokenized off the server's loop


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

    # what a failure to listen names: the server, and the settings that choose its address
    what, listen_keys = "the OpenAI gateway", "astuner.rollout.openai_gateway.host / port"

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.host, self.port = host, port
        self.keys = KeyRing()
        self.keys.on_expire = self._episode_ended
        # the connections (by the client's address) each live key's requests came on, and the reverse
        self._peers: dict[str, set[Any]] = {}
        self._peer_keys: dict[Any, set[str]] = {}
        self._peers_lock = threading.Lock()
        self._warned: set[str] = set()
        self._warned_lock = threading.Lock()
        # large bodies are prepared here: the server's loop answers other requests meanwhile
        self._preparing = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="astuner-gateway")
        self._ends: Optional[limits.EpisodeEnds] = None
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
            raise ConfigError(f"{self.what} cannot listen on {self.host}:{self.port} ({exc.strerror or exc}); "
                              f"set {self.listen_keys} (port 0 = any free one)") from None
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
        self._preparing.shutdown(wait=False, cancel_futures=True)

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
        key = _bearer(request.headers.get("authorization"))
        lease = self.keys.lookup(key)
        peer = request.scope.get("client")
        if lease is not None and peer is not None:
            with self._peers_lock:
                self._peers.setdefault(key, set()).add(peer)
                self._peer_keys.setdefault(peer, set()).add(key)
                ended = self.keys.lookup(key) is None  # the episode ended meanwhile: its expiry found no peer
                idle = self._forget(key) if ended else []
            if idle:
                self._close_peers(idle)
        return lease

    # -- connections of ended episodes ---------------------------------------------------------------------
    def _forget(self, key: str) -> list[Any]:
        """Drop an expired key's connections (under _peers_lock); those no live key's requests came on."""
        idle = []
        for peer in self._peers.pop(key, ()):
            keys = self._peer_keys.get(peer, set())
            keys.discard(key)
            if not keys:
                self._peer_keys.pop(peer, None)
                idle.append(peer)
        return idle

    def _episode_ended(self, key: str) -> None:
        """A key expired (its episode ended, on the rollout's thread): its connections closed on the server's loop."""
        with self._peers_lock:
            idle = self._forget(key)
        loop = self.loop
        if idle and loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._close_peers, idle)
            except RuntimeError:  # the loop closed meanwhile: the server is gone, and its connections with it
                pass

    def _close_peers(self, peers: list[Any]) -> None:
        """On the server's loop: close these clients' connections, each once its reply is out, unless a live key's
        request came on it since."""
        state = getattr(self._server, "server_state", None)
        with self._peers_lock:
            peers_left = {p for p in peers if p not in self._peer_keys}
        for connection in list(getattr(state, "connections", ())):
            if getattr(connection, "client", None) in peers_left:
                connection.shutdown()  # uvicorn's: closes an idle connection, else after the reply in progress

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

    def _once(self, name: str, message: str) -> None:
        """Log `message` the first time `name` comes up in this process."""
        with self._warned_lock:
            if name in self._warned:
                return
            self._warned.add(name)
        logger.info(message)

    def _sampling(self, tuner: Any, req: protocol.ChatRequest) -> Any:
        run = tuner.sampling
        sampling = replace(run, max_tokens=min(req.max_tokens, run.max_tokens) if req.max_tokens else run.max_tokens)
        asked = {k: v for k, v in (("temperature", req.temperature), ("top_p", req.top_p)) if v is not None}
        if getattr(tuner.gateway_settings, "request_sampling", False):
            return replace(sampling, **asked)
        differs = {k: v for k, v in asked.items() if v != getattr(run, k)}
        if differs:
            self._once("sampling", f"OpenAI gateway: a request asked for {differs}; replies are sampled at the run's "
                                   f"temperature {run.temperature} / top_p {run.top_p}, which training assumes "
                                   f"(astuner.rollout.openai_gateway.request_sampling: true takes the request's)")
        return sampling

    def _prepare(self, lease: Lease, raw: bytes) -> tuple[protocol.ChatRequest, Any]:
        """The body parsed, checked, rendered and tokenized (`ModelTuner.prepare`). RequestError for what the
        client must fix (a template that cannot take the messages among it); EpisodeClosed; anything else is the
        gateway's own failure."""
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise protocol.RequestError("the request body is not JSON (or nests too deep)") from None
        req = protocol.parse_request(body)
        for name in req.unused:
            why = protocol.UNUSED[name]
            self._once(name, f"OpenAI gateway: request field {name!r} is accepted and not used{': ' if why else ''}"
                             f"{why} (logged once)")
        for name in req.ignored:
            self._once(name, f"OpenAI gateway: request field {name!r} is not known here and not used (logged once)")
        try:
            call = lease.tuner.prepare(req.messages, req.tools, req.tool_choice, target=lease.agent,
                                       sampling=self._sampling(lease.tuner, req))
        except (protocol.RequestError, EpisodeClosed):
            raise
        except BadModelInput as exc:  # messages or tools the model cannot take
            text = str(exc)[:300]
            raise protocol.RequestError(text, param="tools" if text.startswith("tool") else "messages") from None
        except Exception as exc:
            if protocol.not_unicode(body):
                raise protocol.RequestError("the request holds text that is not valid Unicode (a lone surrogate "
                                            "escape such as \\ud800)") from None
            if not _in_template(exc):
                raise
            why = f"{type(exc).__name__}: {exc}"[:220]
            self._once("template", f"OpenAI gateway: the model's chat template refused a request's messages and "
                                   f"tools ({why}); answered 400 (logged once)")
            raise protocol.RequestError(f"the messages and tools cannot be rendered by the model's chat template: "
                                        f"{why}") from None
        return req, call

    async def chat(self, request: Any) -> Any:
        from starlette.responses import StreamingResponse

        lease = self._lease(request)
        if lease is None:
            return self._unauthorized()
        tuner = lease.tuner
        try:
            raw = await limits.read_body(request, *limits.body_limit(tuner))
            if len(raw) > INLINE_BYTES:  # rendering and tokenizing it takes a while: not on the loop
                req, call = await asyncio.get_running_loop().run_in_executor(self._preparing, self._prepare, lease,
                                                                             raw)
            else:
                req, call = self._prepare(lease, raw)
        except protocol.RequestError as exc:
            return _error(exc)
        except EpisodeClosed:
            return self._unauthorized()
        except Exception as exc:  # noqa: BLE001 - the gateway's own failure: a 500, logged with its traceback
            logger.opt(exception=exc).error(f"OpenAI gateway: preparing a request of {_episode(lease)} failed: "
                                            f"{type(exc).__name__}: {exc}"[:500])
            return _json(protocol.error_body(f"the gateway failed to prepare this request ({type(exc).__name__}: "
                                             f"{exc}"[:300] + "); the run's log has the traceback", "server_error"),
                         500)
        if call.refused:
            return _error(protocol.RequestError(
                f"this model's context is {tuner.max_model_len} tokens: {call.refused}; the episode is marked "
                f"truncated", param="messages", code="context_length_exceeded"))
        if self._ends is None:
            self._ends = limits.EpisodeEnds(asyncio.get_running_loop())
        ended = self._ends.of(tuner.recorder)
        task = asyncio.ensure_future(_generate(tuner, call))
        task.add_done_callback(_retrieved)  # a reply nobody waits for any more (the episode ended) fails quietly
        state = _state_of(lease, call, task)
        ident = protocol.completion_id()
        if req.stream:
            return StreamingResponse(self._events(task, ended, state, lease, req, ident),
                                     media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        gone = asyncio.ensure_future(limits.until_disconnect(request.receive))
        try:
            done = _returned(await limits.wait_reply(task, ended, gone, state), req)
            payload = json.dumps(protocol.completion(done, req.model, ident))
        except limits.EpisodeEnded:
            return self._ended()
        except limits.ClientGone:
            return _json(protocol.error_body("the client went away", "server_error"), 499)  # not recorded
        except LoopBlocked as exc:
            logger.warning(f"OpenAI gateway: answered 503 for {state()}: {exc}")
            return _json(protocol.error_body(str(exc), "server_error", code="loop_blocked"), 503)
        except Exception as exc:  # noqa: BLE001 - the engine's failure, to the client as a 500
            logger.opt(exception=exc).error(f"OpenAI gateway: generation failed for {state()}: "
                                            f"{type(exc).__name__}: {exc}"[:500])
            return _json(protocol.error_body(f"generation failed: {type(exc).__name__}: {exc}"[:500], "server_error"),
                         500)
        finally:
            gone.cancel()
        # recorded before the reply leaves: an agent that has its reply may end the episode at once
        if not tuner.recorder.add(done.record):
            return self._ended()
        unstored = await self._stored(tuner, done.record)
        if unstored is not None:
            return _json(unstored, 503)
        return _json(payload)

    async def _stored(self, tuner: Any, record: Any) -> Optional[dict[str, Any]]:
        """Waits until a recorded call is where it is kept beyond the episode (`astuner serve`'s store); the error
        body the client gets instead of the reply when it cannot be (None: kept, or nothing beyond the episode)."""
        return None

    @staticmethod
    def _ended_body() -> dict[str, Any]:
        return protocol.error_body("the episode ended while this call was generated; nothing was recorded",
                                   "invalid_request_error", code="invalid_api_key")

    @classmethod
    def _ended(cls) -> Any:
        return _json(cls._ended_body(), 401)

    async def _events(self, task: asyncio.Future, ended: asyncio.Future, state: Any, lease: Lease,
                      req: protocol.ChatRequest, ident: str) -> Any:
        yield protocol.sse(protocol.chunk(ident, req.model, {"role": "assistant", "content": ""}))
        try:
            # a disconnect cancels the stream here: nothing is recorded
            done = _returned(await limits.wait_reply(task, ended, None, state), req)
            rest = b"".join([*(protocol.sse(part) for part in protocol.reply_chunks(done, req.model, ident,
                                                                                    req.include_usage)),
                             protocol.sse("[DONE]")])
        except asyncio.CancelledError:
            raise
        except limits.EpisodeEnded:
            yield protocol.sse(self._ended_body())
            return
        except Exception as exc:  # noqa: BLE001 - an error event; the OpenAI SDK raises it as an APIError
            blocked = isinstance(exc, LoopBlocked)
            if blocked:
                logger.warning(f"OpenAI gateway: answered a stream with an error event for {state()}: {exc}")
            else:
                logger.opt(exception=exc).error(f"OpenAI gateway: generation failed for {state()} (streamed): "
                                                f"{type(exc).__name__}: {exc}"[:500])
            message = str(exc) if blocked else f"generation failed: {type(exc).__name__}: {exc}"[:500]
            yield protocol.sse(protocol.error_body(message, "server_error", code="loop_blocked" if blocked else None))
            return
        # recorded as the rest goes out, in one write (the reply's events and the closing [DONE]): an agent that
        # has its reply may end the episode at once
        if not lease.tuner.recorder.add(done.record):
            yield protocol.sse(self._ended_body())
            return
        unstored = await self._stored(lease.tuner, done.record)
        if unstored is not None:
            yield protocol.sse(unstored)
            return
        yield rest


def _retrieved(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()


def _returned(done: Any, req: protocol.ChatRequest) -> Any:
    """The reply as the request gets it: its first tool call only under `parallel_tool_calls: false`."""
    return done if req.parallel_tool_calls else protocol.first_tool_call_only(done)


def _episode(lease: Lease) -> str:
    label = getattr(lease.tuner.recorder, "label", "")
    return f"episode {label}, agent {lease.agent!r}" if label else f"an episode's agent {lease.agent!r}"


def _state_of(lease: Lease, call: Any, task: asyncio.Future) -> Any:
    """A one-line account of an in-flight call, for the log."""
    started = time.monotonic()

    def state() -> str:
        phase = ("generating on the engine" if call.engine_started else
                 "waiting for the engine's loop to begin it") if not task.done() else "generated"
        return (f"{_episode(lease)}, {time.monotonic() - started:.0f}s in: {phase} (prompt {len(call.prompt_ids)} "
                f"tokens, up to {call.sampling.max_tokens} reply tokens; the engine returns a reply whole)")

    return state


def _in_template(exc: BaseException) -> bool:
    """Whether `exc` was raised by the chat template (jinja2's errors, or code the template ran)."""
    try:
        from jinja2 import TemplateError
    except ImportError:  # pragma: no cover - transformers brings jinja2
        TemplateError = ()  # type: ignore[assignment,misc]
    if isinstance(exc, TemplateError):
        return True
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            return True
        tb = tb.tb_next
    return False


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
