"""The per-episode environment handle a workflow receives as `workflow_task.env` for env-service tasks."""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from astuner.env_service.client import EnvServiceClient


class EnvHandle:
    """One environment instance, created on first use and released when the episode ends.
    The HTTP calls run in worker threads, so many episodes can wait on the service at once."""

    def __init__(self, client: EnvServiceClient, env_type: str, task_id: str, instance_id: str):
        self.client, self.env_type, self.task_id, self.instance_id = client, env_type, task_id, instance_id
        self.created: Optional[dict[str, Any]] = None

    async def create(self) -> dict[str, Any]:
        """Start the instance; returns {"instance_id", "query", "init_messages", "info"} (once per episode)."""
        if self.created is None:
            self.created = await asyncio.to_thread(self.client.create, self.env_type, self.task_id, self.instance_id)
        return self.created

    async def step(self, action: dict[str, Any]) -> dict[str, Any]:
        await self.create()
        return await asyncio.to_thread(self.client.step, self.instance_id, action)

    async def evaluate(self, params: Optional[dict[str, Any]] = None) -> dict[str, Any]:
        await self.create()
        return await asyncio.to_thread(self.client.evaluate, self.instance_id, params)

    async def release(self) -> bool:
        if self.created is None:
            return False
        self.created = None
        return await asyncio.to_thread(self.client.release, self.instance_id)
