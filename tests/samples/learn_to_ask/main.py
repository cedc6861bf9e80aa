# -*- coding: utf-8 -*-
"""agentscope-samples' learn_to_ask, shaped as written: a doctor agent that asks or stops, its prompts loaded from
prompt.py beside it, a judge that asks an auxiliary model to grade the question, its names (TunerChatModel, Dataset,
Algorithm) and its config.yaml. The user's edits: the import swapped (agentscope.tuner -> astuner.tuner), the model
paths from the environment and CPU sizes."""
import importlib.util
import os
import re
from typing import Dict, List, Union

from agentscope.agent import ReActAgent
from agentscope.formatter import OpenAIChatFormatter
from agentscope.memory import InMemoryMemory
from agentscope.message import Msg

from astuner.tuner import Algorithm, Dataset, JudgeOutput, TunerChatModel, WorkflowOutput, tune

AUXILIARY_MODEL_NAME = "auxiliary_model"


def load_prompts():
    spec = importlib.util.spec_from_file_location("prompt", os.path.join(os.path.dirname(__file__), "prompt.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def format_messages(task_desc: Union[List, str]) -> List[Dict[str, str]]:
    return task_desc if isinstance(task_desc, list) else [{"role": "user", "content": task_desc}]


async def run_react_agent(task: Dict, model: TunerChatModel, auxiliary_models: Dict[str, TunerChatModel]
                          ) -> WorkflowOutput:
    assert len(auxiliary_models) == 1, "Please provide only one `auxiliary_models` for `learn_to_ask`."
    agent = ReActAgent(name="react_agent", sys_prompt=load_prompts().rollout_prompt_med, model=model,
                       formatter=OpenAIChatFormatter(), toolkit=None, memory=InMemoryMemory(), max_iters=1)
    messages = format_messages(task["messages"])
    response = await agent.reply([Msg(name=x["role"], content=x["content"], role=x["role"]) for x in messages])
    return WorkflowOutput(response=response)


def parse_tag_string(text: str) -> Dict:
    return dict(re.findall(r"<(\w+)>(.*?)</\1>", text))


async def llm_reward(task: Dict, response: str, auxiliary_models: Dict[str, TunerChatModel]) -> Dict:
    history = "".join(f"{'patient' if m['role'] == 'user' else 'doctor'}: {m['content']}\n"
                      for m in task["messages"] + [{"role": "assistant", "content": response}])
    messages = [{"role": "system", "content": load_prompts().reward_prompt_med.format(task.get("info_truth", "None"))},
                {"role": "user", "content": history}]
    res = await auxiliary_models[AUXILIARY_MODEL_NAME](messages)
    content = Msg(name="assistant", content=list(res.content), role="assistant").get_text_content() or ""
    return parse_tag_string(content)


async def learn2ask_judge(task: Dict, response: Msg, auxiliary_models: Dict[str, TunerChatModel]) -> JudgeOutput:
    assert len(auxiliary_models) == 1, "Please provide only one `auxiliary_models` for `learn_to_ask`."
    text = response.get_text_content() or ""
    truth = task.get("decision_truth", "continue")
    action = "stop" if "<stop />" in text else "continue"
    if truth != action:
        action_score = format_score = content_score = 0.0
    elif truth == "continue":
        action_score, scores = 1.0, await llm_reward(task, text, auxiliary_models)
        try:
            format_score, content_score = float(scores.get("format_score", 0.0)), float(scores.get("content_score", 0.0))
        except ValueError:
            format_score = content_score = 0.0
    else:
        action_score, content_score, format_score = 1.0, 1.0, 1.0 if text == "<stop />" else 0.0
    reward = action_score * (1 + 2 * content_score) + format_score
    return JudgeOutput(reward=reward, metrics={"reward": reward, "action": action_score})


if __name__ == "__main__":
    config_path = os.path.join(os.path.dirname(__file__), "config.yaml")
    dataset = Dataset(path=os.path.join(os.path.dirname(__file__), "data"), split="train", total_epochs=1)
    tuner_model = TunerChatModel(model_path=os.environ["TRINITY_MODEL_PATH"], max_model_len=2048, max_tokens=16,
                                 temperature=1.0, tensor_parallel_size=1, inference_engine_num=1, reasoning_parser=None)
    aux_models = {AUXILIARY_MODEL_NAME: TunerChatModel(
        model_path=os.environ["TRINITY_AUXILIARY_MODEL_PATH"], max_model_len=2048, max_tokens=16, temperature=0.7,
        tensor_parallel_size=1, inference_engine_num=1, reasoning_parser=None)}
    algorithm = Algorithm(algorithm_type="grpo", group_size=2, learning_rate=5.0e-07, batch_size=2)
    tune(workflow_func=run_react_agent, judge_func=learn2ask_judge, train_dataset=dataset, model=tuner_model,
         auxiliary_models=aux_models, algorithm=algorithm, config_path=config_path)
