"""P2, rollout efficiency with a fixed-latency fake engine: how close a rollout comes to the engine's own time.

Every episode makes `--calls` model calls (tool calls, then an answer); the fake engine sleeps `--latency-ms`
asynchronously per call and replies with fixed ids. Everything else is the real path: `RolloutManager`
(max_env_worker = --workers), `ModelTuner` (chat template, tokenizer, continuation, parsing, recording) and the
context tracker (samples), with the tiny model's BPE tokenizer. Two workflows side by side: (a) one calling
ModelTuner directly, (b) an AgentScope ReActAgent with a Toolkit tool.

    ideal = ceil(episodes / workers) * calls * latency;   efficiency = ideal / wall time

    python bench/rollout_efficiency.py [--latency-ms 50] [--episodes 256] [--workers 64] [--calls 3]
                                       [--repeats 5] [--no-profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import math
import os
import pstats
import statistics
import tempfile
import time
from typing import Any, Optional

from agentscope.agent import ReActAgent
from agentscope.formatter import OpenAIChatFormatter
from agentscope.memory import InMemoryMemory
from agentscope.message import Msg, TextBlock
from agentscope.tool import Toolkit, ToolResponse

from astuner import Task, Workflow, WorkflowOutput
from astuner.config.schema import AstunerConfig
from astuner.model.engines.base import GenerateResult, SamplingParams
from astuner.rollout.manager import RolloutManager

SYSTEM = "Call read_sensor for each sensor the user names, then answer in \\boxed{}."
TOOLS = [{"type": "function", "function": {
    "name": "read_sensor", "description": "Read one sensor.",
    "parameters": {"type": "object", "properties": {"sensor": {"type": "integer"}}, "required": ["sensor"]}}}]


class FixedLatencyEngine:
    """The `Engine` protocol (astuner.model.engines.base): `latency_s` of asynchronous sleep per call, then
    fixed ids: a tool call while the prompt holds fewer than `calls - 1` tool results, else a final answer."""

    def __init__(self, tokenizer: Any, latency_s: float, calls: int):
        self.latency_s, self.calls = latency_s, calls
        end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.result_id = tokenizer.convert_tokens_to_ids("<tool_response>")
        encode = lambda text: tokenizer.encode(text, add_special_tokens=False) + [end]  # noqa: E731
        self.replies = [encode(f'<tool_call>\n{{"name": "read_sensor", "arguments": {{"sensor": {k}}}}}\n'
                               f'</tool_call>') for k in range(calls - 1)]
        self.replies.append(encode("The readings add up to \\boxed{42}."))
        self.served = 0

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> GenerateResult:
        await asyncio.sleep(self.latency_s)
        ids = self.replies[min(prompt_ids.count(self.result_id), self.calls - 1)]
        self.served += 1
        return GenerateResult(list(ids), [-0.1] * len(ids), "stop")

    async def update_weights(self, state_dict: Optional[Any]) -> None:
        return None


def read_sensor(sensor: int) -> ToolResponse:
    """Read one sensor.

    Args:
        sensor (`int`): which sensor.
    """
    return ToolResponse(content=[TextBlock(type="text", text=str(10 + sensor))])


class DirectWorkflow(Workflow):
    """(a) ModelTuner called directly: each tool call's result is appended, until the model answers."""

    async def execute(self, workflow_task, model_tuner):
        messages: list[dict] = [{"role": "system", "content": SYSTEM},
                                {"role": "user", "content": workflow_task.task.main_query}]
        while True:
            response = await model_tuner(messages, tools=TOOLS)
            uses = [b for b in response.content if b["type"] == "tool_use"]
            if not uses:
                return WorkflowOutput(reward=1.0, metadata={"final_answer": response.content[-1]["text"]})
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": u["id"], "type": "function", "function": {"name": u["name"], "arguments": u["input"]}}
                for u in uses]})
            for use in uses:
                result = read_sensor(**use["input"]).content[0]["text"]
                messages.append({"role": "tool", "tool_call_id": use["id"], "name": use["name"], "content": result})


class AgentWorkflow(Workflow):
    """(b) an AgentScope ReActAgent with a Toolkit tool (tutorial/example_agent_cpu's SensorWorkflow shape)."""

    max_iters = 3

    async def execute(self, workflow_task, model_tuner):
        toolkit = Toolkit()
        toolkit.register_tool_function(read_sensor)
        agent = ReActAgent(name="sensor_agent", sys_prompt=SYSTEM, model=model_tuner, formatter=OpenAIChatFormatter(),
                           toolkit=toolkit, memory=InMemoryMemory(), max_iters=self.max_iters)
        agent.set_console_output_enabled(False)
        result = await agent.reply(Msg("user", workflow_task.task.main_query, role="user"))
        return WorkflowOutput(reward=1.0, metadata={"final_answer": result.get_text_content() or ""})


def tiny_tokenizer(folder: str) -> Any:
    from astuner.model.engines.factory import load_tokenizer
    from astuner.model.tiny_model import build_tiny_model

    return load_tokenizer(str(build_tiny_model(folder, hidden_size=128, layers=2, heads=2, tokenizer="bpe")))


def rollout(tokenizer: Any, workflow: Any, args: argparse.Namespace, episodes: int, latency_s: float):
    cfg = AstunerConfig()
    ro = cfg.rollout
    ro.num_repeat, ro.max_env_worker, ro.episode_timeout_s = 1, args.workers, 600.0
    ro.max_model_len, ro.max_response_length_in_one_turn = 4096, 64
    engine = FixedLatencyEngine(tokenizer, latency_s, args.calls)
    manager = RolloutManager(cfg, workflow, None, engine, tokenizer)
    tasks = [Task(task_id=f"t{i}", main_query=f"Read sensors 0 to {args.calls - 2} of rack {i} and add them.")
             for i in range(episodes)]

    async def timed():  # inside the loop: asyncio.run's teardown reprs the finished task (the whole batch)
        wall, cpu = time.perf_counter(), time.process_time()
        batch = await manager.run(tasks)
        return batch, time.perf_counter() - wall, time.process_time() - cpu

    batch, wall, cpu = asyncio.run(timed())
    failed = [e for e in batch.episodes if e.failed]
    if failed:
        raise RuntimeError(f"{len(failed)} episodes failed; first:\n{failed[0].error}")
    calls = sum(len(e.recorder.calls) for e in batch.episodes)
    if calls != episodes * args.calls or engine.served != calls:
        raise RuntimeError(f"{calls} recorded calls, {engine.served} served; expected {episodes * args.calls}")
    merged = batch.metrics["rollout/samples_per_episode"]
    return wall, cpu / calls, merged


# where the time goes: the profile's cumulative time of these, as a share of the whole rollout
BUCKETS = [  # (label, (file part, function name) of which the largest counts); indented rows: part of the one above
    ("ModelTuner.__call__, all of it", [("model_tuner.py", "__call__")]),
    ("  prompt rendering (chat template)", [("incremental_render.py", "render_prompt"), ("model_tuner.py", "render")]),
    ("    tokenizer.apply_chat_template", [("tokenization_utils_base.py", "apply_chat_template")]),
    ("  prompt ids (continuation, tokenizing)", [("model_tuner.py", "_prompt_ids")]),
    ("    tokenizer.encode", [("tokenization_utils_base.py", "encode")]),
    ("  reply decoding", [("tokenization_utils_base.py", "decode")]),
    ("  reply parsing", [("tool_parser.py", "parse_reply")]),
    ("  message normalizing", [("messages.py", "normalize_messages")]),
    ("samples (context tracker)", [("tracker.py", "build_samples")]),
    ("madness checks", [("madness.py", "madness_reasons")]),
    ("agentscope ReActAgent.reply (ModelTuner included)", [("_react_agent.py", "reply")]),
    ("  agentscope formatter", [("_openai_formatter.py", "_format")]),
    ("agentscope Toolkit.register_tool_function (per episode)", [("_toolkit.py", "register_tool_function")]),
]


def profile(tokenizer: Any, workflow: Any, args: argparse.Namespace, cpu_per_call: float) -> list[str]:
    episodes = min(args.episodes, args.workers)
    profiler = cProfile.Profile()
    profiler.enable()
    rollout(tokenizer, workflow, args, episodes, 0.0)
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # (file, line, name) -> (cc, nc, tottime, cumtime, callers)
    total = sum(v[2] for v in stats.values())
    lines = []
    for label, where in BUCKETS:
        cum = max((v[3] for k, v in stats.items() for file_part, name in where if k[2] == name and file_part in k[0]),
                  default=0.0)
        if cum:
            share = cum / total
            lines.append(f"| {label} | {100 * share:.1f} % | {share * cpu_per_call * 1e6:.0f} us |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per mode")
    parser.add_argument("--no-profile", action="store_true")
    args = parser.parse_args()
    AgentWorkflow.max_iters = args.calls
    ideal = math.ceil(args.episodes / args.workers) * args.calls * args.latency_ms / 1000
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} (1, 5 min) on {os.cpu_count()} CPUs; "
          f"{args.episodes} episodes x {args.calls} calls, {args.workers} workers, {args.latency_ms:g} ms per call")
    with tempfile.TemporaryDirectory() as folder:
        tokenizer = tiny_tokenizer(folder)
    modes = {"(a) ModelTuner direct": DirectWorkflow, "(b) AgentScope ReActAgent": AgentWorkflow}
    rows = []
    for name, workflow in modes.items():
        rollout(tokenizer, workflow, args, args.workers, 0.0)  # warm: imports, template compile
        runs = [rollout(tokenizer, workflow, args, args.episodes, args.latency_ms / 1000) for _ in range(args.repeats)]
        walls = [r[0] for r in runs]
        cpu_per_call = min(r[1] for r in runs)
        rows.append((name, min(walls), walls, cpu_per_call, runs[0][2]))
    print("\n| mode | wall, best (all runs) | ideal | efficiency, best (median) | CPU per model call | "
          "samples/episode |\n| --- | --- | --- | --- | --- | --- |")
    for name, best, walls, cpu_per_call, samples in rows:
        print(f"| {name} | {best * 1000:.0f} ms ({', '.join(f'{w * 1000:.0f}' for w in walls)}) | "
              f"{ideal * 1000:.0f} ms | {ideal / best:.2f} ({ideal / statistics.median(walls):.2f}) | "
              f"{cpu_per_call * 1000:.2f} ms | {samples:g} |")
    print("CPU per model call: the process's CPU time (Python, tokenizer, agentscope) over the rollout / model calls")
    if not args.no_profile:
        for (name, workflow), row in zip(modes.items(), rows):
            print(f"\n{name}: where the rollout's Python time goes (cProfile, latency 0, "
                  f"{min(args.episodes, args.workers)} episodes; per call: the share of the CPU time per model call)")
            print("| part | share | per model call |\n| --- | --- | --- |")
            print("\n".join(profile(tokenizer, workflow, args, row[3])))


if __name__ == "__main__":
    main()
