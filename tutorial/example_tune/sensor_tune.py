"""The main job's agent (tutorial/example_agent_cpu/) through the function API: an async workflow function, an
async judge function and tune() — no YAML. The run folder is ./checkpoints/AgentScope/<experiment_name>/.

    python tutorial/example_tune/sensor_tune.py                       # CPU: a tiny model (see --model)
    python tutorial/example_tune/sensor_tune.py --model Qwen/Qwen2.5-0.5B-Instruct --steps 60   # a real model

Without --model it trains the main job's warm-started tiny model when that job has run
(launcher_record/sensor_agent/checkpoints/global_step_0/model), else a fresh random tiny model, which learns
little: the warm start is what teaches it the tool protocol.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agentscope.agent import ReActAgent
from agentscope.formatter import OpenAIChatFormatter
from agentscope.memory import InMemoryMemory
from agentscope.message import Msg, TextBlock
from agentscope.tool import ToolResponse, Toolkit

from astuner.task_judge.math_answer import answers_match, extract_answer
from astuner.tuner import AlgorithmConfig, DatasetConfig, JudgeOutput, TunerModelConfig, WorkflowOutput, tune

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "example_agent_cpu"  # train.jsonl, val.jsonl: {"question", "answer", "reading"}


async def run_sensor_agent(task: dict, model, auxiliary_models=None) -> WorkflowOutput:
    """One episode: the agent calls read_sensor, then answers in \\boxed{}. `task` is the dataset row."""

    def read_sensor() -> ToolResponse:
        """Read the sensor the user asks about."""
        return ToolResponse(content=[TextBlock(type="text", text=str(task["reading"]))])

    toolkit = Toolkit()
    toolkit.register_tool_function(read_sensor)
    agent = ReActAgent(name="sensor_agent", sys_prompt="Call read_sensor, then answer in \\boxed{}.", model=model,
                       formatter=OpenAIChatFormatter(), toolkit=toolkit, memory=InMemoryMemory(), max_iters=3)
    agent.set_console_output_enabled(False)
    reply = await agent.reply(Msg("user", task["question"], role="user"))
    return WorkflowOutput(response=reply)


async def judge(task: dict, response, auxiliary_models=None) -> JudgeOutput:
    """1 when the boxed answer is the reading, else 0."""
    predicted = extract_answer(response.get_text_content() or "")
    return JudgeOutput(reward=float(predicted is not None and answers_match(predicted, str(task["answer"]))))


def default_model() -> str:
    warm = Path("launcher_record/sensor_agent/checkpoints/global_step_0/model")
    if warm.is_dir():
        return str(warm)
    from astuner.model.tiny_model import DEFAULT_CORPUS, build_tiny_model

    folder = Path("checkpoints/.models/sensor_tune_tiny")
    if not (folder / "config.json").is_file():  # the main job's shape: hidden 128, 2 heads, a BPE tokenizer
        texts = [line for name in ("train.jsonl", "val.jsonl") for line in (DATA / name).read_text().splitlines()]
        build_tiny_model(folder, seed=0, hidden_size=128, heads=2, kv_heads=2, corpus=DEFAULT_CORPUS + texts)
    return str(folder)


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a local model folder or a hub id (default: a tiny model, see above)")
    parser.add_argument("--steps", type=int, default=20, help="GRPO steps (default 20)")
    parser.add_argument("--name", default="sensor_tune", help="experiment name (the run folder's name)")
    args = parser.parse_args(argv)
    return tune(
        workflow_func=run_sensor_agent, judge_func=judge,
        train_dataset=DatasetConfig(path=str(DATA), split="train", total_steps=args.steps),
        eval_dataset=DatasetConfig(path=str(DATA), split="val"),  # val.jsonl
        model=TunerModelConfig(model_path=args.model or default_model(), max_model_len=1024, max_tokens=48),
        algorithm=AlgorithmConfig(algorithm_type="multi_step_grpo", group_size=8, batch_size=8, learning_rate=1e-4,
                                  eval_interval_steps=10, save_interval_steps=10),
        experiment_name=args.name)


if __name__ == "__main__":
    print(f"run folder: {main()}")
