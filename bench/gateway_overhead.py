"""What the OpenAI gateway costs per model call: the same call made by the agent through `ModelTuner` (in process)
and through the gateway (HTTP on 127.0.0.1, the request checked, the reply as JSON or server-sent events), side by
side in one run, on a fake engine that answers a tool call after a fixed latency. Both routes render, tokenize and
parse alike (ModelTuner.prepare / complete); the difference is the gateway's overhead.

    python bench/gateway_overhead.py [--calls 300] [--latency-ms 20] [--concurrent 64]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
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


async def timed(call, calls: int) -> list[float]:
    await call()  # warm (the gateway starts, the connection opens)
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        await call()
        times.append(time.perf_counter() - started)
    return times


async def measure(tokenizer, calls: int, latency_s: float, concurrent: int) -> None:
    import openai

    from astuner import ModelTuner
    from astuner.model.engines.base import SamplingParams

    engine = FixedLatencyEngine(tokenizer, latency_s)

    def tuner():
        return ModelTuner(engine, tokenizer, SamplingParams(1.0, 1.0, 64), 4096, loop=asyncio.get_running_loop())

    direct = tuner()
    routed = tuner()
    client = routed.as_openai_client()

    async def via_gateway(stream: bool):
        if not stream:
            return await client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS)
        async for _ in await client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS, stream=True):
            pass

    routes = {"ModelTuner (in process)": lambda: direct(MESSAGES, TOOLS),
              "gateway, whole reply": lambda: via_gateway(False),
              "gateway, streamed (SSE)": lambda: via_gateway(True)}
    medians = {}
    print(f"{calls} sequential calls per route, engine latency {latency_s * 1000:.0f} ms; then {concurrent} at once")
    print(f"{'route':28} {'median ms':>10} {'p90 ms':>8} {'overhead ms':>12} {f'{concurrent} at once s':>14}")
    for name, call in routes.items():
        times = sorted(await timed(call, calls))
        medians[name] = statistics.median(times)
        started = time.perf_counter()
        await asyncio.gather(*[call() for _ in range(concurrent)])
        burst = time.perf_counter() - started
        base = medians["ModelTuner (in process)"]
        print(f"{name:28} {medians[name] * 1000:10.2f} {times[int(0.9 * len(times))] * 1000:8.2f} "
              f"{(medians[name] - base) * 1000:12.2f} {burst:14.3f}")
    await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--concurrent", type=int, default=64)
    args = parser.parse_args()
    from transformers import AutoTokenizer

    from astuner.model.tiny_model import build_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = AutoTokenizer.from_pretrained(build_tiny_model(Path(tmp) / "model", seed=0))
    asyncio.run(measure(tokenizer, args.calls, args.latency_ms / 1000, args.concurrent))


if __name__ == "__main__":
    main()
