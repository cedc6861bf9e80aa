"""While rollouts run, the objects from before them are frozen; afterwards they are back, collectable."""

from __future__ import annotations

import asyncio
import gc

import pytest

from astuner.rollout.gc_freeze import objects_frozen


@pytest.fixture
def nothing_frozen():
    """Some environments freeze objects at start-up (seen under pytest-xdist on a GPU machine): start from none."""
    had = gc.get_freeze_count()
    gc.unfreeze()
    yield
    if had:
        gc.freeze()


def test_nested_and_concurrent_rollouts_share_one_freeze(nothing_frozen):
    assert gc.get_freeze_count() == 0
    with objects_frozen():
        frozen = gc.get_freeze_count()
        assert frozen > 0
        made_since = [[] for _ in range(10_000)]
        with objects_frozen():  # the second does not freeze what was made since the first
            assert gc.get_freeze_count() < frozen + len(made_since)
        assert frozen // 2 < gc.get_freeze_count() <= frozen  # nor does it unfreeze when it ends
    assert gc.get_freeze_count() == 0


def test_a_failing_rollout_unfreezes(nothing_frozen):
    async def fails():
        with objects_frozen():
            await asyncio.sleep(0)
            raise RuntimeError("boom")

    try:
        asyncio.run(fails())
    except RuntimeError:
        pass
    assert gc.get_freeze_count() == 0


def test_a_freeze_made_by_the_process_itself_is_left_alone(nothing_frozen):
    # Frozen objects can still be freed by reference counting (by any thread), so the count may fall a little while
    # the test runs; what must not happen is a second freeze (the objects made since would join it) or an unfreeze
    # (the count would fall to 0).
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        made_since = [[] for _ in range(10_000)]
        with objects_frozen():
            assert gc.get_freeze_count() < frozen + len(made_since)
        assert frozen // 2 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()
