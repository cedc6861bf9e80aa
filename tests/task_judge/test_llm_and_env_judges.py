"""MathAnswerAndLlmAsJudge against a loopback chat server; EnvServiceJudge against the reference env."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys

import pytest

from astuner import Task, WorkflowOutput, WorkflowTask
from astuner.config import load_run_config
from astuner.plugins import resolve_plugins
from astuner.config.schema import AstunerConfig, AuxiliaryModelConfig
from astuner.rollout.manager import RolloutManager, build_judge
from astuner.task_judge.math_answer_and_llm_as_judge import MathAnswerAndLlmAsJudge
from astuner.task_reader import build_task_reader
from tests.conftest import REPO_ROOT
from tests.helpers import LoopbackJSONServer, ScriptedEngine


def chat(path, body):
    assert path == "/v1/chat/completions"
    prompt = body["messages"][0]["content"]
    verdict = "YES" if "Answer to check: eighteen" in prompt else "NO"
    return 200, {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                 "choices": [{"index": 0, "finish_reason": "stop",
                              "message": {"role": "assistant", "content": verdict}}]}


def judge_with(url):
    cfg = AstunerConfig()
    cfg.task_judge.llm_judge.base_url = f"{url}/v1"
    cfg.task_judge.llm_judge.model = "checker"
    return MathAnswerAndLlmAsJudge(cfg)


def verdict(judge, final_answer):
    task = WorkflowTask(task=Task("t", "How many eggs?", metadata={"answer": "#### 18"}))
    return asyncio.run(judge.compute_reward(task, WorkflowOutput(metadata={"final_answer": final_answer})))


def test_rule_first_then_the_auxiliary_model():
    with LoopbackJSONServer(chat) as server:
        judge = judge_with(server.url)
        assert verdict(judge, "\\boxed{18}").reward == 1.0 and server.requests == []
        assert verdict(judge, "\\boxed{eighteen}").reward == 1.0
        assert verdict(judge, "\\boxed{seventeen}").reward == 0.0
        assert len(server.requests) == 2 and server.requests[0][1]["model"] == "checker"


def test_llm_judge_needs_its_endpoint():
    with pytest.raises(ValueError, match=r"llm_judge.auxiliary_model, or its .base_url and .model"):
        MathAnswerAndLlmAsJudge(AstunerConfig())


@pytest.fixture
def env_server():
    server = REPO_ROOT / "tutorial" / "example_env_service" / "text_env_server.py"
    proc = subprocess.Popen([sys.executable, str(server), "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        yield proc.stdout.readline().strip().split("listening on ", 1)[1]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def binary_search(prompt_text: str) -> str:
    """Plays the number game from the conversation so far."""
    low, high = 1, 100
    for guess, hint in re.findall(r"<\|im_start\|>assistant\n(\d+)<\|im_end\|>\n<\|im_start\|>user\n(\w+)", prompt_text):
        if hint == "higher":
            low = int(guess) + 1
        elif hint == "lower":
            high = int(guess) - 1
    return str((low + high) // 2)


def test_guess_number_tutorial_with_env_judge(env_server, tokenizer, monkeypatch):
    """The env-service tutorial end to end: reader, per-episode env handle, multi-turn workflow, EnvServiceJudge."""
    monkeypatch.chdir(REPO_ROOT)
    run = load_run_config(REPO_ROOT / "tutorial" / "example_env_service" / "guess_number.yaml",
                          [f"astuner.task_reader.env_service.env_url={env_server}", "astuner.rollout.num_repeat=2"])
    plugins = resolve_plugins(run)
    tasks = build_task_reader(run.astuner).train_tasks()[:3]
    engine = ScriptedEngine(tokenizer, binary_search)
    manager = RolloutManager(run.astuner, plugins.workflow, build_judge(plugins.judge, run.astuner), engine, tokenizer)
    batch = asyncio.run(manager.run(tasks))
    assert len(batch.episodes) == 6 and not any(e.failed for e in batch.episodes)
    assert all(e.reward == 1.0 and e.is_success for e in batch.episodes)  # binary search always wins in 7
    for episode in batch.episodes:
        (sample,) = episode.samples  # every turn continues the last: one merged sample
        assert sample.num_calls == len(episode.recorder.calls) >= 2


def test_the_llm_judge_asks_an_auxiliary_model_by_name(monkeypatch):
    """llm_judge.auxiliary_model: the judge asks the episode's auxiliary model of that name; here an endpoint entry
    (base_url, model, api_key_env), which becomes AgentScope's OpenAIChatModel with the key from the environment."""
    from astuner.model.auxiliary import config_auxiliary_models, episode_calls

    monkeypatch.setenv("JUDGE_KEY", "sk-test-123")
    with LoopbackJSONServer(chat) as server:
        cfg = AstunerConfig()
        cfg.auxiliary_models = {"referee": AuxiliaryModelConfig(base_url=f"{server.url}/v1", model="checker",
                                                                api_key_env="JUDGE_KEY", max_tokens=8)}
        cfg.task_judge.llm_judge.auxiliary_model = "referee"
        judge = MathAnswerAndLlmAsJudge(cfg)
        models = config_auxiliary_models(cfg, [])

        async def judged(final):
            tally = episode_calls()
            task = WorkflowTask(task=Task("t", "How many eggs?", metadata={"answer": "#### 18"}),
                                auxiliary_models=models)
            out = await judge.compute_reward(task, WorkflowOutput(metadata={"final_answer": final}))
            return out, dict(tally)

        yes, calls = asyncio.run(judged("\\boxed{eighteen}"))
        assert yes.reward == 1.0 and calls == {"referee": 1}
        no, _ = asyncio.run(judged("\\boxed{seventeen}"))
        assert no.reward == 0.0
        (path, body), headers = server.requests[0], server.headers[0]
        assert path == "/v1/chat/completions" and body["model"] == "checker" and body["max_tokens"] == 8
        assert {k.lower(): v for k, v in headers.items()}["authorization"] == "Bearer sk-test-123"


def test_an_endpoint_whose_key_variable_is_unset_is_refused_naming_it(monkeypatch):
    from astuner.errors import ConfigError
    from astuner.model.auxiliary import config_auxiliary_models

    monkeypatch.delenv("ABSENT_KEY", raising=False)
    cfg = AstunerConfig()
    cfg.auxiliary_models = {"referee": AuxiliaryModelConfig(base_url="http://127.0.0.1:9/v1", model="m",
                                                            api_key_env="ABSENT_KEY")}
    with pytest.raises(ConfigError, match=r"astuner.auxiliary_models.referee.api_key_env: the environment variable "
                                          r"ABSENT_KEY is not set"):
        config_auxiliary_models(cfg, [])
