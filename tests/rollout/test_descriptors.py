"""A process near its open-file limit says so in one line before it fails, its rollouts' garbage is collected
early when descriptors run short, and the soft limit is raised to the hard one where it can be."""

from __future__ import annotations

import asyncio
import gc
import resource
import socket
import subprocess
import sys

import pytest
from loguru import logger

from astuner import Workflow, WorkflowOutput
from astuner.rollout import descriptors
from astuner.rollout.gc_freeze import objects_frozen
from astuner.rollout.manager import RolloutManager
from tests.conftest import REPO_ROOT
from tests.helpers import ScriptedEngine


@pytest.fixture
def fresh(monkeypatch):
    """The module's once-per-process state as at start-up; a warning sink."""
    monkeypatch.setattr(descriptors, "_warned", False)
    monkeypatch.setattr(descriptors, "_ended", 0)
    monkeypatch.setattr(descriptors, "_collected_at", None)
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m).rstrip("\n")), level="WARNING", format="{message}")
    yield lines
    logger.remove(sink)


def test_near_the_limit_one_line_once(fresh, monkeypatch):
    monkeypatch.setattr(descriptors, "soft_limit", lambda: 1024)
    monkeypatch.setattr(descriptors, "open_count", lambda: 700)
    assert not descriptors.check()
    assert fresh == []
    monkeypatch.setattr(descriptors, "open_count", lambda: 830)
    descriptors.rollouts_ended()
    descriptors.rollouts_ended()
    assert len(fresh) == 1 and "\n" not in fresh[0] and len(fresh[0]) <= 300, fresh
    assert fresh[0].startswith("830 of 1024 open files (ulimit -n) in use after this step's episodes")
    assert "never closes" in fresh[0] and "ulimit -n 65536" in fresh[0]


def test_no_limit_or_no_count_says_nothing(fresh, monkeypatch):
    monkeypatch.setattr(descriptors, "soft_limit", lambda: None)
    assert not descriptors.check()
    monkeypatch.setattr(descriptors, "soft_limit", lambda: 100)
    monkeypatch.setattr(descriptors, "open_count", lambda: None)
    assert not descriptors.check() and fresh == []


def test_the_count_is_the_processs_descriptors():
    before = descriptors.open_count()
    pair = socket.socketpair()
    try:
        assert descriptors.open_count() == before + 2
    finally:
        for s in pair:
            s.close()


def test_short_of_descriptors_the_rollouts_garbage_is_collected_while_they_run(fresh, monkeypatch):
    """Past half the limit, a socket an ended episode left in a cycle is closed within CHECK_EVERY episodes, not at
    the end of the step's rollouts (the collector's automatic passes off, as a long step's oldest garbage waits)."""
    limit = 2 * descriptors.open_count()  # half of it in use once the pair below is open
    monkeypatch.setattr(descriptors, "soft_limit", lambda: limit)
    had = gc.get_freeze_count()
    gc.unfreeze()
    gc.disable()
    try:
        with objects_frozen():
            mine, peer = socket.socketpair()
            holder: dict = {"sock": mine}
            holder["self"] = holder
            del mine, holder
            peer.setblocking(False)
            for _ in range(descriptors.CHECK_EVERY):
                descriptors.episode_ended()
            assert peer.recv(1) == b""  # closed: the cycle was collected
    finally:
        gc.enable()
        if had:
            gc.freeze()
        peer.close()


def test_the_soft_limit_is_raised_to_the_hard_one_and_logged():
    code = ("import resource; from astuner.rollout import descriptors as d; "
            "print(d.raise_soft_limit()); print(d.raise_soft_limit()); "
            "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])")

    def run(soft: int, hard: int) -> list[str]:
        def limited() -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

        proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=120, preexec_fn=limited)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.splitlines()

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = 4096 if hard == resource.RLIM_INFINITY else min(hard, 4096)
    assert run(256, top) == [f"open-file limit raised from 256 to {top} (the hard limit; ulimit -n)", "None",
                             str(top)]
    assert run(256, 256) == ["None", "None", "256"]  # `ulimit -n 256` sets both: nothing to raise


KEPT: list = []  # sockets a workflow keeps for good (a client cached in a module's global, say)


class KeepsSockets(Workflow):
    async def execute(self, workflow_task, model_tuner):
        KEPT.extend(socket.socketpair())
        return WorkflowOutput(reward=1.0)


def test_a_rollout_that_holds_descriptors_for_good_is_warned_about_while_it_runs(fresh, monkeypatch, tokenizer):
    """What no collection can free: the warning comes while the episodes run, once, before the limit is reached."""
    from tests.rollout.test_manager import config, tasks

    limit = descriptors.open_count() + 40  # 16 episodes x 2 sockets pass 80 % of it, not the limit
    monkeypatch.setattr(descriptors, "soft_limit", lambda: limit)
    manager = RolloutManager(config(num_repeat=8, max_env_worker=1), KeepsSockets, None,
                             ScriptedEngine(tokenizer, ["x"]), tokenizer)
    try:
        asyncio.run(manager.run(tasks(2)))  # 16 episodes, counted after the 8th and the 16th
    finally:
        for s in KEPT:
            s.close()
        KEPT.clear()
    assert len(fresh) == 1 and "in use while episodes run" in fresh[0], fresh
