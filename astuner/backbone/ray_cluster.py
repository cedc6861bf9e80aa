"""`--with-ray`: reuse a reachable Ray cluster, or start a local head on 127.0.0.1 and, on exit, stop
exactly the processes that start created — found by process id, never by name."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from loguru import logger

from astuner.errors import UserError

CURRENT_CLUSTER_FILE = Path("/tmp/ray/ray_current_cluster")
# Ray binds a head to the machine's network address even when asked for 127.0.0.1 unless "cluster mode"
# is off; a local head started here must listen on loopback only.
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}


class RayUnavailable(UserError):
    pass


def ray_cli_path() -> Optional[str]:
    """The `ray` command of this Python environment (beside the interpreter), else the one on PATH."""
    beside = Path(sys.executable).parent / "ray"
    return str(beside) if beside.exists() else shutil.which("ray")


def _ray_cli() -> str:
    ray = ray_cli_path()
    if ray is None:
        raise RayUnavailable("the ray command is not installed in this environment; install the backbone's extra "
                             "(pip install 'astuner[verl]' or 'astuner[trinity]')")
    return ray


def cluster_reachable(timeout_s: float = 30.0) -> bool:
    """Whether `ray status` reaches a cluster (RAY_ADDRESS, or the one recorded in /tmp/ray)."""
    try:
        proc = subprocess.run([_ray_cli(), "status"], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0


def _process_ids() -> set[int]:
    return {int(p) for p in os.listdir("/proc") if p.isdigit()}


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@dataclass
class RayCluster:
    started: bool
    address: Optional[str] = None
    pids: list[int] = field(default_factory=list)
    cluster_file_before: Optional[str] = None

    def stop(self) -> None:
        """Stop what `ensure_ray` started (nothing when it reused a cluster)."""
        if not self.started:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            alive = [pid for pid in self.pids if Path(f"/proc/{pid}").exists()]
            for pid in alive:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.time() + 10
            while alive and time.time() < deadline:
                alive = [pid for pid in alive if Path(f"/proc/{pid}").exists() and
                         "zombie" not in Path(f"/proc/{pid}/status").read_text(errors="replace").lower()]
                time.sleep(0.2)
            if not alive:
                break
        # Ray leaves the address of the cluster it started behind; restore what was there before
        if CURRENT_CLUSTER_FILE.exists() and self.address and self.address in CURRENT_CLUSTER_FILE.read_text():
            if self.cluster_file_before is None:
                CURRENT_CLUSTER_FILE.unlink()
            else:
                CURRENT_CLUSTER_FILE.write_text(self.cluster_file_before)
        logger.info(f"stopped the local Ray head astuner started ({len(self.pids)} processes)")


def ensure_ray(with_ray: bool) -> RayCluster:
    if cluster_reachable():
        logger.info("using the Ray cluster that is already running")
        return RayCluster(started=False)
    if not with_ray:
        raise RayUnavailable("no Ray cluster is reachable; add --with-ray to start a local one, or start Ray "
                             "yourself (ray start --head) and set RAY_ADDRESS")
    before = _process_ids()
    cluster_file_before = CURRENT_CLUSTER_FILE.read_text() if CURRENT_CLUSTER_FILE.exists() else None
    os.environ.update(LOOPBACK_ENV)  # for this process and its children (the backbone's ray.init)
    env = dict(os.environ)
    proc = subprocess.run([_ray_cli(), "start", "--head", "--node-ip-address=127.0.0.1", "--port=0",
                           "--include-dashboard=false", "--disable-usage-stats"],
                          capture_output=True, text=True, env=env, timeout=180)
    started = sorted(pid for pid in _process_ids() - before if "ray" in _cmdline(pid).lower())
    cluster = RayCluster(started=True, pids=started, cluster_file_before=cluster_file_before)
    if proc.returncode != 0:
        cluster.stop()
        raise RayUnavailable(f"ray start --head failed: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
    if CURRENT_CLUSTER_FILE.exists():
        cluster.address = CURRENT_CLUSTER_FILE.read_text().strip()
        os.environ["RAY_ADDRESS"] = cluster.address
    deadline = time.time() + 60
    while not cluster_reachable() and time.time() < deadline:
        time.sleep(1)
    logger.info(f"started a local Ray head at {cluster.address} ({len(started)} processes)")
    return cluster
