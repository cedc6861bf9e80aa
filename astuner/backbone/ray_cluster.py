"""`--with-ray`: use the Ray cluster the user gave (RAY_ADDRESS, or the one their `ray start` recorded), or start
a head private to this run on 127.0.0.1 and stop exactly the processes it is made of when the run stops it or
ends in any other way (SIGTERM, a crash) — found by process id (its process group and their children), never
by name."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from loguru import logger

from astuner.errors import UserError

ADDRESS_ENV = "RAY_ADDRESS"
# A head on 127.0.0.1 needs Ray's "cluster mode" off: in cluster mode Ray binds a head to the machine's address,
# and a driver turns 127.0.0.1 in `ray.init(address=...)` (or RAY_ADDRESS) into the machine's address, then
# retries 'Failed to connect to GCS' for ever. Ray reads RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER once, when it is
# imported (ray._private.ray_constants.ENABLE_RAY_CLUSTER; everything else here it reads when used), and
# agentscope imports ray long before a backbone starts the head. So `ensure_ray` does not rely on import order:
# it sets the environment (for `ray start`, the head's workers and our child processes) and, where ray is
# already imported, that constant in this process. It does so only when it starts the head, so a cluster the
# user gave is used with the user's own settings.
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
# Ray turns token authentication on for `ray start` whenever a token file exists (~/.ray/auth_token, which any
# local `ray.init()` writes), but not for a driver given an address, which then fails with InvalidAuthToken.
# The head and this run agree on the user's RAY_AUTH_MODE, else on "disabled" (the head listens on loopback).
LOOPBACK_ENV_DEFAULTS = {"RAY_AUTH_MODE": "disabled"}


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


def _ray_temp_root() -> Path:
    """Where Ray keeps its files unless told otherwise (as Ray decides it)."""
    return Path(os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp")


def recorded_cluster() -> Optional[str]:
    """The address of the cluster the user's `ray start` recorded (Ray's ray_current_cluster file), if any."""
    try:
        return (_ray_temp_root() / "ray" / "ray_current_cluster").read_text().strip() or None
    except OSError:
        return None


def cluster_reachable(timeout_s: float = 30.0) -> bool:
    """Whether the cluster the user gave (RAY_ADDRESS, else the one `ray start` recorded) answers. Only that one:
    `ray status` without an address would take any head running on the machine, another run's included."""
    address = os.environ.get(ADDRESS_ENV) or recorded_cluster()
    if not address:
        return False
    try:
        proc = subprocess.run([_ray_cli(), "status", "--address", address], capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0


def _process_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, process group) of every running process (zombies left out)."""
    table = {}
    for entry in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text() if entry.isdigit() else ""
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # after "pid (name) ": state, parent, group, ...
        if len(fields) > 2 and fields[0] != "Z":
            table[int(entry)] = (int(fields[1]), int(fields[2]))
    return table


def _head_processes(group: int) -> list[int]:
    """A head's running processes: its process group and their children (the raylet's workers, each in a
    process group of its own)."""
    table = _process_table()
    found = {pid for pid, (_, pgid) in table.items() if pgid == group}
    while children := {pid for pid, (parent, _) in table.items() if parent in found} - found:
        found |= children
    found.discard(os.getpid())
    return sorted(found)


def _stop_head(group: int) -> int:
    """SIGTERM to the head's processes, SIGKILL to those left after 2 s (Ray stops the processes of a head that
    ray.init started with SIGKILL alone); returns how many there were."""
    targets: set[int] = set()
    for sig, wait_s in ((signal.SIGTERM, 2), (signal.SIGKILL, 10)):
        targets |= set(_head_processes(group))  # collected before signalling: a stopped raylet's workers lose it
        alive = targets & set(_process_table())
        for pid in alive:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + wait_s
        while alive and time.time() < deadline:
            time.sleep(0.2)
            alive &= set(_process_table())
        if not alive:
            break
    return len(targets)


def _reaper(temp_dir: str) -> None:
    """`python -m astuner.backbone.ray_cluster TEMP_DIR`, started with the head: reads the head's process group
    from stdin and, once stdin closes, stops the head and removes its temp dir. Its stdin closes when the run
    stops the head, and equally when the run's process ends any other way (SIGTERM — which Ray's driver turns
    into an abort within seconds —, a crash, SIGKILL): a head never outlives the run that started it."""
    groups = [int(line) for line in sys.stdin if line.strip()]
    count = sum(_stop_head(group) for group in groups)
    shutil.rmtree(temp_dir, ignore_errors=True)
    print(f"astuner: stopped the Ray head in {temp_dir} ({count} processes)", file=sys.stderr)


@dataclass
class RayCluster:
    started: bool
    address: Optional[str] = None
    pids: list[int] = field(default_factory=list)  # the head's processes once it had started
    group: Optional[int] = None  # their process group: the pid of the `ray start` that made them
    temp_dir: Optional[Path] = None
    reaper: Optional[subprocess.Popen] = field(default=None, repr=False)
    _before: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    def _point_process_at_head(self) -> None:
        """This process and what it starts from now on: see LOOPBACK_ENV."""
        self._before = {"env": {k: os.environ.get(k) for k in (*LOOPBACK_ENV, *LOOPBACK_ENV_DEFAULTS, ADDRESS_ENV)}}
        os.environ.update(LOOPBACK_ENV)
        for key, value in LOOPBACK_ENV_DEFAULTS.items():
            os.environ.setdefault(key, value)
        constants = sys.modules.get("ray._private.ray_constants")
        if constants is not None:
            self._before["cluster_mode"] = constants.ENABLE_RAY_CLUSTER
            constants.ENABLE_RAY_CLUSTER = False

    def _restore_process(self) -> None:
        for key, value in self._before.get("env", {}).items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if "cluster_mode" in self._before:
            sys.modules["ray._private.ray_constants"].ENABLE_RAY_CLUSTER = self._before["cluster_mode"]

    def stop(self) -> None:
        """Stop what `ensure_ray` started (nothing when it used a cluster the user gave). Safe to call twice."""
        if not self.started or self.reaper is None or self.reaper.stdin.closed:
            return
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized() and ray.get_runtime_context().gcs_address == self.address:
            ray.shutdown()  # this process's driver first, as at a normal exit
        self.reaper.stdin.close()
        try:
            if self.reaper.wait(timeout=60) != 0 and self.group is not None:  # the reaper failed: do its work
                _stop_head(self.group)
                shutil.rmtree(self.temp_dir, ignore_errors=True)
        except subprocess.TimeoutExpired:
            logger.warning(f"the Ray head in {self.temp_dir} is still being stopped")
        self._restore_process()
        logger.info(f"stopped the Ray head this run started at {self.address}")


def _start_head(logical_gpus: Optional[int] = None) -> RayCluster:
    root = _ray_temp_root()
    root.mkdir(parents=True, exist_ok=True)
    # A temp dir of its own (short: Ray puts unix sockets below it), so `ray start` records the head there and
    # not where other runs on this machine look for a cluster the user started.
    temp_dir = Path(tempfile.mkdtemp(prefix="astuner-ray-", dir=root)).absolute()
    reaper = subprocess.Popen([sys.executable, "-m", "astuner.backbone.ray_cluster", str(temp_dir)],
                              cwd=Path(__file__).resolve().parents[2],  # where this astuner package is
                              stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, start_new_session=True)
    cluster = RayCluster(started=True, temp_dir=temp_dir, reaper=reaper)
    cluster._point_process_at_head()
    try:
        # A session of its own: the head's processes form one process group (the pid of this `ray start`), and
        # Ctrl-C or `timeout` signal only this run, which then stops them (or the reaper does).
        proc = subprocess.Popen([_ray_cli(), "start", "--head", "--node-ip-address=127.0.0.1", "--port=0",
                                 f"--temp-dir={temp_dir}", "--include-dashboard=false", "--disable-usage-stats",
                                 *_logical_resources(logical_gpus)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        cluster.group = proc.pid
        reaper.stdin.write(f"{proc.pid}\n")
        reaper.stdin.flush()
        output, _ = proc.communicate(timeout=180)
        cluster.pids = _head_processes(proc.pid)
        if proc.returncode != 0:
            raise RayUnavailable(f"ray start --head failed: {(output.strip().splitlines() or ['?'])[-1]}")
        cluster.address = (temp_dir / "ray_current_cluster").read_text().strip()
        os.environ[ADDRESS_ENV] = cluster.address  # this run's driver and its child processes only
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _logical_resources(gpus: Optional[int]) -> list[str]:
    """A head for a backbone running on the CPU: `gpus` logical GPUs for the backbone's placement groups
    (one per training process) and CPU slots enough for its colocated workers; Ray only counts them."""
    if gpus is None:
        return []
    return [f"--num-gpus={gpus}", f"--num-cpus={max(16, 8 * gpus, os.cpu_count() or 1)}"]


def ensure_ray(with_ray: bool, logical_gpus: Optional[int] = None) -> RayCluster:
    """The cluster the user gave, used and left alone; else, with `with_ray`, a head private to this run
    (with `logical_gpus` GPUs that Ray counts but no device backs, for a backbone on the CPU)."""
    given = os.environ.get(ADDRESS_ENV) or recorded_cluster()
    if given and cluster_reachable():
        logger.info(f"using the Ray cluster at {given}")
        return RayCluster(started=False, address=given)
    if os.environ.get(ADDRESS_ENV):
        raise RayUnavailable(f"RAY_ADDRESS={os.environ[ADDRESS_ENV]} is not reachable; start that cluster, or unset "
                             "RAY_ADDRESS (with --with-ray a local head is then started)")
    if not with_ray:
        raise RayUnavailable("no Ray cluster is reachable; add --with-ray to start a local one, or start Ray "
                             "yourself (ray start --head) and set RAY_ADDRESS")
    cluster = _start_head(logical_gpus)
    logger.info(f"started a Ray head for this run at {cluster.address} ({len(cluster.pids)} processes)")
    return cluster


if __name__ == "__main__":
    _reaper(sys.argv[1])
