"""A Ray cluster of two nodes on this machine, loopback only, for the tests that place a run across nodes: a head
(`ray start --head`) and a second node joined to it with `ray start --address`, each holding its own logical GPUs
(the CPU mode's placement), as a user who outgrows one machine builds it on two.

Why a guard is lifted for the second node: on one machine both nodes must stay on 127.0.0.1. Ray's "cluster mode"
(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER, on by default on Linux) turns 127.0.0.1 into the machine's address and binds
every interface; with it off, Ray binds loopback only, but `ray start --address` refuses to join ("Multi-node Ray
clusters are not supported on Windows and OSX"). The second node therefore runs Ray's own `ray start` command with
cluster mode off and that one refusal lifted (its CLI module sees cluster mode on, the rest of Ray sees it off).
The run's driver gets cluster mode off as well (as on a user's loopback cluster), so it keeps 127.0.0.1."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from astuner.backbone.ray_cluster import _stop_head, ray_cli_path

JOIN = """
import sys, types
import ray._private.ray_constants as constants
from ray.scripts import scripts
seen = {k: v for k, v in vars(constants).items() if not k.startswith("__")}
scripts.ray_constants = types.SimpleNamespace(**{**seen, "ENABLE_RAY_CLUSTER": True})
sys.exit(scripts.main())
"""

# Run in a driver of its own after a run: every actor the cluster recorded, with the node it ran on.
ACTORS = """
import json, ray
ray.init(logging_level="ERROR")
nodes = {n["NodeID"]: "head" if "node:__internal_head__" in n["Resources"] else "second" for n in ray.nodes()}
actors = [{"class": a["ActorClassName"], "name": a.get("Name") or "", "node": nodes.get(a["Address"]["NodeID"], "?")}
          for a in ray._private.state.actors().values()]
print("ACTORS " + json.dumps(actors))
"""


@contextmanager
def two_node_cluster(gpus_per_node: int = 1) -> Iterator[dict[str, str]]:
    """Start the two nodes; yield the environment a run uses them with (RAY_ADDRESS and cluster mode off); stop
    exactly their processes (by process group and children) afterwards."""
    temp = Path(tempfile.mkdtemp(prefix="rn", dir="/tmp"))  # short: Ray puts unix sockets below it
    env = {**os.environ, "RAY_TMPDIR": str(temp), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled",
           "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    resources = [f"--num-gpus={gpus_per_node}", f"--num-cpus={8 * max(gpus_per_node, 2)}", "--node-ip-address=127.0.0.1"]
    groups: list[int] = []

    def start(argv: list[str], what: str) -> None:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                start_new_session=True)
        groups.append(proc.pid)
        output, _ = proc.communicate(timeout=180)
        if proc.returncode != 0:
            raise RuntimeError(f"{what} failed:\n{output[-3000:]}")

    try:
        start([ray_cli_path(), "start", "--head", "--port=0", f"--temp-dir={temp}", "--include-dashboard=false",
               *resources], "ray start --head")
        address = (temp / "ray_current_cluster").read_text().strip()
        start([sys.executable, "-c", JOIN, "start", f"--address={address}", *resources], "ray start --address")
        yield {**env, "RAY_ADDRESS": address}
    finally:
        for group in reversed(groups):
            _stop_head(group)
        shutil.rmtree(temp, ignore_errors=True)


def actors_by_node(env: dict[str, str]) -> list[dict[str, str]]:
    """The actors the cluster ran (class, name, "head" or "second" node), read through a driver of its own."""
    proc = subprocess.run([sys.executable, "-c", ACTORS], env=env, capture_output=True, text=True, timeout=120)
    line = next((line for line in proc.stdout.splitlines() if line.startswith("ACTORS ")), None)
    assert line is not None, proc.stderr[-3000:]
    return json.loads(line[len("ACTORS "):])
