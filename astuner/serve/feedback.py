"""The Python helper of `POST /v1/feedback`: a reward (and optional metadata) for a served episode."""

from __future__ import annotations

from typing import Any, Optional


class FeedbackRefused(RuntimeError):
    """The server answered the feedback with an error (its message), or no server answered."""


def send_feedback(base_url: str, api_key: str, episode: str, reward: float,
                  metadata: Optional[dict[str, Any]] = None, timeout_s: float = 30.0) -> dict[str, Any]:
    """Record `reward` for `episode` (the `X-Session-Id` of its replies) on the `astuner serve` at `base_url`
    (its `/v1` URL); the server's answer, or FeedbackRefused with its message."""
    import httpx

    try:
        response = httpx.post(f"{base_url.rstrip('/')}/feedback", json=_body(episode, reward, metadata),
                              timeout=timeout_s, headers={"Authorization": f"Bearer {api_key}"})
    except httpx.TransportError as exc:
        raise _unreachable(base_url, exc) from None
    return _answer(response)


async def send_feedback_async(base_url: str, api_key: str, episode: str, reward: float,
                              metadata: Optional[dict[str, Any]] = None, timeout_s: float = 30.0) -> dict[str, Any]:
    """The same from async code (an agent's own event loop), without a thread."""
    import httpx

    try:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            response = await client.post(f"{base_url.rstrip('/')}/feedback", json=_body(episode, reward, metadata),
                                         headers={"Authorization": f"Bearer {api_key}"})
    except httpx.TransportError as exc:
        raise _unreachable(base_url, exc) from None
    return _answer(response)


def _unreachable(base_url: str, exc: Exception) -> FeedbackRefused:
    return FeedbackRefused(f"feedback not sent: no server answered at {base_url} ({type(exc).__name__}: {exc})")


def _body(episode: str, reward: float, metadata: Optional[dict[str, Any]]) -> dict[str, Any]:
    body: dict[str, Any] = {"episode": episode, "reward": reward}
    if metadata is not None:
        body["metadata"] = metadata
    return body


def _answer(response: Any) -> dict[str, Any]:
    if response.status_code != 200:
        try:
            message = response.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = response.text[:300]
        raise FeedbackRefused(f"feedback refused (HTTP {response.status_code}): {message}")
    return response.json()
