"""Agents that never close their OpenAI clients: the gateway closes an ended episode's connections, the rollouts'
garbage (the clients, their sockets) is freed when the step's rollouts end, and the tiny demo's agent written that
way trains under a descriptor limit it used to exhaust within three steps."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import time

import httpx

from astuner import ModelTuner
from astuner.model.engines.base import SamplingParams
from tests.conftest import REPO_ROOT
from tests.helpers import ScriptedEngine

AGENT = "tests/gateway/unclosed_client_agent.py->UnclosedClientWorkflow"
LIMIT = 192  # open files (soft and hard): 64 more each step used to exhaust it at step 3 (4 tasks x 8 episodes)
STEPS = 6


def test_the_unclosed_client_agent_trains_under_a_low_descriptor_limit(tmp_path):
    """The tiny demo's agent with one AsyncOpenAI per episode, never closed (both ends of each connection in the
    run's process), through the gateway: every step trains without a failed episode and the descriptors open
    while episodes run do not grow from step to step (they grew by 64 a step, and the run died at step 3)."""
    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))  # hard too: nothing to raise the soft one to

    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.run(
        [sys.executable, "-m", "astuner", "--conf", "tutorial/example_tiny_cpu/tiny_cpu.yaml", "--exp-dir",
         str(tmp_path), f"astuner.model.path={tmp_path / 'model'}", f"astuner.rollout.agentscope_workflow={AGENT}",
         "astuner.rollout.openai_gateway.enable=true", "astuner.data.train_batch_size=4",
         f"astuner.trainer_common.total_training_steps={STEPS}", "astuner.trainer_common.val_before_train=false",
         "astuner.trainer_common.test_freq=-1", "astuner.trainer_common.save_freq=-1"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600, preexec_fn=limited)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "tiny_cpu" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert all(r["rollout/error_rate"] == 0.0 for r in rows)
    fds = [r["workflow/open_fds"] for r in rows]
    assert max(fds) < fds[0] + 32, fds  # no step keeps the last one's sockets
    assert "open files (ulimit -n)" not in (tmp_path / "tiny_cpu" / "astuner.log").read_text()


def _tuner(engine, tokenizer):
    return ModelTuner(engine, tokenizer, SamplingParams(1.0, 1.0, 16), 8192, loop=asyncio.get_running_loop())


def test_the_gateway_closes_an_ended_episodes_connections_and_only_those(tokenizer):
    """Three episodes on keep-alive connections: one client per episode (a, b) and one client shared by the
    episodes b and c. When a ends its connection is closed; the shared one stays open until both b and c ended."""
    async def go():
        from astuner.gateway import gateway_for

        engine = ScriptedEngine(tokenizer, ["hi"] * 8)
        a, b, c = (_tuner(engine, tokenizer) for _ in range(3))
        gateway = gateway_for()
        base_url = gateway.base_url
        key = {t: t.as_openai_base_url()[1] for t in (a, b, c)}
        server_conns = gateway._server.server_state.connections

        def peers():
            return {conn.client for conn in list(server_conns)}

        async def call(http, tuner):
            response = await http.post(f"{base_url}/chat/completions",
                                       headers={"Authorization": f"Bearer {key[tuner]}"},
                                       json={"messages": [{"role": "user", "content": "x"}]})
            assert response.status_code == 200, response.text

        async def until(condition):
            deadline = time.monotonic() + 10
            while not condition() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            return condition()

        async def connect(http, tuner):
            before = peers()
            await call(http, tuner)
            return peers() - before

        own_a, own_b, shared = httpx.AsyncClient(), httpx.AsyncClient(), httpx.AsyncClient()
        conn_a, conn_b, conn_shared = await connect(own_a, a), await connect(own_b, b), await connect(shared, b)
        assert await connect(shared, c) == set()  # the shared client's connection again
        assert all(len(conn) == 1 for conn in (conn_a, conn_b, conn_shared))
        a.recorder.close()
        a_closed = await until(lambda: not (conn_a & peers()))
        b.recorder.close()
        b_closed = await until(lambda: not (conn_b & peers()))  # closed with any other of b's it closes
        shared_open = bool(conn_shared & peers())
        c.recorder.close()
        shared_closed = await until(lambda: not (conn_shared & peers()))
        for http in (own_a, own_b, shared):
            await http.aclose()
        return a_closed, b_closed, shared_open, shared_closed

    a_closed, b_closed, shared_open, shared_closed = asyncio.run(go())
    assert a_closed and b_closed and shared_closed
    assert shared_open
