"""--with-ray: a head private to the run, on 127.0.0.1, stopped by process id when the run stops it or is
terminated or killed; a cluster the user gave is reused and left alone. Real `ray start` heads; runs where
ray is installed (the verl and trinity CI jobs). Programs that could hang run in subprocesses under a time
limit."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import needs, needs_reason

needs("ray")

from astuner.backbone.ray_cluster import RayUnavailable, cluster_reachable, ensure_ray, ray_cli_path  # noqa: E402

if ray_cli_path() is None:
    pytest.skip(needs_reason("ray", ": the ray command is not installed (ray[default])"), allow_module_level=True)

REPO_ROOT = Path(__file__).resolve().parents[2]
LOOPBACK_SETTINGS = ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_USAGE_STATS_ENABLED", "RAY_AUTH_MODE")

# A run as the verl backbone makes it: agentscope (which imports ray) is imported first, then the head is
# started, then the driver connects the way verl's run_ppo does (ray.init() reading RAY_ADDRESS) or with the
# address given; it runs a task every second until it is stopped.
RUN = """
import json, sys, time
import agentscope
import ray
from astuner.backbone.ray_cluster import ensure_ray

cluster = ensure_ray(with_ray=True)
print("CLUSTER " + json.dumps({"address": cluster.address, "pids": cluster.pids}), flush=True)
if sys.argv[1] == "wait":
    time.sleep(600)
ray.init(address=cluster.address if sys.argv[1] == "address" else None)
square = ray.remote(lambda x: x * x)
for i in range(600):
    print("TASK", ray.get(square.remote(i)), flush=True)
    time.sleep(1)
"""


def _alive(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return False


class Run:
    """`RUN` in a subprocess, its output in a file."""

    def __init__(self, mode: str, tmp: Path):
        self.out = tmp / f"run-{mode}-{time.monotonic_ns()}.log"
        with open(self.out, "w") as fh:
            self.proc = subprocess.Popen([sys.executable, "-c", RUN, mode], stdout=fh, stderr=subprocess.STDOUT,
                                         cwd=REPO_ROOT)
        self.pids: list[int] = []

    def lines(self, prefix: str) -> list[str]:
        return [line[len(prefix):] for line in self.out.read_text(errors="replace").splitlines()
                if line.startswith(prefix)]

    def wait_for(self, prefix: str, count: int = 1, timeout: float = 150) -> list[str]:
        deadline = time.time() + timeout
        while time.time() < deadline and self.proc.poll() is None and len(self.lines(prefix)) < count:
            time.sleep(0.5)
        found = self.lines(prefix)
        if len(found) < count:
            pytest.fail(f"the run printed {len(found)} {prefix.strip()!r} lines, expected {count} within "
                        f"{timeout}s (exit code {self.proc.poll()}):\n{self.out.read_text(errors='replace')[-4000:]}")
        return found

    def cluster(self) -> dict:
        info = json.loads(self.wait_for("CLUSTER ")[0])
        self.pids = info["pids"]
        return info

    def terminate(self, timeout: float = 90) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """Whatever happened, leave no process of this run behind (its own pid and the head's, nothing else)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pid in self.pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _assert_gone(pids: list[int], grace_s: float = 30) -> None:
    deadline = time.time() + grace_s
    while any(map(_alive, pids)) and time.time() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in pids if _alive(pid)]


@pytest.fixture
def no_cluster(monkeypatch):
    """No cluster given: no RAY_ADDRESS, and Ray's default temp dir (where `ray start` records the cluster it
    started) an empty one, so that a cluster someone else runs on this machine is not seen. A Ray token file
    exists, as on any machine where a local `ray.init()` ran (Ray writes ~/.ray/auth_token then)."""
    root = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray puts unix sockets below it
    monkeypatch.setenv("RAY_TMPDIR", root)
    token = Path(root) / "auth_token"
    token.write_text(secrets.token_hex(32))
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token))
    for name in ("RAY_ADDRESS", "RAY_AUTH_TOKEN", *LOOPBACK_SETTINGS):
        monkeypatch.delenv(name, raising=False)
    yield Path(root)
    shutil.rmtree(root, ignore_errors=True)


def test_without_with_ray_it_fails_fast(no_cluster):
    with pytest.raises(RayUnavailable, match="add --with-ray"):
        ensure_ray(with_ray=False)


def test_starts_on_loopback_then_stops_only_its_own_processes(no_cluster):
    cluster = ensure_ray(with_ray=True)
    try:
        assert cluster.started and cluster.pids
        assert cluster.address.startswith("127.0.0.1:")
        assert os.environ["RAY_ADDRESS"] == cluster.address  # this run (and its children) use it
        assert not (no_cluster / "ray" / "ray_current_cluster").exists()  # other runs on the machine do not
        assert cluster_reachable()
        reused = ensure_ray(with_ray=True)  # the run's own cluster, given by RAY_ADDRESS: reused, not stopped
        assert not reused.started
        reused.stop()
        assert cluster_reachable()
    finally:
        cluster.stop()
    _assert_gone(cluster.pids)
    assert not {"RAY_ADDRESS", *LOOPBACK_SETTINGS} & set(os.environ)  # the process is as it was
    assert not cluster_reachable()


def test_two_runs_use_their_own_heads_and_an_ended_run_stops_only_its_own(no_cluster, tmp_path):
    first, second = Run("address", tmp_path), None
    try:
        one = first.cluster()
        second = Run("ray_address", tmp_path)  # started while the first run's head is up
        two = second.cluster()
        assert one["address"].startswith("127.0.0.1:") and two["address"].startswith("127.0.0.1:")
        assert one["address"] != two["address"] and not set(one["pids"]) & set(two["pids"])
        # after `import agentscope` imported ray, both drivers still reach their loopback heads
        first.wait_for("TASK ", timeout=120)
        done = len(second.wait_for("TASK ", timeout=120))
        first.terminate()
        _assert_gone(one["pids"])
        assert all(map(_alive, two["pids"]))
        second.wait_for("TASK ", count=done + 2, timeout=30)  # the second run goes on working
        second.proc.kill()  # even a killed run leaves no head behind
        second.proc.wait(30)
        _assert_gone(two["pids"])
    finally:
        for run in (first, second):
            if run is not None:
                run.kill()


def test_sigterm_before_the_driver_connects_stops_the_head(no_cluster, tmp_path):
    run = Run("wait", tmp_path)
    try:
        pids = run.cluster()["pids"]
        assert pids and all(map(_alive, pids))
        assert run.terminate() == -signal.SIGTERM  # the run ends as a terminated process does
        _assert_gone(pids)
    finally:
        run.kill()


def test_auto_gpus_per_node_are_the_ones_the_given_cluster_reports(no_cluster):
    """`n_gpus_per_node: auto` on a Ray cluster the user gave (RAY_ADDRESS): the GPUs per node Ray reports there
    (a real head with 4 logical GPUs), not this machine's."""
    from astuner.backbone import machine
    from astuner.config import load_run_config

    run = load_run_config(REPO_ROOT / "tutorial" / "example_math_agent" / "math_agent.yaml",
                          ["astuner.trainer_common.device=cuda"])
    cluster = ensure_ray(with_ray=True, logical_gpus=4)
    try:
        assert machine.counted_gpus(run) == (4, "auto: the Ray cluster reports 4")
        import ray

        assert not ray.is_initialized()  # the count's connection is closed: the backbone's ray.init sets its env
    finally:
        cluster.stop()
    _assert_gone(cluster.pids)
