"""Off-policy training on the debug backbone (trainer_common.off_policy): the schedule's meaning (Trinity-RFT's), a
run whose samples lag by at most k versions, the truncated importance weight, samples dropped under `drop`, and a
run killed with SIGKILL mid-rollout and resumed that equals the run that was not killed."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from astuner.config.sync_schedule import SyncSchedule, problem
from tests.conftest import REPO_ROOT, run_cli

TINY = "tutorial/example_tiny_cpu/tiny_cpu.yaml"


def schedule(k=None, n=1, d=None, on_stale="wait"):
    return SyncSchedule.of(SimpleNamespace(max_staleness=k, sync_interval=n, sync_offset=d, on_stale=on_stale))


def test_the_schedule_is_trinitys_synchronizer():
    """Step t is rolled out on version N * floor((t - 1 - d) / N): Trinity-RFT's explorer syncs after step
    d + j * N, taking the trainer's weights of step j * N."""
    assert schedule().synchronous and [schedule().version_for(t) for t in (1, 2, 3)] == [0, 1, 2]
    two = schedule(k=2)
    assert (two.interval, two.offset, two.bound) == (1, 2, 2)
    assert [two.version_for(t) for t in range(1, 7)] == [0, 0, 0, 1, 2, 3]
    four = schedule(n=4)  # agentscope-samples' data_augment: sync_interval 4
    assert four.bound == 3 and [four.version_for(t) for t in range(1, 10)] == [0, 0, 0, 0, 4, 4, 4, 4, 8]
    mixed = schedule(n=2, d=1)
    assert mixed.bound == 2 and [mixed.version_for(t) for t in range(1, 8)] == [0, 0, 0, 2, 2, 4, 4]
    for s in (two, four, mixed):  # every step's lag within the bound, and the bound reached
        lags = [t - 1 - s.version_for(t) for t in range(1, 40)]
        assert max(lags) == s.bound and min(lags) >= 0
    assert problem(SimpleNamespace(max_staleness=1, sync_interval=4, sync_offset=0)) == (
        "astuner.trainer_common.off_policy.max_staleness",
        "astuner.trainer_common.off_policy.max_staleness 1 is below what sync_interval 4 and sync_offset 0 roll out "
        "(samples up to 3 versions old); raise it to 3 or leave it null")


def test_a_contradicting_schedule_and_another_engine_are_refused_at_dry_run(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    base = ["--conf", TINY, "--exp-dir", str(tmp_path), "--dry-run", f"astuner.model.path={tmp_path / 'm'}"]
    code, _, err = run_cli(base + ["astuner.trainer_common.off_policy.max_staleness=0",
                                   "astuner.trainer_common.off_policy.sync_interval=2"], capsys)
    assert code == 2 and "max_staleness 0 is below what sync_interval 2" in err
    code, _, err = run_cli(base + ["astuner.trainer_common.off_policy.max_staleness=1",
                                   "astuner.rollout.engine=openai", "astuner.rollout.openai_base_url=http://x/v1"],
                           capsys)
    assert code == 2 and "rollouts ahead of training run on hf engines of their own" in err, err
    code, out, err = run_cli(base + ["astuner.trainer_common.off_policy.max_staleness=1"], capsys)
    assert code == 0, err
    assert "off-policy: samples lag at most 1 version(s) (sync_interval 1, sync_offset 1" in out + err
    assert not (tmp_path / "tiny_cpu").exists()


def test_k2_run_trains_samples_at_most_two_versions_old(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    code, _, err = run_cli(["--conf", TINY, "--exp-dir", str(tmp_path), f"astuner.model.path={tmp_path / 'm'}",
                            "astuner.trainer_common.total_training_steps=5", "astuner.trainer_common.test_freq=5",
                            "astuner.trainer_common.save_freq=-1", "astuner.trainer_common.off_policy.max_staleness=2"],
                           capsys)
    assert code == 0, err
    root = tmp_path / "tiny_cpu"
    rows = [json.loads(line) for line in (root / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["step"] > 0]
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5]
    seen = set()
    for r in steps:
        step = r["step"]
        versions = {e["policy_version"] for e in map(json.loads, (root / "trajectories" / f"step_{step}.jsonl")
                                                      .read_text().splitlines()) if e["policy_version"] is not None}
        assert versions == {max(0, step - 3)}  # the schedule's version, on every episode of the step
        lag = step - 1 - versions.pop()
        assert lag <= 2 and r["off_policy/version_lag"] == lag and r["off_policy/lag_max"] <= 2
        histogram = [r[f"off_policy/lag_{i}"] for i in range(3)]
        assert sum(histogram) == histogram[lag] == r["rollout/episodes"]  # one sample per episode here
        assert r["off_policy/dropped_samples"] == 0 and r.get("off_policy/is_weight_mean", 1.0) > 0
        seen.add(lag)
    assert seen == {0, 1, 2} and any("off_policy/is_weight_mean" in r for r in steps)  # a step with an update
    assert "val/reward_mean" in rows[-1]


KILLER = '''
import os, signal
from pathlib import Path
from astuner import ModelTuner, Workflow, WorkflowOutput, WorkflowTask

_after = []


class DigitOrDie(Workflow):
    """The tiny demo's agent; with KILL_AFTER set, SIGKILL some episodes after that checkpoint is complete."""

    async def execute(self, workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput:
        marker = os.environ.get("KILL_AFTER")
        if marker and Path(marker).exists():
            _after.append(1)
            if len(_after) == 40:
                os.kill(os.getpid(), signal.SIGKILL)
        reply = await model_tuner([{"role": "user", "content": workflow_task.task.main_query}])
        text = "".join(block.get("text", "") for block in reply.content if block["type"] == "text")
        return WorkflowOutput(reward=None, metadata={"final_answer": text})
'''


def test_a_run_killed_mid_rollout_resumes_to_the_uninterrupted_run(tmp_path):
    """kill -9 with episodes in flight, steps rolled out ahead and not trained: --resume gives the same metric rows
    (timings aside) and the same final weights as the run that was not killed."""
    from safetensors.torch import load_file

    (tmp_path / "die.py").write_text(KILLER)
    model = tmp_path / "model"
    args = [sys.executable, "-m", "astuner", "--conf", str(REPO_ROOT / TINY), f"astuner.model.path={model}",
            f"astuner.rollout.agentscope_workflow={tmp_path / 'die.py'}->DigitOrDie",
            "astuner.trainer_common.total_training_steps=6", "astuner.trainer_common.test_freq=3",
            "astuner.trainer_common.save_freq=2", "astuner.trainer_common.off_policy.max_staleness=2",
            f"astuner.task_reader.dataset_file.training.file_path={REPO_ROOT / 'tutorial/example_tiny_cpu/train.jsonl'}",
            f"astuner.task_reader.dataset_file.validation.file_path={REPO_ROOT / 'tutorial/example_tiny_cpu/val.jsonl'}"]

    def astuner(exp: str, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(args + ["--exp-dir", str(tmp_path / exp), *extra], cwd=tmp_path, capture_output=True,
                              text=True, timeout=900, env={**os.environ, **(env or {})})

    whole = astuner("whole")
    assert whole.returncode == 0, whole.stderr[-3000:]
    run = tmp_path / "cut" / "tiny_cpu"
    killed = astuner("cut", env={"KILL_AFTER": str(run / "checkpoints" / "global_step_2" / "COMPLETE")})
    assert killed.returncode == -9, killed.stderr[-3000:]
    saved = sorted(p.name for p in (run / "checkpoints").iterdir() if (p / "COMPLETE").exists())
    assert "global_step_2" in saved and "global_step_6" not in saved
    resumed = astuner("cut", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stderr

    def rows(root: Path) -> list[dict]:
        return [{k: v for k, v in json.loads(line).items() if not k.startswith("perf/") and "wait_s" not in k}
                for line in (root / "metrics.jsonl").read_text().splitlines()]

    assert rows(run) == rows(tmp_path / "whole" / "tiny_cpu")
    a = load_file(tmp_path / "whole" / "tiny_cpu" / "checkpoints" / "global_step_6" / "model" / "model.safetensors")
    b = load_file(run / "checkpoints" / "global_step_6" / "model" / "model.safetensors")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)


def test_truncated_importance_weight_scales_the_loss_and_is_capped(tiny_model_dir, tokenizer):
    """pi_old / pi_behaviour per token, capped: behaviour log-probs log(4) below the learner's weigh each token's
    surrogate by the cap 2 (the pg loss doubles); equal ones leave the update as it was."""
    import copy
    import math

    from astuner.backbone.debug.policy import PolicyTrainer
    from astuner.config.schema_trainer import TrainerCommonConfig
    from tests.backbone.debug_backbone.test_policy import rollout_samples

    model, samples = rollout_samples(tiny_model_dir, tokenizer)
    for s, adv in zip(samples, (1.0, -1.0, 1.0)):
        s.advantage = adv
    cfg = TrainerCommonConfig()

    def update(is_cap, shift=0.0):
        own = copy.deepcopy(model)
        batch = [copy.deepcopy(s) for s in samples]
        for s in batch:
            s.logprobs = [lp - shift for lp in s.logprobs]
        metrics = PolicyTrainer(own, tokenizer.pad_token_id, cfg).update(batch, 0.8, is_cap)
        return metrics, own

    plain, m0 = update(None)
    same, m1 = update(2.0)
    stale, _ = update(2.0, math.log(4.0))
    assert "off_policy/is_weight_mean" not in plain
    assert same["off_policy/is_weight_mean"] == pytest.approx(1.0, abs=1e-3) and same["off_policy/is_capped_frac"] == 0
    assert same["actor/pg_loss"] == pytest.approx(plain["actor/pg_loss"], rel=1e-3)
    assert stale["off_policy/is_weight_mean"] == pytest.approx(4.0, rel=1e-3) and stale["off_policy/is_capped_frac"] == 1
    assert stale["actor/pg_loss"] == pytest.approx(2 * plain["actor/pg_loss"], rel=1e-3)


class FakeRollouts:
    """The producer's rollouts, for the drop rule alone: each step is one sample, stamped with its version."""

    def __init__(self):
        self.selector = SimpleNamespace(state_dict=lambda: {}, load_state_dict=lambda s: None, epoch=0,
                                        feedback=lambda rates: None)

    def draw(self):
        return [object()], 0

    async def roll_out(self, step, tasks, epoch, version, manager, feedback):
        from astuner.backbone.debug.experience import StepExperience
        from astuner.schema import Sample

        sample = Sample(task_id=f"t{step}", episode_uuid=f"e{step}", repeat_index=0, input_ids=[1, 2], prompt_length=1,
                        loss_mask=[1], logprobs=[0.0], policy_version=version)
        return StepExperience(tasks, SimpleNamespace(samples=[sample]), [sample], {}, 0.0, epoch, version)


class FakeEngine:
    def __init__(self):
        import torch

        self.generator = torch.Generator()

    async def update_weights(self, weights, strict=True):
        pass


def test_drop_takes_the_newest_weights_and_drops_what_is_too_old():
    """on_stale drop, k = 1: the producer runs up to two steps ahead on the newest weights there are; a step whose
    weights are two versions behind the learner's is dropped whole and counted."""
    from astuner.backbone.debug.pipeline import PipelinedSource

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    source = PipelinedSource(FakeRollouts(), [(FakeEngine(), None), (FakeEngine(), None)],
                             schedule(k=1, on_stale="drop"), loop, 1, 4, seed=0)
    try:
        source.publish(0, {})
        source.start()
        first = source.collect(1)  # rolled out on version 0, trained at version 0
        deadline = time.monotonic() + 60
        while 3 not in source.ready and time.monotonic() < deadline:  # step 3 rolled out before version 1 exists
            time.sleep(0.01)
        assert source.ready[3].version == 0
        second = source.collect(2)  # version 0 at learner version 1: lag 1, kept
        source.publish(1, {})
        third = source.collect(3)  # version 0 at learner version 2: lag 2 > 1, dropped
    finally:
        source.stop()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
    assert [e.metrics["off_policy/version_lag"] for e in (first, second, third)] == [0, 1, 2]
    assert len(first.samples) == len(second.samples) == 1
    assert third.samples == [] and third.metrics["off_policy/dropped_samples"] == 1
    assert third.metrics["off_policy/dropped_groups"] == 1 and third.metrics["off_policy/lag_max"] == 0
