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
import socket
import urllib.error
import urllib.request
import uuid
from typing import Any, Optional

from astuner.errors import EnvServiceError


class EnvServiceClient:
    """Talks to one environment service. Every failure is an `EnvServiceError` naming the URL."""

    def __init__(self, base_url: str, timeout_s: float = 30.0):
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s

    def _request(self, endpoint: str, payload: Optional[dict[str, Any]] = None) -> dict[str, Any]:
        url = f"{self.base_url}/{endpoint}"
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(url, data=data, method="GET" if payload is None else "POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            try:
                detail = json.loads(detail).get("error", detail)
            except (ValueError, AttributeError):
                pass
            raise EnvServiceError(f"environment service {url} answered HTTP {exc.code}: {detail}") from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, (socket.timeout, TimeoutError)):
                raise EnvServiceError(f"environment service {url} did not answer within {self.timeout_s}s; "
                                      f"check the service or raise astuner.task_reader.env_service.timeout_s") from None
            raise EnvServiceError(f"cannot reach the environment service at {url}: {reason}; start the service or "
                                  f"fix astuner.task_reader.env_service.env_url") from None
        except (socket.timeout, TimeoutError):
            raise EnvServiceError(f"environment service {url} did not answer within {self.timeout_s}s; "
                                  f"check the service or raise astuner.task_reader.env_service.timeout_s") from None
        except ConnectionError as exc:
            raise EnvServiceError(f"environment service {url} dropped the connection: {exc}") from None
        try:
            answer = json.loads(body)
        except ValueError:
            raise EnvServiceError(f"environment service {url} answered with invalid JSON: {body[:200]!r}") from None
        if not isinstance(answer, dict):
            raise EnvServiceError(f"environment service {url} answered {answer!r}, not a JSON object")
        return answer

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
