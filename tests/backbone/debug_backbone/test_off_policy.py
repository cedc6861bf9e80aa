"""Off-policy training on the debug backbone (trainer_common.off_policy): the schedule's meaning (Trinity-RFT's), a
run whose samples lag by at most k versions, the truncated importance weight, samples dropped under `drop`, and a
run killed with SIGKILL mid-rollout and resumed that equals the run that was not killed."""

from __future__ import annotations

import asyncio
import json
import os
import re
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


def test_a_staleness_bound_beyond_the_run_or_the_machines_memory_is_refused_at_dry_run(tiny_model_dir, tmp_path,
                                                                                       capsys, monkeypatch):
    """max_staleness past the run's last step (no step can lag that much; the debug backbone would still build
    that many engine copies), or more copies of the policy than the memory available: one line each, with the
    numbers, before anything is built."""
    monkeypatch.chdir(REPO_ROOT)
    base = ["--conf", TINY, "--exp-dir", str(tmp_path), "--dry-run", f"astuner.model.path={tiny_model_dir}"]
    key = "astuner.trainer_common.off_policy.max_staleness"
    code, _, err = run_cli(base + [f"{key}=1000", "astuner.trainer_common.total_training_steps=8"], capsys)
    lines = [line for line in err.splitlines() if line.startswith("astuner: error:")]
    assert code == 2 and len(lines) == 1 and f"{key} 1000 is beyond the run's 8 steps (a step's samples lag at most " \
        f"7 versions); at most 8" in lines[0], err[-1500:]
    code, _, err = run_cli(base + [f"{key}=9", "astuner.trainer_common.total_training_steps=8"], capsys)
    assert code == 2 and f"{key} 9 is beyond the run's 8 steps" in err, err[-1500:]
    code, _, err = run_cli(base + [f"{key}=8", "astuner.trainer_common.total_training_steps=8"], capsys)
    assert code == 0, err[-1500:]  # the whole run (a short trial of a schedule): taken, its copies as the run needs
    from astuner.backbone import machine

    monkeypatch.setattr(machine, "available_memory", lambda: 4 << 20)  # 4 MiB: 8 copies of the tiny policy do not fit
    code, _, err = run_cli(base + [f"{key}=7", "astuner.trainer_common.total_training_steps=8"], capsys)
    lines = [line for line in err.splitlines() if line.startswith("astuner: error:")]
    assert code == 2 and len(lines) == 1 and re.search(
        rf"{key} 7: 8 copies of the 0.1M-parameter policy \(0.0 GiB\) and its training \(0.0 GiB\) do not fit "
        rf"the 0.0 GiB of memory available; at most 4 here", lines[0]), err[-1500:]
    assert not (tmp_path / "tiny_cpu").exists()


def test_off_policy_keys_that_change_nothing_are_said_at_dry_run(tmp_path, capsys, monkeypatch):
    """on_stale, anchor and is_cap do nothing in a synchronous run, nor is_cap where the clip is around the behaviour
    policy: each said in one WARNING line; a trace store trained by policy gradient reads is_cap, so it is not."""
    monkeypatch.chdir(REPO_ROOT)
    base = ["--conf", TINY, "--exp-dir", str(tmp_path), "--dry-run", f"astuner.model.path={tmp_path / 'm'}"]
    key = "astuner.trainer_common.off_policy"

    def warnings(*overrides: str) -> list[str]:
        code, _, err = run_cli(base + list(overrides), capsys)
        assert code == 0, err
        return [line for line in err.splitlines() if "WARNING" in line and key in line]

    assert warnings(f"{key}.max_staleness=0", f"{key}.on_stale=drop", f"{key}.is_cap=3") == [
        f"astuner: WARNING: {key}: on_stale drop, is_cap 3 (max_staleness 0: every sample is on-policy): set, and "
        f"changing nothing in this configuration (docs/off_policy.md)"]
    assert len(warnings(f"{key}.anchor=behaviour")) == 1
    assert "is_cap 3 (anchor behaviour clips instead of weighing)" in warnings(
        f"{key}.max_staleness=1", f"{key}.anchor=behaviour", f"{key}.is_cap=3")[0]
    assert warnings(f"{key}.max_staleness=1", f"{key}.is_cap=3", f"{key}.on_stale=drop") == []
    assert warnings() == []


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


@pytest.mark.parametrize("anchor", ["behaviour", "learner"])
def test_the_behaviour_anchor_does_not_push_a_token_past_the_clip_from_the_weights_that_sampled_it(
        tiny_model_dir, tokenizer, anchor):
    """Samples whose tokens the learner's weights already favour e^0.5 more than the weights that sampled them (as
    after the updates since: the lag): with the clip around the behaviour policy (Trinity-RFT's loss) a positive
    advantage pushes them no further (every token clipped: the weights stay), a negative one still pulls them back;
    decoupled PPO (anchor learner) clips around the learner's own weights, pushes them further up, and weighs each
    token by pi_old / pi_behaviour (here e^0.5, under the cap)."""
    import copy
    import math

    from astuner.backbone.debug.policy import PolicyTrainer
    from astuner.config.schema_trainer import TrainerCommonConfig
    from tests.backbone.debug_backbone.test_policy import rollout_samples

    model, samples = rollout_samples(tiny_model_dir, tokenizer)
    cfg = TrainerCommonConfig()
    cfg.optim.weight_decay, cfg.mini_batch_num = 0.0, 2  # the learner's log-probs recomputed, as in the main job

    def moved(advantage: float) -> tuple[float, dict]:
        own = copy.deepcopy(model)
        batch = [copy.deepcopy(s) for s in samples]
        for s in batch:
            s.advantage = advantage
            s.logprobs = [lp - 0.5 for lp in s.logprobs]  # the behaviour policy: e^0.5 less likely than the learner
        metrics = PolicyTrainer(own, tokenizer.pad_token_id, cfg).update(batch, 0.8, 2.0, anchor)
        change = max(float((a - b).abs().max()) for a, b in zip(own.parameters(), model.parameters()))
        return change, metrics

    up, up_metrics = moved(1.0)
    down, _ = moved(-1.0)
    assert down > 0  # pulled back from where the updates since took it: the dual clip lets that through
    if anchor == "behaviour":
        assert up == 0 and up_metrics["actor/clip_frac"] == 1.0 and "off_policy/is_weight_mean" not in up_metrics
    else:
        assert up > 0 and up_metrics["off_policy/is_weight_mean"] == pytest.approx(math.exp(0.5), rel=1e-3)


class FakeRollouts:
    """The producer's rollouts, for the drop rule alone: each step is one sample, stamped with its version."""

    def __init__(self):
        self.selector = SimpleNamespace(state_dict=lambda: {}, load_state_dict=lambda s: None, epoch=0,
                                        feedback=lambda rates: None)

    def draw(self):
        return [object()], 0, (0, 1)

    async def roll_out(self, step, tasks, epoch, version, manager, feedback, drawn):
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


def test_drop_takes_the_newest_weights_and_never_runs_past_the_bound():
    """on_stale drop, k = 1: each step takes the newest weights published when it starts, and starts only while those
    are within the bound of the learner version that will train it: the producer waits for the learner's published
    weights, so no step is rolled out only to be dropped (a learner slower than the rollouts once lost every step)."""
    from astuner.backbone.debug.pipeline import PipelinedSource

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    source = PipelinedSource(FakeRollouts(), [(FakeEngine(), None), (FakeEngine(), None)],
                             schedule(k=1, on_stale="drop"), loop, 1, 5, seed=0)
    got = []
    try:
        source.publish(0, {})
        source.start()
        got += [source.collect(1), source.collect(2)]  # a learner behind: it has not published version 1 yet
        deadline = time.monotonic() + 2  # time for a producer that would roll step 3 out on version 0 to do so
        while 3 not in source.ready and time.monotonic() < deadline:
            time.sleep(0.01)
        source.publish(1, {})
        source.publish(2, {})
        for step in range(3, 6):  # then a step's experience, its update's weights
            got.append(source.collect(step))
            source.publish(step, {})
    finally:
        source.stop()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
    versions = [e.version for e in got]
    assert versions[:2] == [0, 0] and versions == sorted(versions)  # steps 1 and 2 at once, then the newest weights
    lags = [e.metrics["off_policy/version_lag"] for e in got]
    assert lags == [step - 1 - v for step, v in enumerate(versions, 1)] and all(0 <= lag <= 1 for lag in lags)
    assert all(len(e.samples) == 1 and e.metrics["off_policy/dropped_samples"] == 0 for e in got)


def stale_source(k: int, on_stale: str = "drop"):
    """A producer's source whose producer is not started: its rules, queried directly (no thread, no timing)."""
    from astuner.backbone.debug.pipeline import PipelinedSource

    return PipelinedSource(FakeRollouts(), [], schedule(k=k, on_stale=on_stale), None, 1, 20, seed=0)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_drop_starts_a_step_at_most_k_plus_1_steps_ahead_of_the_published_weights(k):
    """on_stale drop: with weights of version v published, steps v + 1 ... v + k + 1 may start on them (trained at
    versions v ... v + k, their samples lag at most k) and step v + k + 2 waits for newer weights: rollouts run at
    most k + 1 steps ahead of the learner, neither fewer (a lost overlap) nor more (steps rolled out to be dropped)."""
    source = stale_source(k)
    startable = {}
    for version in (0, 4):
        source.publish(version, {})
        startable[version] = [step for step in range(version + 1, 20) if source._version_for(step) == version]
    assert startable == {0: list(range(1, k + 2)), 4: list(range(5, k + 6))}


def stale_step(version: int, groups: dict[str, list[bool]]):
    """A step's experience rolled out on `version`: per task, its episodes (True: failed, so without samples)."""
    from astuner.backbone.debug.experience import StepExperience
    from astuner.rollout.manager import EpisodeResult, RolloutBatch
    from astuner.schema import Sample, Task

    episodes = []
    for task_id, failures in groups.items():
        for r, failed in enumerate(failures):
            e = EpisodeResult(task=Task(task_id=task_id, main_query="q"), repeat_index=r,
                              episode_uuid=f"{task_id}-{r}", failed=failed)
            if not failed:
                e.samples = [Sample(task_id=task_id, episode_uuid=e.episode_uuid, repeat_index=r, input_ids=[1, 2],
                                    prompt_length=1, loss_mask=[1], logprobs=[0.0], policy_version=version)]
            episodes.append(e)
    batch = RolloutBatch(episodes, {})
    return StepExperience([Task(task_id=t, main_query="q") for t in groups], batch, batch.samples, {}, 0.0, 0, version)


@pytest.mark.parametrize("k", [1, 2])
def test_drop_trains_samples_k_versions_old_and_drops_older_ones(k):
    """The learner's guard (on_stale drop): a step whose samples lag exactly k versions is trained; one whose
    samples would lag k + 1 is dropped whole and counted."""
    source = stale_source(k)
    source.ready[k + 1] = stale_step(0, {"a": [False, False]})  # trained at version k: lag k
    source.ready[k + 2] = stale_step(0, {"a": [False, False]})  # trained at version k + 1: lag k + 1
    kept, dropped = source.collect(k + 1), source.collect(k + 2)
    assert [(len(e.samples), e.metrics["off_policy/dropped_samples"]) for e in (kept, dropped)] == [(2, 0), (0, 2)]


def test_a_group_whose_episodes_all_failed_is_not_counted_among_the_stale_groups_dropped():
    """A stale step dropped whole counts the groups it took from training; a group whose episodes all failed had no
    samples to drop (it was never going to train), so it is not among them."""
    source = stale_source(1)
    source.ready[3] = stale_step(0, {"ok": [False, False], "broken": [True, True]})  # lag 2 > k = 1: dropped
    metrics = source.collect(3).metrics
    assert (metrics["off_policy/dropped_samples"], metrics["off_policy/dropped_groups"]) == (2, 1)


class OneTaskSelector:
    """Draws the same task every step: whatever differs between two steps' episodes is the step's own."""

    epoch = 0

    def __init__(self):
        self.drawn = 0

    def position(self):
        return self.drawn

    def next_batch(self, n):
        from astuner.schema import Task

        self.drawn += n
        return [Task(task_id="same", main_query="q")] * n

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass

    def feedback(self, rates):
        pass


def test_each_off_policy_step_samples_from_seeds_of_its_own(tokenizer):
    """k = 1 (wait): three steps of the same task rolled out by the producer, two engines in turn. No two episodes of
    the run sample from the same seed (a seed per step and episode, not one for every step: a step would repeat
    another's draws), and each step reseeds its engine's own generator with a seed of its own."""
    import torch

    from astuner import Workflow, WorkflowOutput
    from astuner.backbone.debug.experience import RolloutSource
    from astuner.backbone.debug.pipeline import PipelinedSource
    from astuner.rollout.manager import RolloutManager
    from tests.helpers import ScriptedEngine, rollout_config

    class AskOnce(Workflow):
        async def execute(self, workflow_task, model_tuner):
            await model_tuner([{"role": "user", "content": "q"}])
            return WorkflowOutput(reward=float(workflow_task.repeat_index))

    class Recording(ScriptedEngine):
        """Records each request's seed (ScriptedEngine.samplings) and the engine's generator seed at the time."""

        def __init__(self):
            super().__init__(tokenizer, lambda prompt: "ok")
            self.generator = torch.Generator()
            self.generator_seeds = []

        async def generate(self, prompt_ids, sampling):
            self.generator_seeds.append(self.generator.initial_seed())
            return await super().generate(prompt_ids, sampling)

        async def update_weights(self, weights, strict=True):
            pass

    cfg = rollout_config(num_repeat=3, seed=7)
    cfg.data.train_batch_size = 1
    engines = [Recording(), Recording()]
    pool = [(engine, RolloutManager(cfg, AskOnce, None, engine, tokenizer)) for engine in engines]
    rollouts = RolloutSource(cfg, None, OneTaskSelector(), None, "seeds", lambda: 0)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    source = PipelinedSource(rollouts, pool, schedule(k=1), loop, 1, 3, seed=cfg.rollout.seed)
    try:
        source.publish(0, {})
        source.start()
        for step in (1, 2, 3):
            assert len(source.collect(step).batch.episodes) == 3
            source.publish(step, {})
    finally:
        source.stop()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
    seeds = [s.seed for engine in engines for s in engine.samplings]
    assert len(seeds) == 9 and None not in seeds and len(set(seeds)) == 9, seeds
    assert len({seed for engine in engines for seed in engine.generator_seeds}) == 3


def test_the_prompt_ledger_counts_prompts_skipped_and_trained_again():
    """Each trained step's draw should begin where the last one's ended: a later start skipped prompts (lost), an
    earlier one trains some again (replayed); the counts survive a checkpoint."""
    from astuner.backbone.debug.experience import PromptLedger

    ledger = PromptLedger()
    assert ledger.trained((0, 8)) == {"resume/prompts_lost": 0.0, "resume/prompts_replayed": 0.0}
    ledger.trained((8, 16))
    assert ledger.trained((24, 32)) == {"resume/prompts_lost": 8.0, "resume/prompts_replayed": 0.0}  # 16-24 skipped
    resumed = PromptLedger(ledger.state_dict())
    assert resumed.trained((28, 36)) == {"resume/prompts_lost": 8.0, "resume/prompts_replayed": 4.0}  # 28-32 again
    assert resumed.trained((36, 44))["resume/prompts_replayed"] == 4.0


def test_selector_positions_count_every_prompt_drawn():
    """position(): the prompts drawn so far, whatever the selector: a sequential one's short last batch of an epoch
    and a new epoch's first, a random one's draws with replacement."""
    from astuner.data.selector import RandomSelector, ShuffleSelector
    from astuner.schema import Task

    tasks = [Task(task_id=str(i), main_query="q") for i in range(10)]
    for selector in (ShuffleSelector(tasks, 3), RandomSelector(tasks, 3)):
        before = []
        for _ in range(5):
            before.append(selector.position())
            selector.next_batch(4)
        assert before == ([0, 4, 8, 10, 14] if isinstance(selector, ShuffleSelector) else [0, 4, 8, 12, 16])


KILL_AT = '''
import os, signal
from astuner import ModelTuner, Workflow, WorkflowOutput, WorkflowTask

_episodes = []


class DigitOrDie(Workflow):
    """The tiny demo's agent; SIGKILL when this process has started KILL_AT episodes."""

    async def execute(self, workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput:
        _episodes.append(1)
        if len(_episodes) == int(os.environ.get("KILL_AT", "0")):
            os.kill(os.getpid(), signal.SIGKILL)
        reply = await model_tuner([{"role": "user", "content": workflow_task.task.main_query}])
        text = "".join(block.get("text", "") for block in reply.content if block["type"] == "text")
        return WorkflowOutput(reward=None, metadata={"final_answer": text})
'''


@pytest.mark.parametrize("on_stale", ["wait", "drop"])
def test_kills_at_ten_random_points_lose_and_replay_no_prompt(tmp_path, on_stale):
    """kill -9 at 10 random points (episodes in flight, steps rolled out ahead, the learner anywhere in its step),
    --resume after each: every step trains the tasks the uninterrupted run trains at that step, each prompt once
    (resume/prompts_lost and resume/prompts_replayed 0); under wait, the same metric rows as the uninterrupted run."""
    import random

    (tmp_path / "die.py").write_text(KILL_AT)
    steps, per_step = 24, 4 * 4  # episodes per step: 4 tasks x 4
    args = [sys.executable, "-m", "astuner", "--conf", str(REPO_ROOT / TINY), f"astuner.model.path={tmp_path / 'm'}",
            f"astuner.rollout.agentscope_workflow={tmp_path / 'die.py'}->DigitOrDie",
            f"astuner.trainer_common.total_training_steps={steps}", "astuner.trainer_common.test_freq=-1",
            "astuner.trainer_common.val_before_train=false", "astuner.trainer_common.save_freq=1",
            "astuner.data.train_batch_size=4", "astuner.rollout.num_repeat=4",
            "astuner.trainer_common.off_policy.max_staleness=2", f"astuner.trainer_common.off_policy.on_stale={on_stale}",
            f"astuner.task_reader.dataset_file.training.file_path={REPO_ROOT / 'tutorial/example_tiny_cpu/train.jsonl'}",
            f"astuner.task_reader.dataset_file.validation.file_path={REPO_ROOT / 'tutorial/example_tiny_cpu/val.jsonl'}"]

    def astuner(exp: str, *extra: str, kill_at: int = 0) -> subprocess.CompletedProcess:
        return subprocess.run(args + ["--exp-dir", str(tmp_path / exp), *extra], cwd=tmp_path, capture_output=True,
                              text=True, timeout=900, env={**os.environ, "KILL_AT": str(kill_at)})

    whole = astuner("whole")
    assert whole.returncode == 0, whole.stderr[-3000:]
    draws = random.Random(on_stale)
    kills = 0
    while kills < 10:
        # a life starts the 3 steps the schedule lets it roll out at once, then one more per step trained: killed
        # within its first 6 steps, before, during or after a checkpoint, with steps in flight
        life = astuner("cut", *(["--resume"] if kills else []), kill_at=draws.randint(per_step, 6 * per_step))
        if life.returncode == 0:  # it finished before its kill point: the rest of the kills start it over
            break
        assert life.returncode == -9, life.stderr[-3000:]
        kills += 1
    if kills:
        last = astuner("cut", "--resume")
        assert last.returncode == 0, last.stderr[-3000:]
    assert kills == 10
    resumed_at = re.findall(r"resumed from .*global_step_(\d+)", last.stderr)
    assert resumed_at and int(resumed_at[0]) >= 5, last.stderr[-2000:]  # the killed lives trained steps
    run, reference = tmp_path / "cut" / "tiny_cpu", tmp_path / "whole" / "tiny_cpu"

    def rows(root: Path) -> list[dict]:
        return [json.loads(line) for line in (root / "metrics.jsonl").read_text().splitlines()]

    def tasks(root: Path) -> list[list[str]]:
        return [[e["task_id"] for e in map(json.loads, (root / "trajectories" / f"step_{step}.jsonl").read_text()
                                            .splitlines())] for step in range(1, steps + 1)]

    assert [r["step"] for r in rows(run)] == list(range(1, steps + 1))
    assert all(r["resume/prompts_lost"] == 0 and r["resume/prompts_replayed"] == 0 for r in rows(run))
    assert tasks(run) == tasks(reference)
    if on_stale == "wait":
        def steady(r: dict) -> dict:
            return {k: v for k, v in r.items() if not k.startswith("perf/") and "wait_s" not in k}

        assert [steady(r) for r in rows(run)] == [steady(r) for r in rows(reference)]


def test_the_same_weights_validate_to_the_same_number_synchronous_or_off_policy(tmp_path, capsys, monkeypatch):
    """Validation is reproducible: the initial weights validate to the same figures in a synchronous run and in an
    off-policy one (whose rollouts run in a thread beside the learner, on engines of their own), and step 1, rolled
    out on those weights in both, samples the same episodes."""
    monkeypatch.chdir(REPO_ROOT)

    def run(k: int) -> tuple[list[dict], list[tuple[str, str]]]:
        exp = tmp_path / f"k{k}"
        code, _, err = run_cli(["--conf", TINY, "--exp-dir", str(exp), f"astuner.model.path={tmp_path / 'm'}",
                                "astuner.trainer_common.total_training_steps=2", "astuner.trainer_common.test_freq=-1",
                                "astuner.trainer_common.save_freq=-1", "astuner.rollout.val_kwargs.temperature=1.0",
                                f"astuner.trainer_common.off_policy.max_staleness={k}"], capsys)
        assert code == 0, err
        root = exp / "tiny_cpu"
        episodes = [(e["episode_uuid"], e["response"]) for e in map(json.loads, (root / "trajectories" /
                                                                                 "step_1.jsonl").read_text().splitlines())]
        return [json.loads(line) for line in (root / "metrics.jsonl").read_text().splitlines()], episodes

    (sync, sync_episodes), (ahead, ahead_episodes) = run(0), run(1)
    assert [r["step"] for r in sync] == [r["step"] for r in ahead] == [0, 1, 2]
    validation = ("val/reward_mean", "val/success_rate")
    assert {k: sync[0][k] for k in validation} == {k: ahead[0][k] for k in validation}
    assert sync_episodes == ahead_episodes and len({reply for _, reply in sync_episodes}) > 10  # sampled, not alike
    assert sync[1]["reward/mean"] == ahead[1]["reward/mean"] and sync[1]["reward/std"] == ahead[1]["reward/std"]
