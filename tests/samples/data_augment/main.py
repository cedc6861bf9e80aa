# -*- coding: utf-8 -*-
"""agentscope-samples' data_augment math agent, shaped as written: its ReAct agent, its judge that scores with
Trinity-RFT's MathBoxedRewardFn (imported inside the judge), its argument parser and its names (TunerChatModel,
Algorithm). The user's edits: the import swapped (agentscope.tuner -> astuner.tuner), the model path from the
environment and CPU sizes."""
import argparse
import os
from typing import Dict

from agentscope.agent import ReActAgent
from agentscope.formatter import OpenAIChatFormatter
from agentscope.message import Msg

from astuner.tuner import Algorithm, JudgeOutput, TunerChatModel, WorkflowOutput, tune


async def run_react_agent(task: Dict, model: TunerChatModel, auxiliary_models: Dict[str, TunerChatModel]
                          ) -> WorkflowOutput:
    assert len(auxiliary_models) == 0, "No auxiliary models are used in this workflow."
    agent = ReActAgent(name="react_agent", model=model, formatter=OpenAIChatFormatter(), max_iters=1,
                       sys_prompt="Solve the math problem; give the final answer within \\boxed{}.")
    response = await agent.reply(msg=Msg("user", task["question"], role="user"))
    return WorkflowOutput(response=response)


async def gsm8k_judge(task: Dict, response: Msg, auxiliary_models: Dict[str, TunerChatModel]) -> JudgeOutput:
    from trinity.common.rewards.math_reward import MathBoxedRewardFn

    reward_fn = MathBoxedRewardFn()
    truth = task["answer"]
    truth = truth.split("####")[1].strip() if isinstance(truth, str) and "####" in truth else str(truth)
    reward_dict = reward_fn(response=response.get_text_content(), truth=truth)
    return JudgeOutput(reward=sum(reward_dict.values()), metrics=reward_dict)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Train math-agent with different task selectors")
    parser.add_argument("--config", type=str, default="config_random.yaml")
    args = parser.parse_args()
    tuner_model = TunerChatModel(model_path=os.environ["TRINITY_MODEL_PATH"], max_model_len=2048, max_tokens=16,
                                 temperature=1.0, inference_engine_num=1, tensor_parallel_size=1)
    algorithm = Algorithm(algorithm_type="multi_step_grpo", group_size=2, learning_rate=1e-6,
                          eval_interval_steps=20, batch_size=2)
    tune(workflow_func=run_react_agent, judge_func=gsm8k_judge, config_path=args.config, model=tuner_model,
         algorithm=algorithm)
