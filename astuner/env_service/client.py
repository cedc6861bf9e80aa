"""HTTP client of an environment service.

Protocol (JSON bodies; errors are HTTP 4xx/5xx with {"error": "..."}):
  GET  /health                                       -> {"status": "ok", "env_types": [...]}
  POST /task_ids  {env_type, split}                  -> {"task_ids": [str, ...]}
  POST /create    {env_type, task_id, instance_id}   -> {"instance_id", "query", "init_messages": [...], "info": {}}
  POST /step      {instance_id, action: {role, content}}
                                                     -> {"observation": {role, content}, "reward", "done", "info"}
  POST /evaluate  {instance_id, params: {}}          -> {"reward": float, "is_success": bool, "info": {}}
  POST /release   {instance_id}                      -> {"released": bool}
"""

from __future__ import annotations

import json
import random
import time
import uuid
from typing import Any, Optional

from astuner.errors import EnvServiceError

IDEMPOTENT = {"health", "task_ids", "evaluate", "release"}
"""Endpoints safe to send twice. /create and /step change the environment: they are sent again only when the
first attempt cannot have reached it (connection refused, or 502/503/504 from a proxy or a service not ready)."""
UNAVAILABLE = {502, 503, 504}


class EnvServiceClient:
    """Talks to one environment service over a pooled HTTP connection (httpx). Connection errors and 5xx
    answers are retried `retries` times with exponential backoff from `retry_backoff_s` (jittered), within
    the limits of IDEMPOTENT; every failure is an `EnvServiceError` naming the URL."""

    def __init__(self, base_url: str, timeout_s: float = 30.0, retries: int = 3, retry_backoff_s: float = 0.5):
        import httpx

        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.retries, self.retry_backoff_s = retries, retry_backoff_s
        self._http = httpx.Client(timeout=timeout_s, headers={"Content-Type": "application/json"})

    def close(self) -> None:
        self._http.close()

    def _retryable(self, endpoint: str, status: Optional[int], exc: Optional[Exception]) -> bool:
        import httpx

        if exc is not None:  # connecting failed: the request never reached the service
            return isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)) or (
                endpoint in IDEMPOTENT and isinstance(exc, (httpx.ReadTimeout, httpx.RemoteProtocolError,
                                                            httpx.ReadError, httpx.WriteError)))
        return status in UNAVAILABLE or (endpoint in IDEMPOTENT and status is not None and status >= 500)

    def _request(self, endpoint: str, payload: Optional[dict[str, Any]] = None) -> dict[str, Any]:
        import httpx

        url = f"{self.base_url}/{endpoint}"
        attempt = 0
        while True:
            exc: Optional[Exception] = None
            response = None
            try:
                response = (self._http.get(url) if payload is None
                            else self._http.post(url, content=json.dumps(payload).encode()))
            except httpx.HTTPError as error:
                exc = error
            status = response.status_code if response is not None else None
            failed = exc is not None or (status is not None and status >= 400)
            if not failed:
                break
            if attempt < self.retries and self._retryable(endpoint, status, exc):
                delay = self.retry_backoff_s * (2 ** attempt) * random.uniform(0.75, 1.25)
                attempt += 1
                time.sleep(delay)
                continue
            tried = f" (after {attempt + 1} attempts)" if attempt else ""
            if exc is not None:
                raise self._error(url, exc, tried) from None
            detail = response.text
            try:
                detail = json.loads(detail).get("error", detail)
            except (ValueError, AttributeError):
                pass
            raise EnvServiceError(f"environment service {url} answered HTTP {status}{tried}: {detail}")
        body = response.content
        try:
            answer = json.loads(body)
        except ValueError:
            raise EnvServiceError(f"environment service {url} answered with invalid JSON: {body[:200]!r}") from None
        if not isinstance(answer, dict):
            raise EnvServiceError(f"environment service {url} answered {answer!r}, not a JSON object")
        return answer

    def _error(self, url: str, exc: Exception, tried: str) -> EnvServiceError:
        import httpx

        if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
            return EnvServiceError(f"environment service {url} did not answer within {self.timeout_s}s{tried}; check "
                                   f"the service or raise astuner.task_reader.env_service.timeout_s")
        if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
            return EnvServiceError(f"cannot reach the environment service at {url}{tried}: {exc}; start the service "
                                   f"or fix astuner.task_reader.env_service.env_url")
        return EnvServiceError(f"environment service {url} dropped the connection{tried}: {exc}")

    def _field(self, answer: dict[str, Any], key: str, endpoint: str) -> Any:
        if key not in answer:
            raise EnvServiceError(f"environment service {self.base_url}/{endpoint} answered without '{key}': {answer}")
        return answer[key]

    def health(self) -> dict[str, Any]:
        return self._request("health")

    def task_ids(self, env_type: str, split: str) -> list[str]:
        ids = self._field(self._request("task_ids", {"env_type": env_type, "split": split}), "task_ids", "task_ids")
        if not isinstance(ids, list):
            raise EnvServiceError(f"environment service {self.base_url}/task_ids answered task_ids={ids!r}, not a list")
        return [str(i) for i in ids]

    def create(self, env_type: str, task_id: str, instance_id: Optional[str] = None) -> dict[str, Any]:
        return self._request("create", {"env_type": env_type, "task_id": task_id,
                                        "instance_id": instance_id or uuid.uuid4().hex})

    def step(self, instance_id: str, action: dict[str, Any]) -> dict[str, Any]:
        return self._request("step", {"instance_id": instance_id, "action": action})

    def evaluate(self, instance_id: str, params: Optional[dict[str, Any]] = None) -> dict[str, Any]:
        return self._request("evaluate", {"instance_id": instance_id, "params": params or {}})

    def release(self, instance_id: str) -> bool:
        return bool(self._request("release", {"instance_id": instance_id}).get("released", False))
