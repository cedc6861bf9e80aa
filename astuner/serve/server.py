"""`astuner serve`'s server: the training gateway (`astuner.gateway.server.Gateway`: the same request checks,
rendering, continuation, replies and SSE) as a standalone OpenAI-compatible endpoint for an agent in use, with one
key for every client instead of one per episode, and each call recorded into a trace store
(`astuner.records.trace_store`) as it is answered.

Episodes: a client names its episode (session) with the header `X-Session-Id` (any string up to 200 characters);
a request without one is an episode of its own. Every reply carries the episode's id in its `X-Session-Id` header,
which `POST /v1/feedback` takes: `{"episode": ID, "reward": NUMBER, "metadata": {...}}` (the same key). A session's
calls continue one another as an episode's do in training (the earlier calls' ids reused verbatim); a session idle
longer than `idle_s` is closed and, if it comes back, continues from its calls in the store.

A reply and a feedback's `"recorded": true` go out only once their rows are committed to the store. Once the store
cannot be written (a full disk), that call and every later request are answered 503 in OpenAI's error shape naming
the store (code `store_failed`), nothing more is generated, and `failed` is set: the command stops with one line.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import threading
import time
import uuid
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Optional

from loguru import logger

from astuner.gateway import limits, protocol
from astuner.gateway.keys import Lease
from astuner.gateway.server import Gateway, _bearer, _error, _json
from astuner.records.trace_store import StoreFailed, TraceStore
from astuner.schema.calls import CallRecord, EpisodeRecorder

SESSION_HEADER = "x-session-id"
SINGLE_CALL_S = 600.0  # how long an episode of one call (no X-Session-Id) stays open: its reply's time to stream
FEEDBACK_BYTES = 1 << 20  # the largest feedback body read (its metadata included)
SESSION_ID = re.compile(r"^[\x21-\x7e]{1,200}$")  # printable ASCII, no spaces: it goes back in a header


@dataclass
class StoredRecorder(EpisodeRecorder):
    """An episode's recorder whose every recorded call also goes into the trace store."""

    store: Any = None
    episode: str = ""
    model: str = ""
    last_used: float = field(default_factory=time.monotonic)
    single_call: bool = False  # a request that named no session: an episode of one call
    writes: dict[int, Any] = field(default_factory=dict)  # id(call) -> the future of its row's commit

    def add(self, call: CallRecord) -> bool:
        added = super().add(call)
        if added:
            self.writes[id(call)] = self.store.add_call(self.episode, call, model=self.model)
        return added


class ServeGateway(Gateway):
    what, listen_keys = "astuner serve", "--host / --port"

    def __init__(self, new_tuner: Any, store: TraceStore, key: str, model: str, host: str = "127.0.0.1",
                 port: int = 0, idle_s: float = 3600.0):
        """`new_tuner(recorder)`: a ModelTuner for one episode over the served model's engine."""
        super().__init__(host, port)
        self.new_tuner, self.store, self.key, self.model, self.idle_s = new_tuner, store, key, model, idle_s
        self.sessions: dict[str, Any] = {}  # episode id -> its ModelTuner
        self._sessions_lock = threading.Lock()
        self._reader: Optional[TraceStore] = None
        self.failure: Optional[str] = None  # why the store cannot be written; set once, with `failed`
        self.failed = threading.Event()

    def app(self) -> Any:
        from starlette.routing import Route

        app = super().app()
        app.router.routes.append(Route("/v1/feedback", self.feedback, methods=["POST"]))
        return app

    # -- episodes ------------------------------------------------------------------------------------------------
    def _lease(self, request: Any) -> Optional[Lease]:
        if not secrets.compare_digest(_bearer(request.headers.get("authorization")) or "", self.key):
            return None
        asked = request.headers.get(SESSION_HEADER)
        if asked is not None and not SESSION_ID.match(asked):
            request.state.bad_session = asked
            return None
        episode = asked or f"call-{uuid.uuid4().hex}"
        if asked is not None and asked not in self.sessions and self.store.knows(asked):
            served_by = self._stored_model(asked)
            if served_by not in (None, "", self.model):  # its calls' ids are another tokenizer's: no continuing them
                request.state.other_model = (asked, served_by)
                return None
        request.state.session = episode
        return Lease(self._session(episode, asked is None), request.headers.get("x-agent") or "default")

    def _stored_model(self, episode: str) -> Optional[str]:
        """The model that served `episode`'s calls (the store's record of it)."""
        self.store.flush()
        if self._reader is None:
            self._reader = TraceStore.read(self.store.path)
        return self._reader.episode_model(episode)

    def _session(self, episode: str, single_call: bool) -> Any:
        now = time.monotonic()
        with self._sessions_lock:
            tuner = self.sessions.get(episode)
            if tuner is None:
                recorder = StoredRecorder(store=self.store, episode=episode, model=self.model, label=episode,
                                          single_call=single_call)
                tuner = self.sessions[episode] = self.new_tuner(recorder)
                if self.store.knows(episode):  # a session that was closed comes back: it continues its calls
                    recorder.calls = self._stored_calls(episode, tuner.tokenizer)
            tuner.recorder.last_used = now
            # a call without a session is kept only while its reply may still be streaming
            idle = [e for e, t in self.sessions.items()
                    if now - t.recorder.last_used > (SINGLE_CALL_S if t.recorder.single_call else self.idle_s)]
            closing = [self.sessions.pop(e) for e in idle]
        for old in closing:
            old.recorder.close()
        return tuner

    def _stored_calls(self, episode: str, tokenizer: Any) -> list[CallRecord]:
        """The episode's calls from the store, as the process that served them held them: each reply's decoded
        text with its end-of-turn token (what a later prompt is matched against) is its ids decoded again."""
        self.store.flush()
        if self._reader is None:
            self._reader = TraceStore.read(self.store.path)
        calls = self._reader.calls(episode)
        for call in calls:
            call.decoded_response = tokenizer.decode(call.response_ids, skip_special_tokens=False)
        return calls

    def _unauthorized(self) -> Any:  # type: ignore[override]
        return _error(protocol.RequestError("missing or wrong API key: use the key astuner serve printed (or the one "
                                            "its --api-key-env variable holds)", status=401, code="invalid_api_key"))

    async def models(self, request: Any) -> Any:
        if self._lease(request) is None:
            return self._refused(request)
        return _json({"object": "list", "data": [{"id": self.model, "object": "model", "created": 0,
                                                   "owned_by": "astuner"}]})

    async def chat(self, request: Any) -> Any:
        if self.failure is not None:  # nothing is generated that cannot be recorded
            return self._store_failed()
        try:
            response = await super().chat(request)
        except StoreFailed as exc:  # a returning session's calls could not be read back
            return self._store_failed(exc)
        if getattr(request.state, "bad_session", None) is not None or \
                getattr(request.state, "other_model", None) is not None:  # the gateway answered 401: it is not
            return self._refused(request)
        session = getattr(request.state, "session", None)
        if session is not None:
            response.headers["X-Session-Id"] = session
        return response

    async def _stored(self, tuner: Any, record: Any) -> Optional[dict[str, Any]]:
        future = tuner.recorder.writes.pop(id(record), None)
        if future is None:
            return None
        try:
            await asyncio.wrap_future(future)
        except StoreFailed as exc:
            self._fail(exc)
            return self._store_failed_body()
        return None

    def _fail(self, exc: Exception) -> None:
        if self.failure is None:
            self.failure = str(exc)
            self.failed.set()

    def _store_failed_body(self) -> dict[str, Any]:
        return protocol.error_body(f"{self.failure}: this server answers no more requests (nothing it generated "
                                   f"could be kept)", "server_error", code="store_failed")

    def _store_failed(self, exc: Optional[Exception] = None) -> Any:
        if exc is not None:
            self._fail(exc)
        return _json(self._store_failed_body(), 503)

    def _refused(self, request: Any) -> Any:
        other = getattr(request.state, "other_model", None)
        if other is not None:
            return _error(protocol.RequestError(
                f"session {other[0][:60]!r} was served by model {other[1]!r}; this server serves {self.model!r}, "
                f"whose tokens its recorded calls are not: start a new session (another X-Session-Id)",
                code="session_of_another_model", status=409))
        bad = getattr(request.state, "bad_session", None)
        if bad is not None:
            return _error(protocol.RequestError(f"header X-Session-Id {bad[:40]!r} is not a session id: printable "
                                                f"ASCII without spaces, 1 to 200 characters"))
        return self._unauthorized()

    # -- feedback ------------------------------------------------------------------------------------------------
    async def feedback(self, request: Any) -> Any:
        if not secrets.compare_digest(_bearer(request.headers.get("authorization")) or "", self.key):
            return self._unauthorized()
        if self.failure is not None:
            return self._store_failed()
        try:  # read only within its limit: an episode id, a number and a metadata object
            body = json.loads(await limits.read_body(request, FEEDBACK_BYTES, "a feedback body's limit"))
        except protocol.RequestError as exc:
            return _error(exc)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return _error(protocol.RequestError("the feedback body is not JSON"))
        try:
            episode, reward, metadata = parse_feedback(body)
        except protocol.RequestError as exc:
            return _error(exc)
        if not self.store.knows(episode):
            return _error(protocol.RequestError(f"no episode {episode[:60]!r} in this store (an episode's id is the "
                                                f"X-Session-Id of its calls' replies)", param="episode",
                                                code="not_found", status=404))
        try:  # "recorded" only once its row is committed
            await asyncio.wrap_future(self.store.add_feedback(episode, reward, metadata))
        except StoreFailed as exc:
            return self._store_failed(exc)
        logger.debug(f"feedback: episode {episode} reward {reward}")  # (the log file only)
        return _json({"episode": episode, "reward": reward, "recorded": True})


def parse_feedback(body: Any) -> tuple[str, float, Optional[dict[str, Any]]]:
    """`{"episode": str, "reward": finite number, "metadata": object (optional)}`; RequestError naming the field."""
    import math

    if not isinstance(body, dict):
        raise protocol.RequestError("the feedback body must be a JSON object {episode, reward, metadata}")
    unknown = sorted(set(body) - {"episode", "reward", "metadata"})
    if unknown:
        raise protocol.RequestError(f"unknown feedback field(s) {', '.join(unknown)}; give episode, reward, metadata",
                                    param=unknown[0])
    episode, reward, metadata = body.get("episode"), body.get("reward"), body.get("metadata")
    if not isinstance(episode, str) or not episode:
        raise protocol.RequestError("feedback needs 'episode': the X-Session-Id of the episode's replies",
                                    param="episode")
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
        raise protocol.RequestError(f"feedback 'reward' must be a finite number, got {reward!r}", param="reward")
    if metadata is not None and not isinstance(metadata, dict):
        raise protocol.RequestError("feedback 'metadata' must be a JSON object", param="metadata")
    if metadata is not None:
        try:  # what the store writes: standard JSON (no NaN) in UTF-8 (no lone surrogate)
            json.dumps(metadata, ensure_ascii=False, allow_nan=False).encode("utf-8")
        except (ValueError, UnicodeEncodeError) as exc:
            why = f"{str(exc)[:120]} (NaN and Infinity are no JSON; a lone surrogate is no Unicode text)"
            raise protocol.RequestError(f"feedback 'metadata' cannot be stored: {why}", param="metadata") from None
    return episode, float(reward), metadata


def serving_settings(max_request_bytes: int = 0) -> SimpleNamespace:
    """The gateway settings a served model's tuners carry: the request's temperature and top-p are taken (a
    deployed agent sets its own), within the server's max_tokens."""
    return SimpleNamespace(request_sampling=True, max_request_bytes=max_request_bytes,
                           limit_setting="astuner serve --max-request-bytes")
