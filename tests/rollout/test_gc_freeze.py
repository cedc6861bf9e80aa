"""While rollouts run, the objects from before them are frozen; afterwards they are back, collectable, and what the
rollouts dropped has been collected."""

from __future__ import annotations

import asyncio
import gc
import socket

import pytest

from astuner.rollout.gc_freeze import collect_rollout_garbage, objects_frozen


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


def _dropped_socket_cycle() -> socket.socket:
    """A socket held only by a reference cycle (as an unclosed client holds its connection); its peer returned."""
    mine, peer = socket.socketpair()
    holder: dict = {"sock": mine}
    holder["self"] = holder
    return peer


def _closed(peer: socket.socket) -> bool:
    peer.setblocking(False)
    try:
        return peer.recv(1) == b""  # end of file: the other end was closed
    except BlockingIOError:
        return False


def test_what_a_rollout_dropped_in_a_cycle_is_freed_when_the_rollout_ends(nothing_frozen):
    """The collector made to wait (automatic passes off): a socket the rollout left in a cycle is closed once the
    last rollout ends, not at some later full pass."""
    gc.disable()
    try:
        with objects_frozen():
            peer = _dropped_socket_cycle()
            with objects_frozen():
                pass
            assert not _closed(peer)  # another rollout still runs
        assert _closed(peer)
    finally:
        gc.enable()
        peer.close()


def test_collect_rollout_garbage_while_rollouts_run(nothing_frozen):
    assert collect_rollout_garbage() is None  # no freeze of ours: a collection would walk everything
    gc.disable()
    try:
        with objects_frozen():
            peer = _dropped_socket_cycle()
            assert collect_rollout_garbage() >= 1 and _closed(peer)
    finally:
        gc.enable()
        peer.close()
