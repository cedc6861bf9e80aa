# -*- coding: utf-8 -*-
"""Frozen lake trained with astuner the way agentscope.tuner trains it: the sample's main.py with the import
swapped (agentscope.tuner -> astuner.tuner), the model path read from the environment and CPU sizes."""
import os
import sys
from pathlib import Path
from typing import Dict

from astuner.tuner import tune, WorkflowOutput, TunerModelConfig, DatasetConfig, AlgorithmConfig
from agentscope.agent import ReActAgent
from agentscope.formatter import OpenAIChatFormatter
from agentscope.message import Msg

sys.path.insert(0, str(Path(__file__).parent))

from env import FrozenLake  # noqa: E402

MAX_STEPS = 3


async def run_frozen_lake(task: Dict, model: TunerModelConfig, auxiliary_models: Dict = None) -> WorkflowOutput:
    env = FrozenLake(size=task["size"], p=task["p"], seed=task["seed"])
    agent = ReActAgent(name="walker", sys_prompt="You walk on a frozen lake to the goal G; say up, down, left or "
                                                 "right.", model=model, formatter=OpenAIChatFormatter(), max_iters=1)
    reward, steps = 0.0, 0
    for steps in range(1, MAX_STEPS + 1):
        reply = await agent.reply(Msg("user", f"The lake:\n{env.render()}\nYour move?", "user"))
        done, reward = env.step(reply.get_text_content() or "")
        if done:
            break
    return WorkflowOutput(reward=reward, metrics={"steps": float(steps), "map": f"{task['size']}x{task['size']}"})


if __name__ == "__main__":
    tune(
        workflow_func=run_frozen_lake,
        train_dataset=DatasetConfig(path=str(Path(__file__).parent / "data"), split="train", total_steps=2),
        model=TunerModelConfig(model_path=os.environ["TRINITY_MODEL_PATH"], max_model_len=2048, max_tokens=16),
        algorithm=AlgorithmConfig(algorithm_type="multi_step_grpo", group_size=2, batch_size=2),
        config_path=str(Path(__file__).parent / "config.yaml"),
    )
