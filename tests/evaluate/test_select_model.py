"""`select_model()` as agentscope.tuner's model-selection code calls it, the import swapped: AgentScope chat models
(OpenAIChatModel over a local OpenAI-compatible server) playing the main job's ReActAgent with its tool."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from agentscope.agent import ReActAgent
from agentscope.formatter import OpenAIChatFormatter
from agentscope.memory import InMemoryMemory
from agentscope.message import Msg
from agentscope.model import OpenAIChatModel

from astuner.errors import UserError
from astuner.tuner import DatasetConfig, JudgeOutput, WorkflowOutput
from astuner.tuner.model_selection import avg_token_consumption_judge, select_model
from tests.conftest import REPO_ROOT
from tests.evaluate.scripted_endpoint import KEY, ScriptedEndpoint


@pytest.fixture
def endpoint():
    server = ScriptedEndpoint()
    yield server
    server.close()


@pytest.fixture
def dataset(tmp_path):
    rows = [json.loads(line) for line in
            (REPO_ROOT / "tutorial" / "example_agent_cpu" / "val.jsonl").read_text().splitlines()[:5]]
    rows.append({"task_id": "broken", "question": "What does sensor S1 read?", "answer": "1"})  # no reading
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return DatasetConfig(path=str(tmp_path / "data"), split="train")


def chat_model(endpoint: ScriptedEndpoint, name: str) -> OpenAIChatModel:
    return OpenAIChatModel(model_name=name, api_key=KEY, stream=False, client_kwargs={"base_url": endpoint.base_url})


async def sensor_workflow(task, model) -> WorkflowOutput:
    """agentscope.tuner's workflow shape: (task, model) -> WorkflowOutput."""
    from tutorial.example_agent_cpu.sensor_agent import SYSTEM_PROMPT, sensor_toolkit

    if task["reading"] is None:  # (datasets fills the column a row lacks with None)
        raise ValueError(f"task {task['task_id']} has no reading")
    agent = ReActAgent(name="sensor_agent", sys_prompt=SYSTEM_PROMPT, model=model, formatter=OpenAIChatFormatter(),
                       toolkit=sensor_toolkit(task["reading"]), memory=InMemoryMemory(), max_iters=3)
    agent.set_console_output_enabled(False)
    reply = await agent.reply(Msg("user", task["question"], role="user"))
    return WorkflowOutput(response=reply.get_text_content())


async def answer_judge(task, response) -> JudgeOutput:
    found = re.findall(r"\\boxed\{(\d+)\}", str(response["response"]))
    correct = float(bool(found) and found[-1] == task["answer"])
    return JudgeOutput(reward=correct, metrics={"correct": correct, "seconds": response["metrics"]["execution_time"]})


def test_select_model_returns_the_best_candidate_and_its_averaged_metrics(endpoint, dataset):
    careful, sloppy = chat_model(endpoint, "careful"), chat_model(endpoint, "sloppy")
    best, metrics = asyncio.run(select_model(workflow_func=sensor_workflow, judge_func=answer_judge,
                                             train_dataset=dataset, candidate_models=[sloppy, careful]))
    assert best is careful
    assert set(metrics) == {"correct_avg", "seconds_avg"} and metrics["correct_avg"] == 1.0
    # the broken row raised in the workflow: skipped for each model (not counted), as agentscope.tuner does
    assert len(endpoint.requests) == 2 * 5 * 2  # two models, five rows, a tool call and an answer each
    assert 0 < metrics["seconds_avg"] < 60
    # total_steps limits the rows (new models: an AgentScope model's HTTP client belongs to its event loop)
    endpoint.requests.clear()
    dataset.total_steps = 2
    asyncio.run(select_model(workflow_func=sensor_workflow, judge_func=answer_judge, train_dataset=dataset,
                             candidate_models=[chat_model(endpoint, "careful"), chat_model(endpoint, "sloppy")],
                             max_threads=1))
    assert len(endpoint.requests) == 2 * 2 * 2


def test_the_built_in_token_judge_sees_each_episodes_usage(endpoint, dataset):
    careful, mute = chat_model(endpoint, "careful"), chat_model(endpoint, "mute")
    dataset.total_steps = 5
    best, metrics = asyncio.run(select_model(workflow_func=sensor_workflow, judge_func=avg_token_consumption_judge,
                                             train_dataset=dataset, candidate_models=[careful, mute]))
    assert best is mute  # one call, no tool: fewer tokens
    spent = [len(json.dumps(r["messages"])) // 4 + 7 for r in endpoint.requests if r["model"] == "mute"]
    assert len(spent) == 5 and metrics == {"token_consumed_avg": pytest.approx(sum(spent) / 5)}


def test_select_model_refuses_as_agentscope_tuner_does(endpoint, dataset):
    one = [chat_model(endpoint, "careful")]
    with pytest.raises(ValueError, match="At least two candidate models"):
        asyncio.run(select_model(workflow_func=sensor_workflow, judge_func=answer_judge, train_dataset=dataset,
                                 candidate_models=one))

    async def no_model(task) -> WorkflowOutput:
        return WorkflowOutput(response="")

    with pytest.raises(UserError, match=r"workflow_func no_model must take \(task, model\)"):
        asyncio.run(select_model(workflow_func=no_model, judge_func=answer_judge, train_dataset=dataset,
                                 candidate_models=one * 2))
