"""The function API: the contract's complete tune() example on CPU with a tiny model, preview, and the
up-front checks of workflow and judge functions."""

from __future__ import annotations

import json

import pytest
import yaml
from agentscope.agent import ReActAgent
from agentscope.formatter import OpenAIChatFormatter
from agentscope.memory import InMemoryMemory
from agentscope.message import Msg
from agentscope.tool import Toolkit

from astuner.errors import RunDirError, UserError
from astuner.tools import execute_python_code
from astuner.tuner import AlgorithmConfig, DatasetConfig, JudgeOutput, TunerModelConfig, WorkflowOutput, tune
from tests.conftest import run_cli


async def run_react_agent(task: dict, model, auxiliary_models=None) -> WorkflowOutput:
    toolkit = Toolkit()
    toolkit.register_tool_function(execute_python_code)
    agent = ReActAgent(name="solver", sys_prompt="Solve it; put the answer in \\boxed{}.", model=model,
                       formatter=OpenAIChatFormatter(), toolkit=toolkit, memory=InMemoryMemory(), max_iters=2)
    agent.set_console_output_enabled(False)
    msg = await agent.reply(Msg("user", task["question"], role="user"))
    return WorkflowOutput(response=msg)


async def judge_function(task: dict, response, auxiliary_models=None) -> JudgeOutput:
    answer = task["answer"].split("####")[-1].strip()
    text = response.get_text_content() or ""
    return JudgeOutput(reward=1.0 if text.strip() == answer else 0.0)


@pytest.fixture
def dataset(gsm8k_subset):
    return gsm8k_subset


def test_preview_prints_and_returns_rows(dataset, capsys):
    rows = DatasetConfig(path=str(dataset), split="train").preview(n=2)
    out = capsys.readouterr().out.strip().splitlines()
    assert len(rows) == 2 and [json.loads(line) for line in out] == rows and "question" in rows[0]


def test_the_contract_tune_example_trains_two_steps(dataset, tiny_model_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    root = tune(workflow_func=run_react_agent, judge_func=judge_function,
                model=TunerModelConfig(model_path=str(tiny_model_dir), max_model_len=4096, max_tokens=16),
                train_dataset=DatasetConfig(path=str(dataset), split="train", total_steps=2),
                eval_dataset=DatasetConfig(path=str(dataset), split="test"),
                algorithm=AlgorithmConfig(algorithm_type="multi_step_grpo", group_size=2, batch_size=2,
                                          learning_rate=1e-6, eval_interval_steps=2),
                experiment_name="tiny")
    assert root == tmp_path / "checkpoints" / "AgentScope" / "tiny"
    assert (root / "global_step_2" / "COMPLETE").exists()
    assert list((root / "monitor" / "tensorboard").glob("events.out.tfevents.*"))
    rows = [json.loads(line) for line in (root / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and "val/reward_mean" in rows[1]
    saved = yaml.safe_load((root / "config.yaml").read_text())["astuner"]
    assert saved["rollout"]["agentscope_workflow"].endswith("->run_react_agent")
    assert saved["trainer_common"]["algorithm"]["adv_estimator"] == "multi_step_grpo"
    # the written config is an ordinary astuner config
    code, _, err = run_cli(["--conf", str(root / "config.yaml"), "--dry-run"], capsys)
    assert code == 0, err
    # the same call again: the run folder holds a run, and tune()'s own arguments say what to do
    with pytest.raises(RunDirError) as again:
        tune(workflow_func=run_react_agent, judge_func=judge_function,
             model=TunerModelConfig(model_path=str(tiny_model_dir), max_model_len=4096, max_tokens=16),
             train_dataset=DatasetConfig(path=str(dataset), split="train", total_steps=2), experiment_name="tiny")
    said = str(again.value)
    assert "continue it with tune(resume=True), start a new one with tune(experiment_name=<new name>)" in said
    assert "--resume" not in said and "astuner.experiment_name" not in said and "\n" not in said


async def wrong_names(row, llm, auxiliary_models=None):
    return WorkflowOutput()


async def no_aux(task, model):
    return WorkflowOutput()


def not_async(task, model, auxiliary_models=None):
    return WorkflowOutput()


@pytest.mark.parametrize("fn,message", [
    (not_async, "must be an async function"),
    (wrong_names, "must take (task, model, auxiliary_models=None); it takes (row, llm, auxiliary_models)"),
    (no_aux, "must accept auxiliary_models=None"),
])
def test_workflow_function_checked_up_front(fn, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as info:
        tune(workflow_func=fn, train_dataset=DatasetConfig(path="x"), model=TunerModelConfig("m", 1024, max_tokens=64))
    assert message in str(info.value)
    assert not (tmp_path / "checkpoints").exists()


def test_judge_function_checked_up_front(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    async def judge(task, answer, auxiliary_models=None):
        return JudgeOutput(reward=0.0)

    with pytest.raises(UserError, match=r"judge_func judge must take \(task, response"):
        tune(workflow_func=run_react_agent, judge_func=judge, train_dataset=DatasetConfig(path="x"),
             model=TunerModelConfig("m", 1024, max_tokens=64))


def test_auxiliary_model_from_a_local_model_is_served_and_not_trained(tiny_model_dir):
    import asyncio
    from types import SimpleNamespace

    from astuner.api import split_auxiliary_models
    from astuner.model.auxiliary import episode_calls, frozen_model

    served, in_process = split_auxiliary_models(
        {"critic": TunerModelConfig(str(tiny_model_dir), 2048, max_tokens=4), "judge": frozen_model})
    assert served == {"critic": {"path": str(tiny_model_dir), "temperature": 1.0, "top_p": 1.0, "max_tokens": 4,
                                 "max_model_len": 2048}}
    assert in_process == {"judge": frozen_model}  # a chat model (any callable) is used as it is
    critic = frozen_model(SimpleNamespace(model_path=str(tiny_model_dir), temperature=1.0, top_p=1.0, max_tokens=4,
                                          max_model_len=2048, enable_thinking=None), "critic")

    async def episode():
        tally = episode_calls()
        reply = await critic([{"role": "user", "content": "Is 2+2=4?"}])
        return reply, tally

    reply, tally = asyncio.run(episode())
    assert reply.content and critic.recorder.calls == []  # answered, nothing recorded for training
    assert tally == {"critic": 1}  # counted for the episode that asked
    with pytest.raises(TypeError, match="must be an AgentScope chat model or a TunerModelConfig"):
        split_auxiliary_models({"bad": 42})


async def uses_the_critic(task: dict, model, auxiliary_models=None) -> WorkflowOutput:
    reply = await auxiliary_models["critic"]([{"role": "user", "content": task["question"]}])
    return WorkflowOutput(reward=1.0 if reply.content else 0.0)


def test_workflows_receive_auxiliary_models(dataset, tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = tune(workflow_func=uses_the_critic, train_dataset=DatasetConfig(path=str(dataset), total_steps=1),
                model=TunerModelConfig(model_path=str(tiny_model_dir), max_model_len=2048, max_tokens=8),
                auxiliary_models={"critic": TunerModelConfig(str(tiny_model_dir), 2048, max_tokens=4)},
                algorithm=AlgorithmConfig(group_size=2, batch_size=2), experiment_name="aux")
    rows = [json.loads(line) for line in (root / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["reward/mean"] == 1.0 and rows[0]["rollout/error_rate"] == 0.0
    assert rows[0]["auxiliary_calls"] == 1.0  # each episode asked the critic once
    # recorded in the run's config, so that `astuner --conf <run>/config.yaml` reruns it as it ran
    saved = yaml.safe_load((root / "config.yaml").read_text())["astuner"]
    assert saved["auxiliary_models"]["critic"]["path"] == str(tiny_model_dir)
    assert saved["auxiliary_models"]["critic"]["max_tokens"] == 4


async def digit_function(task: dict, model, auxiliary_models=None) -> WorkflowOutput:
    reply = await model([{"role": "user", "content": task["question"]}])
    text = "".join(block.get("text", "") for block in reply.content if block["type"] == "text")
    return WorkflowOutput(metadata={"final_answer": text})


def test_tune_keeps_the_judge_its_config_names(tmp_path, monkeypatch):
    """`tune(config_path=...)` without a judge_func: the config's judge scores the episodes (it used to be
    overridden with none, and every episode failed)."""
    from tests.conftest import REPO_ROOT

    conf = yaml.safe_load((REPO_ROOT / "tutorial" / "example_tiny_cpu" / "tiny_cpu.yaml").read_text())["astuner"]
    conf["task_reader"]["dataset_file"] = {
        "training": {"file_path": str(REPO_ROOT / "tutorial" / "example_tiny_cpu" / "train.jsonl")}}
    conf["model"]["path"] = str(tmp_path / "tiny")
    conf["trainer_common"].update({"total_training_steps": 1, "save_freq": -1, "test_freq": -1,
                                   "val_before_train": False})
    conf["data"]["train_batch_size"] = 4
    path = tmp_path / "digits.yaml"
    path.write_text(yaml.safe_dump({"astuner": conf}))
    monkeypatch.chdir(tmp_path)
    root = tune(workflow_func=digit_function, config_path=str(path), experiment_name="digits")
    saved = yaml.safe_load((root / "config.yaml").read_text())["astuner"]
    assert saved["task_judge"]["judge_protocol"] == "astuner.task_judge.math_answer_as_judge->MathAnswerAsJudge"
    rows = [json.loads(line) for line in (root / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["rollout/error_rate"] == 0.0


def agentscope_tuner():
    """agentscope.tuner's own config and output classes, loaded from agentscope's files: its package import
    needs dspy, which these files do not."""
    import importlib.util
    import sys
    import types
    from pathlib import Path

    import agentscope

    folder = Path(agentscope.__file__).parent / "tuner"
    found = types.SimpleNamespace()
    for stem in ("_workflow", "_judge", "_dataset", "_model", "_algorithm"):
        spec = importlib.util.spec_from_file_location(f"agentscope_tuner{stem}", folder / f"{stem}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # pydantic resolves the classes' forward references through it
        spec.loader.exec_module(module)
        for name in dir(module):
            if name[0].isupper():
                setattr(found, name, getattr(module, name))
    found.TunerModelConfig.model_rebuild()
    return found


AS = agentscope_tuner()


async def run_react_agent_as(task: dict, model, auxiliary_models=None):
    """run_react_agent written against agentscope.tuner: its WorkflowOutput."""
    ours = await run_react_agent(task, model, auxiliary_models)
    return AS.WorkflowOutput(response=ours.response, metrics={"replied": 1.0})


async def judge_function_as(task: dict, response, auxiliary_models=None):
    answer = task["answer"].split("####")[-1].strip()
    return AS.JudgeOutput(reward=1.0 if (response.get_text_content() or "").strip() == answer else 0.0,
                          metrics={"judged": 1.0})


def test_agentscope_tuner_spelling_trains_too(dataset, tiny_model_dir, tmp_path, monkeypatch):
    """A user coming from agentscope.tuner changes only the tune import: its config objects and the outputs
    their functions return are taken as they are."""
    assert AS.WorkflowOutput.__module__ != WorkflowOutput.__module__  # really the other library's classes
    monkeypatch.chdir(tmp_path)
    root = tune(workflow_func=run_react_agent_as, judge_func=judge_function_as,
                model=AS.TunerModelConfig(model_path=str(tiny_model_dir), max_model_len=4096, max_tokens=16),
                train_dataset=AS.DatasetConfig(path=str(dataset), split="train", total_steps=2),
                eval_dataset=AS.DatasetConfig(path=str(dataset), split="test"),
                algorithm=AS.AlgorithmConfig(algorithm_type="multi_step_grpo", group_size=2, batch_size=2,
                                             learning_rate=1e-6, eval_interval_steps=2),
                auxiliary_models={"helper": AS.TunerModelConfig(model_path=str(tiny_model_dir), max_model_len=4096,
                                                                max_tokens=8)},
                experiment_name="as_spelling")
    rows = [json.loads(line) for line in (root / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and "val/reward_mean" in rows[1]
    assert rows[0]["rollout/error_rate"] == 0.0  # the other library's outputs were not refused
    assert rows[0]["workflow/replied"] == 1.0 and rows[0]["judged"] == 1.0  # their metrics kept


def test_a_trinity_config_path_is_translated_and_what_it_lacks_named(tmp_path, monkeypatch):
    """A Trinity-RFT config as config_path is translated (tests/compat/test_trinity_config.py); what it lacks is
    named, before anything is written."""
    monkeypatch.chdir(tmp_path)
    conf = tmp_path / "trinity.yaml"
    conf.write_text("project: p\nname: run1\nalgorithm: {algorithm_type: grpo}\nbuffer: {batch_size: 4}\n")
    with pytest.raises(UserError, match=r"trinity.yaml \(a Trinity-RFT config\): model.model_path: not set.*"
                                        r"buffer.explorer_input.taskset.path: not set"):
        tune(workflow_func=run_react_agent, config_path=str(conf))
    assert not (tmp_path / "checkpoints").exists()


def test_monitor_type_chooses_the_tracker(tmp_path, monkeypatch):
    """agentscope.tuner's monitor_type: tensorboard, wandb, swanlab or mlflow (None = tensorboard)."""
    from astuner.api import monitor_logger

    assert monitor_logger(None) == {}
    for name in ("tensorboard", "wandb", "swanlab", "mlflow"):
        assert monitor_logger(name) == {"logger": ["console", name]}
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match="monitor_type 'neptune' is not supported"):
        tune(workflow_func=run_react_agent, model=TunerModelConfig(model_path="m", max_model_len=64, max_tokens=8),
             train_dataset=DatasetConfig(path="d"), monitor_type="neptune")


@pytest.mark.parametrize("what", ["arguments", "astuner yaml", "trinity config"])
@pytest.mark.parametrize("wrong", ["model", "dataset"])
def test_a_tune_that_fails_its_checks_writes_nothing(what, wrong, dataset, tiny_model_dir, tmp_path, monkeypatch):
    """tune() runs the CLI's preflight (model folder, task rows, trackers, run folder's parent) before the run
    folder is made: a bad model or dataset path leaves no checkpoints/ folder behind."""
    monkeypatch.chdir(tmp_path)
    model_path = str(tmp_path / "no_model") if wrong == "model" else str(tiny_model_dir)
    data_path = str(tmp_path / "no_data") if wrong == "dataset" else str(dataset)
    kwargs: dict = {}
    if what == "arguments":
        kwargs = {"model": TunerModelConfig(model_path=model_path, max_model_len=2048, max_tokens=8),
                  "train_dataset": DatasetConfig(path=data_path)}
    elif what == "astuner yaml":
        conf = tmp_path / "a.yaml"
        conf.write_text(yaml.safe_dump({"astuner": {
            "model": {"path": model_path}, "task_reader": {"type": "huggingface_dat_repo", "huggingface_dat_repo": {
                "dataset_path": data_path, "training_split": "train", "validation_split": None}}}}))
        kwargs = {"config_path": str(conf)}
    else:
        conf = tmp_path / "t.yaml"
        conf.write_text(yaml.safe_dump({"algorithm": {"algorithm_type": "grpo"},
                                        "model": {"model_path": model_path, "max_model_len": 2048},
                                        "buffer": {"explorer_input": {"taskset": {"path": data_path}}}}))
        kwargs = {"config_path": str(conf)}
    with pytest.raises(UserError) as info:
        tune(workflow_func=run_react_agent, **kwargs)
    assert ("no model folder" if wrong == "model" else "no_data") in str(info.value)
    assert not (tmp_path / "checkpoints").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        {"arguments": [], "astuner yaml": ["a.yaml"], "trinity config": ["t.yaml"]}[what] + ["my_dataset"])


@pytest.mark.parametrize("content, message", [
    (None, "is not a file"), ("a: [unclosed", "is not readable YAML"), ("- just\n- a list\n", "holds list"),
])
def test_a_config_path_that_is_no_config_is_one_user_error(tmp_path, monkeypatch, content, message):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "conf.yaml"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UserError, match=message):
        tune(workflow_func=run_react_agent, config_path=str(path))
    assert not (tmp_path / "checkpoints").exists()


def test_a_tune_that_fails_before_its_first_step_does_not_block_the_rerun(dataset, tiny_model_dir, tmp_path,
                                                                         monkeypatch):
    """tune() runs the CLI's run sequence (astuner/run.py): a run that ends before its first step (here: weights
    that pass the folder check but do not load) is marked, and the fixed rerun under the same name proceeds."""
    import shutil

    from astuner.records.run_dir import NEVER_STEPPED, holds_run

    monkeypatch.chdir(tmp_path)
    broken = tmp_path / "broken_model"
    shutil.copytree(tiny_model_dir, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # truncated: the tokenizer loads, the model does not

    def run(model_path):
        return tune(workflow_func=run_react_agent, judge_func=judge_function,
                    model=TunerModelConfig(model_path=str(model_path), max_model_len=2048, max_tokens=8),
                    train_dataset=DatasetConfig(path=str(dataset), split="train", total_steps=1),
                    algorithm=AlgorithmConfig(group_size=2, batch_size=2), experiment_name="again")

    with pytest.raises(Exception):
        run(broken)
    root = tmp_path / "checkpoints" / "AgentScope" / "again"
    assert (root / NEVER_STEPPED).exists() and not holds_run(root)
    assert run(tiny_model_dir) == root  # the fixed rerun, same name, no resume
    assert (root / "global_step_1" / "COMPLETE").exists() and not (root / NEVER_STEPPED).exists()
    assert list(root.glob("astuner.failed_start.*.log"))


def test_tune_arguments_name_declared_keys():
    """tune()'s dataclasses say which declared key each argument sets; a renamed key breaks this, not a run."""
    import dataclasses

    from astuner.api import AlgorithmConfig, TunerModelConfig, algorithm_keys, model_keys
    from astuner.config.keys import declared
    from astuner.config.schema import AstunerConfig

    keys = {item.path for item in declared(AstunerConfig)}
    named = [f.metadata["key"] for cls in (TunerModelConfig, AlgorithmConfig) for f in dataclasses.fields(cls)
             if f.metadata.get("key")]
    assert len(named) == 12 and set(named) <= keys
    tree = algorithm_keys(AlgorithmConfig(learning_rate=3e-6, group_size=5), validates=False)
    assert tree["trainer_common"]["optim"]["lr"] == 3e-6 and tree["rollout"]["num_repeat"] == 5
    assert tree["trainer_common"]["test_freq"] == -1
    model = model_keys(TunerModelConfig("m", 4096, max_tokens=1024, tensor_parallel_size=2))
    assert model["model"]["path"] == "m" and model["rollout"]["tensor_model_parallel_size"] == 2
    assert model["data"] == {"max_prompt_length": 3072, "max_response_length": 1024}


def test_the_tune_tutorial_trains_a_step(tiny_model_dir, tmp_path, monkeypatch):
    """tutorial/example_tune/sensor_tune.py: the main job's agent as functions, through tune() (split "val" finds
    val.jsonl)."""
    import importlib.util

    from tests.conftest import REPO_ROOT

    spec = importlib.util.spec_from_file_location("sensor_tune", REPO_ROOT / "tutorial" / "example_tune" / "sensor_tune.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.chdir(tmp_path)
    root = module.main(["--model", str(tiny_model_dir), "--steps", "1", "--name", "t"])
    assert root == tmp_path / "checkpoints" / "AgentScope" / "t"
    assert (root / "global_step_1" / "COMPLETE").exists()
    saved = yaml.safe_load((root / "config.yaml").read_text())["astuner"]
    assert saved["task_reader"]["huggingface_dat_repo"]["validation_split"] == "val"


@pytest.mark.parametrize("verbose", [False, True])
def test_the_libraries_noise_is_off_unless_asked_for(tiny_model_dir, tmp_path, verbose):
    """A tune() printed "Repo card metadata block was not found" four times and a "Writing model shards" bar at
    every checkpoint; now only with ASTUNER_VERBOSE=1 (the CLI: --verbose)."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    from astuner.records.progress import _QUIET_ENV

    quiet = {name for name, _ in _QUIET_ENV}  # what an earlier run in this process may have set
    env = {**{k: v for k, v in os.environ.items() if k not in quiet}, "ASTUNER_VERBOSE": "1" if verbose else ""}
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "tutorial" / "example_tune" / "sensor_tune.py"),
                           "--model", str(tiny_model_dir), "--steps", "1"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    noise = ("Repo card metadata block was not found", "Writing model shards", "Loading weights")
    assert all((line in proc.stderr) == verbose for line in noise), proc.stderr[-3000:]


def test_every_name_agentscope_tuner_exports_is_here_with_its_meaning(tmp_path):
    """The names of agentscope.tuner's __all__ (read from its file: its package import needs dspy) all import from
    astuner.tuner; the signature checks accept and refuse what agentscope's accept and refuse (its own `_config`,
    loaded from its file); Tinker and prompt tuning are refused in one line naming what astuner offers."""
    import ast
    import importlib.util
    import sys
    from pathlib import Path

    import agentscope

    import astuner.tuner as ours
    from astuner.api import TunerModelConfig, model_keys

    folder = Path(agentscope.__file__).parent / "tuner"
    tree = ast.parse((folder / "__init__.py").read_text())
    exported = next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                    and getattr(node.targets[0], "id", "") == "__all__")
    assert set(exported) <= set(ours.__all__) and all(hasattr(ours, name) for name in exported), \
        set(exported) - set(ours.__all__)

    package = type(sys)("agentscope_tuner_pkg")
    package.__path__ = [str(folder)]
    sys.modules["agentscope_tuner_pkg"] = package
    spec = importlib.util.spec_from_file_location("agentscope_tuner_pkg._config", folder / "_config.py")
    theirs = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = theirs
    spec.loader.exec_module(theirs)

    async def workflow(task, model): ...
    async def workflow_all(task, model, auxiliary_models=None, logger=None): ...
    async def workflow_extra(task, model, temperature): ...
    async def workflow_kwargs(task, model, **kwargs): ...
    async def workflow_short(task): ...
    async def judge(task, response, auxiliary_models): ...
    async def judge_args(task, response, *rest): ...

    def verdict(check, fn):
        try:
            check(fn)
            return True
        except ValueError:
            return False

    for fn in (workflow, workflow_all, workflow_extra, workflow_kwargs, workflow_short, judge):
        assert verdict(ours.check_workflow_function, fn) == verdict(theirs.check_workflow_function, fn), fn
    for fn in (judge, judge_args, workflow, workflow_all):
        assert verdict(ours.check_judge_function, fn) == verdict(theirs.check_judge_function, fn), fn
    assert [verdict(ours.check_workflow_function, fn) for fn in (workflow, workflow_all, workflow_extra)] == \
        [True, True, False]

    with pytest.raises(UserError, match=r"^TunerModelConfig.tinker_config: Tinker is a hosted training service.*"
                                        r"astuner.model.lora.rank: 8"):
        model_keys(TunerModelConfig("m", 4096, max_tokens=1024, tinker_config=ours.TinkerConfig(rank=8)))
    with pytest.raises(UserError, match=r"TunerModelConfig.tinker_config"):  # agentscope's own object too
        model_keys(AS.TunerModelConfig(model_path="m", max_model_len=4096, max_tokens=1024,
                                       tinker_config=AS.TinkerConfig(rank=4)))
    for call in (lambda: ours.tune_prompt(workflow_func=workflow), lambda: ours.PromptTuneConfig()):
        with pytest.raises(UserError, match=r"optimises the agent's system prompt with DSPy; astuner trains the "):
            call()
