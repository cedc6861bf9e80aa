"""What the OpenAI gateway costs per model call: the same call made by the agent through `ModelTuner` (in process)
and through the gateway (HTTP on 127.0.0.1, the request checked, the reply as JSON or server-sent events), side by
side in one run, on a fake engine that answers a tool call after a fixed latency. Both routes render, tokenize and
parse alike (ModelTuner.prepare / complete), so the difference is the gateway's overhead: with a plain httpx client,
and with the openai SDK (its own request building and response parsing included). For scale, "bare HTTP" is one
round trip of the same client and server stack (httpx, uvicorn with httptools and uvloop, Starlette) to an endpoint
that only waits the engine's latency: what any HTTP hop costs on the machine, before the gateway does anything.

    python bench/gateway_overhead.py [--calls 300] [--latency-ms 0,20] [--concurrent 64]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path

REPLY = '<tool_call>\n{"name": "read_sensor", "arguments": {}}\n</tool_call>'
TOOLS = [{"type": "function", "function": {"name": "read_sensor", "description": "Read the sensor.",
                                           "parameters": {"type": "object", "properties": {}, "required": []}}}]
MESSAGES = [{"role": "system", "content": "Call read_sensor, then answer in \\boxed{}."},
            {"role": "user", "content": "What does sensor S123 read?"}]


class FixedLatencyEngine:
    def __init__(self, tokenizer, latency_s: float):
        from astuner.model.engines.base import GenerateResult

        ids = tokenizer.encode(REPLY, add_special_tokens=False) + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
        self.result = lambda: GenerateResult(list(ids), [-0.1] * len(ids), "stop")
        self.latency_s = latency_s

    async def generate(self, prompt_ids, sampling):
        await asyncio.sleep(self.latency_s)
        return self.result()

    async def update_weights(self, state_dict):
        return None


def bare_server(latency_s: float) -> str:
    """The gateway's server stack with one endpoint that reads the body and waits `latency_s`."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    from astuner.gateway.server import _loop_factory

    async def wait(request):
        await request.body()
        await asyncio.sleep(latency_s)
        return Response(b'{"ok": true}', media_type="application/json")

    sock = socket.socket()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    server = uvicorn.Server(uvicorn.Config(Starlette(routes=[Route("/wait", wait, methods=["POST"])]),
                                           log_level="warning", lifespan="off"))

    def serve():
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(server.serve(sockets=[sock]))

    threading.Thread(target=serve, daemon=True).start()
    while not server.started:
        time.sleep(0.01)
    return f"http://127.0.0.1:{sock.getsockname()[1]}"


async def timed(call, calls: int, recorders: list) -> list[float]:
    """Each call as the first of an episode: the recorders are emptied before it (an episode holds a few calls; a
    recorder holding every call of the run would time the search for the call a prompt continues instead)."""
    await call()  # warm (the gateway starts, the connection opens)
    times = []
    for _ in range(calls):
        for recorder in recorders:
            recorder.calls.clear()
        started = time.perf_counter()
        await call()
        times.append(time.perf_counter() - started)
    return sorted(times)


async def measure(tokenizer, calls: int, latency_s: float, concurrent: int) -> None:
    import httpx

    from astuner import ModelTuner
    from astuner.model.engines.base import SamplingParams

    engine = FixedLatencyEngine(tokenizer, latency_s)

    def tuner():
        return ModelTuner(engine, tokenizer, SamplingParams(1.0, 1.0, 64), 4096, loop=asyncio.get_running_loop())

    direct, routed = tuner(), tuner()
    base_url, key = routed.as_openai_base_url()
    client = routed.as_openai_client()
    http = httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {key}"})
    bare = httpx.AsyncClient(base_url=bare_server(latency_s))
    body = {"model": "m", "messages": MESSAGES, "tools": TOOLS}

    async def raw(stream: bool):
        if not stream:
            return (await http.post("/chat/completions", json=body)).json()
        async with http.stream("POST", "/chat/completions", json={**body, "stream": True}) as response:
            async for _ in response.aiter_lines():
                pass

    async def sdk(stream: bool):
        if not stream:
            return await client.chat.completions.create(**body)
        async for _ in await client.chat.completions.create(**body, stream=True):
            pass

    routes = {"ModelTuner (in process)": lambda: direct(MESSAGES, TOOLS),
              "bare HTTP (same stack)": lambda: bare.post("/wait", json=body),
              "gateway, httpx, whole": lambda: raw(False),
              "gateway, httpx, streamed": lambda: raw(True),
              "gateway, openai SDK, whole": lambda: sdk(False),
              "gateway, openai SDK, stream": lambda: sdk(True)}
    medians = {}
    print(f"\nengine latency {latency_s * 1000:.0f} ms: {calls} sequential calls per route, then {concurrent} at once")
    print(f"{'route':28} {'median ms':>10} {'p90 ms':>8} {'overhead ms':>12} {f'{concurrent} at once s':>14}")
    for name, call in routes.items():
        times = await timed(call, calls, [direct.recorder, routed.recorder])
        medians[name] = statistics.median(times)
        started = time.perf_counter()
        await asyncio.gather(*[call() for _ in range(concurrent)])
        burst = time.perf_counter() - started
        base = medians["ModelTuner (in process)"]
        print(f"{name:28} {medians[name] * 1000:10.2f} {times[int(0.9 * len(times))] * 1000:8.2f} "
              f"{(medians[name] - base) * 1000:12.2f} {burst:14.3f}")
    own = medians["gateway, httpx, whole"] - medians["bare HTTP (same stack)"]
    print(f"the gateway's own work beyond a bare HTTP round trip: {own * 1000:.2f} ms a call")
    await client.close()
    await http.aclose()
    await bare.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--latency-ms", default="0,20", help="comma-separated engine latencies")
    parser.add_argument("--concurrent", type=int, default=64)
    args = parser.parse_args()
    from transformers import AutoTokenizer

    from astuner.model.tiny_model import build_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = AutoTokenizer.from_pretrained(build_tiny_model(Path(tmp) / "model", seed=0))
    for latency in args.latency_ms.split(","):
        asyncio.run(measure(tokenizer, args.calls, float(latency) / 1000, args.concurrent))


if __name__ == "__main__":
    main()
