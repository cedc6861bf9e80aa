# -*- coding: utf-8 -*-
"""A werewolves game trained with astuner the way agentscope.tuner trains it: the sample's main.py with the import
swapped (agentscope.tuner -> astuner.tuner), the model paths read from the environment and CPU sizes."""
import os
import sys
from pathlib import Path
from typing import Dict

import numpy as np

from astuner.tuner import (
    tune,
    WorkflowOutput,
    TunerModelConfig,
)
from agentscope.agent import ReActAgent
from agentscope.formatter import OpenAIMultiAgentFormatter

sys.path.insert(0, str(Path(__file__).parent))

from game import BadGuyException, werewolves_game  # noqa: E402


async def run_werewolves_workflow(
    task: Dict,
    model: TunerModelConfig,
    auxiliary_models: Dict[str, TunerModelConfig],
) -> WorkflowOutput:
    roles = ["werewolf"] * 2 + ["villager"] * 3 + ["seer", "witch"]
    seed = task.get("seed", 0)
    np.random.seed(seed)
    np.random.shuffle(roles)
    workflow_args = task.get("workflow_args", {})
    trainable_target = workflow_args.get("trainable_target", "werewolf")
    if "participant" not in auxiliary_models:
        raise ValueError("Expected 'participant' model in auxiliary_models for opponent players")
    participant_model = auxiliary_models["participant"]
    players = []
    for i, role in enumerate(roles):
        if trainable_target == "werewolf":
            use_trainable = role == "werewolf"
        else:
            use_trainable = role in ["villager", "seer", "witch"]
        players.append(ReActAgent(
            name=f"Player{i + 1}",
            sys_prompt=f"You're a werewolf game player named Player{i + 1}. Win with your teammates.",
            model=model if use_trainable else participant_model,
            formatter=OpenAIMultiAgentFormatter(),
            max_iters=1,
        ))
    try:
        good_guy_win = await werewolves_game(players, roles)
        is_success = (not good_guy_win) if trainable_target == "werewolf" else good_guy_win
        metrics = {
            "success": float(is_success),
            "werewolf_win": float(not good_guy_win),
            "villager_win": float(good_guy_win),
            "trainable_target": trainable_target,
        }
        return WorkflowOutput(reward=1.0 if is_success else 0.0, metrics=metrics)
    except BadGuyException:
        return WorkflowOutput(reward=-0.1, metrics={"success": 0.0, "game_error": 1.0})


if __name__ == "__main__":
    from astuner.tuner import DatasetConfig, AlgorithmConfig

    config_path = Path(__file__).parent / "config.yaml"
    trained_model_path = os.environ["TRINITY_MODEL_PATH"]
    auxiliary_model_path = os.environ["TRINITY_AUXILIARY_MODEL_PATH"]
    dataset = DatasetConfig(path=str(Path(__file__).parent / "data"), split="train", total_steps=2)
    model = TunerModelConfig(
        model_path=trained_model_path, max_model_len=2048, max_tokens=24, temperature=1.0,
        inference_engine_num=1, tensor_parallel_size=1, tool_call_parser="hermes",
    )
    auxiliary_models = {
        "participant": TunerModelConfig(
            model_path=auxiliary_model_path, max_model_len=2048, max_tokens=12, temperature=0.1,
            inference_engine_num=1, tensor_parallel_size=1, tool_call_parser="hermes",
        )
    }
    algorithm = AlgorithmConfig(
        algorithm_type="multi_step_grpo", group_size=2, batch_size=2, learning_rate=1e-6,
        save_interval_steps=100, eval_interval_steps=100,
    )
    tune(
        workflow_func=run_werewolves_workflow,
        judge_func=None,
        train_dataset=dataset,
        model=model,
        auxiliary_models=auxiliary_models,
        algorithm=algorithm,
        config_path=str(config_path),
    )
