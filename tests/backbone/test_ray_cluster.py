"""--with-ray: a local Ray head on 127.0.0.1 is started when none is reachable and stopped by process id;
a cluster that was already running is reused and left alone. Runs where ray is installed (the verl and
trinity CI jobs)."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("ray")

from astuner.backbone.ray_cluster import (CURRENT_CLUSTER_FILE, RayUnavailable, cluster_reachable,  # noqa: E402
                                          ensure_ray, ray_cli_path)

if ray_cli_path() is None:
    pytest.skip("the ray command is not installed", allow_module_level=True)


@pytest.fixture
def no_cluster(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    if cluster_reachable():
        pytest.skip("a Ray cluster is already running on this machine")
    yield
    os.environ.pop("RAY_ADDRESS", None)


def test_without_with_ray_it_fails_fast(no_cluster):
    with pytest.raises(RayUnavailable, match="add --with-ray"):
        ensure_ray(with_ray=False)


def test_starts_on_loopback_then_stops_only_its_own_processes(no_cluster):
    cluster = ensure_ray(with_ray=True)
    try:
        assert cluster.started and cluster.pids
        assert cluster.address.startswith("127.0.0.1:")
        assert cluster_reachable()
        reused = ensure_ray(with_ray=True)  # a second run finds it and starts nothing
        assert not reused.started
        reused.stop()
        assert cluster_reachable()
    finally:
        cluster.stop()
    assert not any(os.path.exists(f"/proc/{pid}") and "zombie" not in open(f"/proc/{pid}/status").read().lower()
                   for pid in cluster.pids)
    os.environ.pop("RAY_ADDRESS", None)
    assert not CURRENT_CLUSTER_FILE.exists()
    assert not cluster_reachable()
