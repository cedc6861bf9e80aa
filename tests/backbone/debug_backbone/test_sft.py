"""The SFT warm start (`trainer_common.sft`): the expert plays the user's real workflow (ReActAgent, tool,
formatter, ModelTuner), the policy is fine-tuned on the generated tokens of the episodes the judge accepts,
then GRPO starts from it; before / after numbers land in metrics.jsonl."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.conftest import REPO_ROOT, run_cli

CONF = REPO_ROOT / "tutorial" / "example_agent_cpu" / "sensor_agent.yaml"
# the expert that copies every reading right (the main job's is right 60% of the time)
CAREFUL = "astuner.trainer_common.sft.expert=tutorial/example_agent_cpu/sensor_agent.py->careful_expert"


def _load_demo(tmp_path, overrides=()):
    from astuner.config import load_run_config
    from astuner.plugins import resolve_plugins

    run = load_run_config(CONF, [f"astuner.model.path={tmp_path / 'model'}", *overrides])
    return run, resolve_plugins(run)


def test_expert_episodes_are_the_agents_own_tokens(tmp_path, monkeypatch):
    """Demonstrations: one sample per episode, the expert's two replies trained (mask 1), the prompt and
    the tool's result between them context (mask 0)."""
    from transformers import AutoTokenizer

    from astuner.model.model_path import resolve_model_path
    from astuner.rollout.manager import RolloutManager, build_judge
    from astuner.task_reader import build_task_reader
    from astuner.backbone.debug import sft

    monkeypatch.chdir(REPO_ROOT)
    run, plugins = _load_demo(tmp_path, [CAREFUL])
    path = resolve_model_path(run.astuner, run.extra_roots)  # the tiny model, created here
    tokenizer = AutoTokenizer.from_pretrained(path)
    tasks = build_task_reader(run.astuner, run.extra_roots).train_tasks()[:6]
    judge = build_judge(plugins.judge, run.astuner)
    demos = asyncio.run(sft.play(lambda engine: RolloutManager(run.astuner, plugins.workflow, judge, engine, tokenizer),
                                 plugins.expert, tokenizer, tasks, per_task=1, min_reward=1.0))
    assert demos.episodes == 6 and demos.kept_episodes == 6 and demos.expert_reward == 1.0
    assert len(demos.samples) == 6
    for sample, task in zip(demos.samples, tasks):
        reading = task.metadata["reading"]
        response = sample.input_ids[sample.prompt_length:]
        trained = tokenizer.decode([t for t, m in zip(response, sample.loss_mask) if m])
        context = tokenizer.decode([t for t, m in zip(response, sample.loss_mask) if not m])
        assert '{"name": "read_sensor", "arguments": {}}' in trained and f"\\boxed{{{reading}}}" in trained
        assert "<tool_response>" in context and str(reading) in context  # the tool's result: context only
        assert str(reading) not in tokenizer.decode(sample.input_ids[:sample.prompt_length])  # not in the prompt
        assert trained.count("<|im_end|>") == 2


def test_episodes_below_min_reward_are_left_out(tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    from astuner.model.model_path import resolve_model_path
    from astuner.rollout.manager import RolloutManager, build_judge
    from astuner.task_reader import build_task_reader
    from astuner.backbone.debug import sft

    monkeypatch.chdir(REPO_ROOT)
    run, plugins = _load_demo(tmp_path, [CAREFUL])
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(run.astuner, run.extra_roots))
    tasks = build_task_reader(run.astuner, run.extra_roots).train_tasks()[:4]

    async def sloppy(prompt: str) -> str:  # right tool protocol, wrong final answer on odd readings
        reply = await plugins.expert(prompt)
        if reply.startswith("\\boxed{") and int(reply[7:-1]) % 2:
            return "\\boxed{-1}"
        return reply

    demos = asyncio.run(sft.play(
        lambda engine: RolloutManager(run.astuner, plugins.workflow, build_judge(plugins.judge, run.astuner), engine,
                                      tokenizer), sloppy, tokenizer, tasks, per_task=1, min_reward=1.0))
    odd = sum(1 for t in tasks if t.metadata["reading"] % 2)
    assert 0 < odd < 4
    assert demos.kept_episodes == 4 - odd and len(demos.samples) == 4 - odd
    assert demos.expert_reward == pytest.approx((4 - odd) / 4)


def test_the_demo_warm_starts_then_trains(tmp_path, monkeypatch, capsys):
    """The README's main job, shortened: SFT (its loss falls, a checkpoint global_step_0), validation before
    and after it, two GRPO steps of the multi-turn agent; --resume after that does not repeat the SFT."""
    monkeypatch.chdir(REPO_ROOT)
    tc = "astuner.trainer_common"
    argv = ["--conf", str(CONF), "--exp-dir", str(tmp_path), f"astuner.model.path={tmp_path / 'model'}",
            f"{tc}.sft.steps=40", f"{tc}.sft.lr=3e-3", f"{tc}.total_training_steps=2", f"{tc}.test_freq=2", f"{tc}.save_freq=2",
            "astuner.data.train_batch_size=4", "astuner.rollout.num_repeat=4"]
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
    # the two validations of step 0 are told apart (they were both "validation at step 0")
    assert "validation before the warm start: reward" in err and "validation after the warm start: reward" in err
    assert "SFT warm start: the expert" in err  # said before the expert plays (it printed nothing for minutes)
    root = tmp_path / "sensor_agent"
    rows = {r["step"]: r for r in map(json.loads, (root / "metrics.jsonl").read_text().splitlines())}
    assert set(rows) == {0, 1, 2}
    warm = rows[0]
    # the main job's expert copies half of the readings right, and every demonstration is kept (min_reward 0)
    assert warm["sft/demonstrations"] == 200 and warm["sft/kept_episodes"] == 200
    assert warm["sft/expert_reward"] == pytest.approx(0.5, abs=0.05)
    assert warm["sft/steps"] == 40 and warm["sft/loss_last"] < warm["sft/loss_first"] / 4
    assert "sft/val_reward_before" in warm and "val/reward_mean" in warm
    assert (root / "checkpoints" / "global_step_0" / "COMPLETE").exists()
    for step in (1, 2):
        assert rows[step]["rollout/calls_per_episode"] >= 1.25  # the warm-started agent calls the tool (mostly)
    assert "val/reward_mean" in rows[2]

    code, _, err = run_cli([*argv[:-4], f"{tc}.total_training_steps=3", "astuner.data.train_batch_size=4",
                            "astuner.rollout.num_repeat=4", "--resume"], capsys)
    assert code == 0, err
    rows = [json.loads(line) for line in (root / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3]  # no second warm start
    assert "SFT warm start" not in err


def test_a_non_finite_loss_stops_before_the_weights_move(tiny_model_dir):
    import torch
    from transformers import AutoModelForCausalLM

    from astuner.errors import RunFailed
    from astuner.schema import Sample
    from astuner.backbone.debug import sft

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    sample = Sample("t", "e", 0, input_ids=[5, 6, 7, 8, 9], prompt_length=2, loss_mask=[1, 1, 1], logprobs=[0.0] * 3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert len(sft.train(model, [sample], steps=2, lr=1e-3, batch_size=1, seed=0, pad_id=0, token_budget=64,
                         dtype="fp32")) == 2
    moved = {k: v.clone() for k, v in model.state_dict().items()}
    assert any(not torch.equal(before[k], moved[k]) for k in before)
    with torch.no_grad():
        next(model.parameters()).fill_(float("nan"))
    poisoned = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(RunFailed, match="the loss is nan at step 1; lower astuner.trainer_common.sft.lr"):
        sft.train(model, [sample], steps=2, lr=1e-3, batch_size=1, seed=0, pad_id=0, token_budget=64, dtype="fp32")
    after = model.state_dict()
    assert all(torch.equal(poisoned[k], after[k]) or torch.isnan(poisoned[k]).all() for k in poisoned)


# the CLI, held once global_step_0 is saved: the kill -9 lands there however slowly the test's own process runs
HELD_AFTER_THE_WARM_START = """
import sys, time
from astuner.backbone.debug import learner
from astuner.cli import main

save = learner.save_checkpoint


def save_then_hold(folder, step, *args, **kwargs):
    saved = save(folder, step, *args, **kwargs)
    if step == 0:
        time.sleep(600)
    return saved


learner.save_checkpoint = save_then_hold
sys.exit(main(sys.argv[1:]))
"""


def test_a_run_killed_after_the_warm_start_resumes_as_the_uninterrupted_run(tmp_path, monkeypatch, capsys):
    """kill -9 once global_step_0 (the warm start's checkpoint) is complete, then --resume: the same run as not
    killing — the validation after the warm start (sampled at temperature 1.0, as in the main job) is part of
    what global_step_0 holds, so step 1's rollouts and the final weights are the uninterrupted run's."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import torch
    from safetensors.torch import load_file

    monkeypatch.chdir(REPO_ROOT)
    tc = "astuner.trainer_common"
    argv = ["--conf", str(CONF), "--exp-dir", str(tmp_path), f"astuner.model.path={tmp_path / 'model'}",
            f"{tc}.sft.steps=5", f"{tc}.sft.lr=3e-3", f"{tc}.total_training_steps=3", f"{tc}.save_freq=100",
            f"{tc}.test_freq=-1", "astuner.data.train_batch_size=2", "astuner.rollout.num_repeat=2",
            f"{tc}.algorithm.drop_zero_variance_groups=false", f"{tc}.algorithm.entropy_coeff=0.01"]
    code, _, err = run_cli([*argv, "astuner.experiment_name=straight"], capsys)
    assert code == 0, err

    root = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-c", HELD_AFTER_THE_WARM_START, *argv, "astuner.experiment_name=killed"],
                            cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    try:
        deadline = time.time() + 600
        while time.time() < deadline and proc.poll() is None and \
                not (root / "checkpoints" / "global_step_0" / "COMPLETE").exists():
            time.sleep(0.1)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert (root / "checkpoints" / "global_step_0" / "COMPLETE").exists()
    assert not (root / "checkpoints" / "global_step_3").exists()  # killed before the run's end
    code, _, err = run_cli([*argv, "astuner.experiment_name=killed", "--resume"], capsys)
    assert code == 0, err
    assert "SFT warm start" not in err

    def final(name):
        return load_file(str(tmp_path / name / "checkpoints" / "global_step_3" / "model" / "model.safetensors"))

    a, b = final("straight"), final("killed")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    def metric_rows(name):
        rows = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in rows]

    assert [r["step"] for r in metric_rows("killed")] == [0, 1, 2, 3]
    assert metric_rows("killed") == metric_rows("straight")
