"""What the machine (or the Ray cluster) a distributed run starts on has: GPUs per node and free memory.

Read without torch or CUDA: device files and the *_VISIBLE_DEVICES variables for this node's GPUs, Ray's
own node table for a cluster the user gave, /proc/meminfo (or psutil) for memory, nvidia-smi for a GPU's memory.
Tests replace these readings (`visible_gpus`, `cluster_gpus_per_node`, `available_memory`, `gpu_memory`) to show
what a run would do elsewhere.
"""

from __future__ import annotations

import functools
import glob
import os
import re
from pathlib import Path
from typing import Any, Optional

from astuner.errors import ConfigError

GPUS_KEY = "astuner.trainer_common.n_gpus_per_node"


def visible_gpus() -> int:
    """GPUs this process may use on this node: CUDA_VISIBLE_DEVICES (HIP_/ROCR_ for AMD) when set, else the
    device files (/dev/nvidia0, ...; /dev/dri/renderD* beside /dev/kfd)."""
    for name in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        value = os.environ.get(name)
        if value is not None:
            return len([d for d in value.split(",") if d.strip() and d.strip() != "-1"])
    nvidia = [p for p in glob.glob("/dev/nvidia*") if re.fullmatch(r"/dev/nvidia\d+", p)]
    if nvidia:
        return len(nvidia)
    return len(glob.glob("/dev/dri/renderD*")) if Path("/dev/kfd").exists() else 0


def gpu_present() -> bool:
    """Whether this process sees an accelerator (`machine.visible_gpus`: *_VISIBLE_DEVICES, device files); no
    torch import."""
    return visible_gpus() > 0


def cpu_mode(run: Any) -> bool:
    """The backbone runs on the CPU: `trainer_common.device: cpu`, or `auto` on a machine without a GPU."""
    device = run.astuner.trainer_common.device
    return device == "cpu" or (device == "auto" and not gpu_present())


def cluster_gpus_per_node() -> Optional[int]:
    """GPUs per node of the Ray cluster the user gave (RAY_ADDRESS, or the one `ray start` recorded), as Ray
    reports them: the smallest count among its alive nodes that have any. None without such a cluster."""
    from astuner.backbone.ray_cluster import ADDRESS_ENV, recorded_cluster

    address = os.environ.get(ADDRESS_ENV) or recorded_cluster()
    if not address:
        return None
    counts = _cluster_gpus(address)
    if counts is None:
        return None
    counts = [c for c in counts if c > 0]
    return min(counts) if counts else 0


def cluster_nodes() -> Optional[int]:
    """The alive nodes of the Ray cluster the user gave (RAY_ADDRESS, or the one `ray start` recorded); None
    without such a cluster."""
    from astuner.backbone.ray_cluster import ADDRESS_ENV, recorded_cluster

    address = os.environ.get(ADDRESS_ENV) or recorded_cluster()
    counts = _cluster_gpus(address) if address else None
    return None if counts is None else len(counts)


@functools.lru_cache(maxsize=8)
def _cluster_gpus(address: str) -> Optional[tuple[int, ...]]:
    """Each alive node's GPUs, as Ray reports them; None where the cluster is not reachable."""
    from astuner.backbone.ray_cluster import cluster_reachable

    if not cluster_reachable():
        return None
    import ray

    if ray.is_initialized():
        nodes = ray.nodes()
    else:  # a short connection of its own: the backbone's ray.init later sets the workers' environment
        import signal

        handler = signal.getsignal(signal.SIGTERM)  # ray.init replaces it with its own, and leaves it there
        try:
            ray.init(address=address, logging_level="ERROR", log_to_driver=False)
            nodes = ray.nodes()
        except Exception as exc:  # noqa: BLE001 - auth, version mismatch, ...: one line for the user
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise ConfigError(f"{GPUS_KEY} is auto, but the Ray cluster at {address} did not report its GPUs "
                              f"({first}); set {GPUS_KEY}, or fix RAY_ADDRESS") from None
        finally:
            ray.shutdown()
            if handler is not None:
                signal.signal(signal.SIGTERM, handler)
    return tuple(int(n.get("Resources", {}).get("GPU", 0)) for n in nodes if n.get("Alive"))


def counted_gpus(run: Any) -> tuple[int, str]:
    """(GPUs per node, where the number came from): `trainer_common.n_gpus_per_node`, with `auto` counted: on a
    Ray cluster the user gave, its GPUs per node; else the GPUs visible here. In the CPU mode `auto` is one
    logical GPU (verl's placement groups on the run's Ray head). No GPU to count where the run needs one is a
    ConfigError naming the key."""
    value = run.astuner.trainer_common.n_gpus_per_node
    if value != "auto":
        return int(value), "set"
    if cpu_mode(run):
        return 1, "auto: CPU mode, a logical GPU of the run's Ray head"
    cluster = cluster_gpus_per_node()
    count = cluster if cluster is not None else visible_gpus()
    where = "the Ray cluster reports" if cluster is not None else "this machine shows"
    if count <= 0:
        raise ConfigError(f"{GPUS_KEY} is auto but {where} no GPU (astuner.trainer_common.device: "
                          f"{run.astuner.trainer_common.device}); set {GPUS_KEY} to the GPUs per node of the "
                          f"machine the run is for, or astuner.trainer_common.device=cpu")
    return count, f"auto: {where} {count}"


def gpus_per_node(run: Any) -> int:
    """`trainer_common.n_gpus_per_node` as a number (see `counted_gpus`)."""
    return counted_gpus(run)[0]


def gpu_memory() -> Optional[int]:
    """Bytes of memory of this node's largest GPU as nvidia-smi reports it (no torch, no CUDA context); None
    without a visible GPU or nvidia-smi (the checks that need it then run where the run starts)."""
    import shutil
    import subprocess

    if visible_gpus() == 0 or shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
        sizes = [int(float(line.strip())) for line in out.splitlines() if line.strip()]
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return max(sizes) * 2**20 if sizes else None


def available_memory() -> int:
    """Bytes of memory available to new processes now: the machine's MemAvailable (psutil where /proc is
    missing), or less where this process's cgroup (a container, a batch job) allows less."""
    machine = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                machine = int(line.split()[1]) * 1024
    except OSError:
        pass
    if machine is None:
        import psutil

        machine = int(psutil.virtual_memory().available)
    limit = cgroup_room()
    return machine if limit is None else min(machine, limit)


def cgroup_room() -> Optional[int]:
    """Bytes this process's cgroup may still use (cgroup v2 memory.max − memory.current, or v1's limit −
    usage); None without a limit."""
    v2 = Path("/sys/fs/cgroup")
    for limit_file, usage_file in ((v2 / "memory.max", v2 / "memory.current"),
                                   (v2 / "memory" / "memory.limit_in_bytes", v2 / "memory" / "memory.usage_in_bytes")):
        try:
            limit, usage = limit_file.read_text().strip(), int(usage_file.read_text().strip())
        except (OSError, ValueError):
            continue
        if limit == "max" or int(limit) >= 2**60:  # no limit (v1 writes a huge number)
            return None
        return max(0, int(limit) - usage)
    return None
