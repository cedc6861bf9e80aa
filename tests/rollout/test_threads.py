"""A blocking workflow's own thread (`rollout.run_workflow_in_thread`) runs in the episode's context: what the
episode keeps in context variables (its tally of auxiliary calls) sees the thread's work."""

from __future__ import annotations

import asyncio

from astuner.model.auxiliary import _count, episode_calls
from astuner.rollout.threads import run_in_own_thread


def test_a_workflow_thread_counts_its_auxiliary_calls_for_its_episode():
    async def episode(calls: int):
        tally = episode_calls()

        async def workflow():  # what a blocking workflow's thread runs: a loop of its own
            for _ in range(calls):
                _count("referee")

        await run_in_own_thread(lambda: asyncio.run(workflow()))
        return dict(tally)

    async def both():
        return await asyncio.gather(episode(2), episode(3))

    assert asyncio.run(both()) == [{"referee": 2}, {"referee": 3}]  # each episode its own, none lost
