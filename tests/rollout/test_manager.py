"""The rollout manager: groups, concurrency bound, failures, timeouts, judges, madness."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from astuner import JudgeOutput, Task, Workflow, WorkflowOutput
from astuner.rollout.manager import RolloutFailed, RolloutManager, build_judge
from astuner.task_judge.math_answer_as_judge import MathAnswerAsJudge
from tests.helpers import ScriptedEngine, rollout_config


def config(**rollout):
    return rollout_config(**rollout)


def text_of(response):
    return "".join(b.get("text", "") for b in response.content if b["type"] == "text")


class AskOnce(Workflow):
    async def execute(self, workflow_task, model_tuner):
        reply = await model_tuner([{"role": "user", "content": workflow_task.task.main_query}])
        return WorkflowOutput(reward=None, metadata={"final_answer": text_of(reply)})


class Explodes(Workflow):
    async def execute(self, workflow_task, model_tuner):
        await model_tuner([{"role": "user", "content": "x"}])
        if workflow_task.repeat_index == 0:
            raise RuntimeError("tool crashed")
        return WorkflowOutput(reward=1.0)


class Hangs(Workflow):
    async def execute(self, workflow_task, model_tuner):
        if workflow_task.repeat_index == 0:
            await asyncio.sleep(60)
        return WorkflowOutput(reward=0.5)


def tasks(n=2):
    return [Task(task_id=f"t{i}", main_query=f"what is {i}+{i}?", metadata={"answer": f"#### {2 * i}"})
            for i in range(n)]


def answers(prompt_text):
    n = int(prompt_text.split("what is ")[1].split("+")[0])
    return f"\\boxed{{{2 * n}}}" if n % 2 == 0 else "\\boxed{999}"


def test_groups_judge_and_samples(tokenizer):
    engine = ScriptedEngine(tokenizer, answers, delay_s=0.01)
    cfg = config()
    manager = RolloutManager(cfg, AskOnce, build_judge(MathAnswerAsJudge, cfg), engine, tokenizer)
    batch = asyncio.run(manager.run(tasks(2)))
    groups = batch.groups()
    assert list(groups) == ["t0", "t1"] and all(len(g) == 3 for g in groups.values())
    assert [e.reward for e in groups["t0"]] == [1.0] * 3 and [e.reward for e in groups["t1"]] == [0.0] * 3
    assert len(batch.samples) == 6 and all(s.reward == e.reward for e in batch.episodes for s in e.samples)
    assert sorted(tuple(s.trained_spans()[0]) for s in batch.samples) == sorted(map(tuple, engine.outputs))
    m = batch.metrics
    assert m["reward/mean"] == 0.5 and m["reward/success_rate"] == 0.5 and m["rollout/error_rate"] == 0.0
    assert m["rollout/samples_per_episode"] == 1.0 and m["judge/answer_found"] == 1.0


def test_concurrency_is_bounded_by_max_env_worker(tokenizer):
    # each call stays in flight long enough for the other episodes allowed in to reach the engine, under load too
    engine = ScriptedEngine(tokenizer, answers, delay_s=0.25)
    manager = RolloutManager(config(max_env_worker=3), AskOnce, build_judge(MathAnswerAsJudge, config()), engine,
                             tokenizer)
    asyncio.run(manager.run(tasks(4)))
    assert engine.max_in_flight == 3


def test_raising_episode_is_recorded_and_step_goes_on(tokenizer):
    engine = ScriptedEngine(tokenizer, lambda p: "ok")
    manager = RolloutManager(config(failure_reward=-0.5), Explodes, None, engine, tokenizer)
    batch = asyncio.run(manager.run(tasks(2)))
    failed = [e for e in batch.episodes if e.failed]
    assert len(failed) == 2 and all(e.reward == -0.5 for e in failed)
    assert "RuntimeError: tool crashed" in failed[0].error
    assert batch.metrics["rollout/error_rate"] == pytest.approx(1 / 3)
    assert all(s.reward == -0.5 for e in failed for s in e.samples) and all(e.samples for e in failed)


def test_failed_episodes_are_not_trained_on_by_default(tokenizer):
    """A crash is not a wrong answer: with failure_reward unset a failed episode has no samples (outside the
    group statistics and the loss), reward 0 in the metrics, and is counted; its retry (episode_retries 1: a new
    episode id) failed too, so its group is short: dropped whole by default, its survivors kept with train."""
    for short_group in ("drop", "train"):
        manager = RolloutManager(config(short_group=short_group), Explodes, None,
                                 ScriptedEngine(tokenizer, lambda p: "ok"), tokenizer)
        batch = asyncio.run(manager.run(tasks(2)))
        failed = [e for e in batch.episodes if e.failed]
        assert len(failed) == 2 and all(e.reward == 0.0 and not e.samples and e.attempts == 2 for e in failed)
        assert failed[0].recorder.calls  # it did call the model before it crashed
        survivors = [e for e in batch.episodes if not e.failed]
        if short_group == "train":
            assert all(e.samples and not e.group_dropped for e in survivors)
        else:
            assert all(not e.samples and e.group_dropped for e in survivors) and not batch.samples
        m = batch.metrics
        assert m["rollout/error_rate"] == pytest.approx(1 / 3) and m["rollout/retries"] == 2
        assert m["rollout/short_groups"] == 2 and m["rollout/dropped_short_groups"] == (2 if short_group == "drop"
                                                                                      else 0)


class FailsTaskOneWholly(Workflow):
    """Task t1: every episode raises; task t0: its first episode only."""

    async def execute(self, workflow_task, model_tuner):
        await model_tuner([{"role": "user", "content": "x"}])
        if workflow_task.task.task_id == "t1" or workflow_task.repeat_index == 0:
            raise RuntimeError("tool crashed")
        return WorkflowOutput(reward=1.0)


def test_a_group_whose_episodes_all_failed_is_short_but_not_counted_as_dropped(tokenizer):
    """rollout/dropped_short_groups counts the groups whose survivors left the step (short_group drop); a group
    whose every episode failed had no survivor to take out: it is short, not dropped."""
    manager = RolloutManager(config(episode_retries=0, max_error_rate=1.0), FailsTaskOneWholly, None,
                             ScriptedEngine(tokenizer, lambda p: "ok"), tokenizer)
    m = asyncio.run(manager.run(tasks(2))).metrics
    assert (m["rollout/short_groups"], m["rollout/dropped_short_groups"]) == (2, 1)


class FailsAtRandom(Workflow):
    """Fails two episodes in five, as a flaky tool or environment would, by the episode's id (a retry has its own)."""

    async def execute(self, workflow_task, model_tuner):
        import random

        await model_tuner([{"role": "user", "content": "x"}])
        if random.Random(workflow_task.episode_uuid).random() < 0.4:
            raise ConnectionError("environment went away")
        return WorkflowOutput(reward=float(workflow_task.repeat_index % 2))


@pytest.mark.parametrize("retries", [0, 1, 2])
def test_failures_at_random_are_retried_and_short_groups_leave_whole(tokenizer, retries):
    """Each failed episode runs again with a fresh id up to episode_retries times; a group still short leaves the
    step whole (no survivor's advantage describes a group without its failures), and every count is in the
    metrics and the episodes' rows."""
    manager = RolloutManager(config(episode_retries=retries, num_repeat=4, max_error_rate=1.0), FailsAtRandom, None,
                             ScriptedEngine(tokenizer, lambda p: "ok"), tokenizer)
    batch = asyncio.run(manager.run(tasks(12), tag="flaky:train:1"))
    groups = [batch.episodes[i:i + 4] for i in range(0, 48, 4)]
    assert all(1 <= e.attempts <= retries + 1 for e in batch.episodes)
    assert all(e.attempts == retries + 1 for e in batch.episodes if e.failed)
    assert batch.metrics["rollout/retries"] == sum(e.attempts - 1 for e in batch.episodes)
    short = [g for g in groups if any(e.failed for e in g)]
    assert batch.metrics["rollout/short_groups"] == len(short) and (short or retries == 2)
    for g in groups:
        if g in short:
            assert all(e.group_dropped and not e.samples for e in g)
        else:
            assert all(not e.group_dropped and e.samples for e in g)
    assert batch.metrics["rollout/dropped_short_groups"] == sum(not all(e.failed for e in g) for g in short)
    if retries:  # a retry has its own id: some episodes that failed first succeeded on a run again
        assert any(e.attempts > 1 and not e.failed for e in batch.episodes)
    failed_rate = sum(e.failed for e in batch.episodes) / 48
    assert failed_rate < (0.6 if retries == 0 else 0.3)


def test_hanging_episode_times_out(tokenizer):
    # 2 s: the episodes that do not hang finish within it on a loaded machine too; the hanging one sleeps 60 s
    manager = RolloutManager(config(episode_timeout_s=2.0), Hangs, None, ScriptedEngine(tokenizer, []), tokenizer)
    started = time.perf_counter()
    batch = asyncio.run(manager.run(tasks(1)))
    assert time.perf_counter() - started < 30  # not the hanging episode's 60 s
    timed_out = [e for e in batch.episodes if e.failed]
    assert len(timed_out) == 1 and "ran over 2.0s" in timed_out[0].error


def test_error_rate_above_limit_stops_with_message(tokenizer):
    manager = RolloutManager(config(max_error_rate=0.2), Explodes, None, ScriptedEngine(tokenizer, lambda p: "ok"),
                             tokenizer)
    with pytest.raises(RolloutFailed, match=r"2 of 6 episodes failed .*RuntimeError: tool crashed"):
        asyncio.run(manager.run(tasks(2)))


def test_missing_reward_without_judge_fails_the_episode(tokenizer):
    manager = RolloutManager(config(max_error_rate=1.0), AskOnce, None, ScriptedEngine(tokenizer, answers), tokenizer)
    batch = asyncio.run(manager.run(tasks(1)))
    assert all(e.failed and "no judge is configured" in e.error for e in batch.episodes)


async def function_workflow(task, model, auxiliary_models=None):
    reply = await model([{"role": "user", "content": task["main_query"]}])
    return WorkflowOutput(response=text_of(reply))


async def function_judge(task, response, auxiliary_models=None):
    return JudgeOutput(reward=1.0 if task["answer"].split()[-1] in response else 0.0, metrics={"judge/custom": 1.0})


def test_function_workflow_and_judge(tokenizer):
    manager = RolloutManager(config(), function_workflow, function_judge, ScriptedEngine(tokenizer, answers),
                             tokenizer)
    batch = asyncio.run(manager.run(tasks(2)))
    assert [e.reward for e in batch.episodes] == [1.0] * 3 + [0.0] * 3
    assert batch.metrics["judge/custom"] == 1.0


def test_madness_overrides_reward(tokenizer):
    cfg = config(agent_madness_reward=-1.0, compute_madness_checklist=["nonsense"])
    engine = ScriptedEngine(tokenizer, lambda p: "loop " * 30)
    manager = RolloutManager(cfg, AskOnce, build_judge(MathAnswerAsJudge, cfg), engine, tokenizer)
    batch = asyncio.run(manager.run(tasks(1)))
    assert all(e.reward == -1.0 and e.mad_reasons for e in batch.episodes)
    assert batch.metrics["rollout/madness_rate"] == 1.0


def test_blocking_workflows_in_threads_overlap(tokenizer):
    """Six workflows that block their thread are all blocked at once: each waits at a barrier for the other
    five (run one after another, or on one loop, the first would wait alone and fail)."""
    barrier = threading.Barrier(6)

    class Blocking(Workflow):
        async def execute(self, workflow_task, model_tuner):
            barrier.wait(timeout=20)  # blocks its own loop only
            reply = await model_tuner([{"role": "user", "content": workflow_task.task.main_query}])
            return WorkflowOutput(reward=1.0, metadata={"text": text_of(reply)})

    engine = ScriptedEngine(tokenizer, answers)
    cfg = config(run_workflow_in_thread=True, max_env_worker=6, episode_timeout_s=60.0)
    batch = asyncio.run(RolloutManager(cfg, Blocking, None, engine, tokenizer).run(tasks(2)))
    assert not [e.error for e in batch.episodes if e.failed] and len(engine.outputs) == 6


def test_validation_uses_val_kwargs(tokenizer):
    engine = ScriptedEngine(tokenizer, answers)
    cfg = config()
    cfg.rollout.val_kwargs.num_repeat = 2
    manager = RolloutManager(cfg, AskOnce, build_judge(MathAnswerAsJudge, cfg), engine, tokenizer)
    batch = asyncio.run(manager.run(tasks(1), mode="val"))
    assert len(batch.episodes) == 2 and all(s.temperature == 0.0 for s in engine.samplings)


class BlocksThenAsks(Workflow):
    """A workflow that blocks its thread (a synchronous tool, a sleep) around its model call."""

    async def execute(self, workflow_task, model_tuner):
        time.sleep(0.3)
        await model_tuner([{"role": "user", "content": workflow_task.task.main_query}])
        time.sleep(0.3)
        return WorkflowOutput(reward=1.0)


def test_64_blocking_workflows_in_threads_complete_with_the_hf_engine(tiny_model_dir, tokenizer):
    """run_workflow_in_thread at 64 workers: the workflows' threads and the hf engine's generation do not
    share asyncio's default executor (6 workers on 2 cores: 6 blocked workflows would starve the engine and
    every episode would time out)."""
    from astuner.model.engines.hf import HFEngine

    engine = HFEngine.from_pretrained(str(tiny_model_dir), tokenizer, max_num_seqs=64)
    # starved, every episode would wait until its timeout: 120 s leaves a loaded machine time for the real work
    cfg = config(run_workflow_in_thread=True, max_env_worker=64, episode_timeout_s=120.0,
                 max_response_length_in_one_turn=4)
    cfg.rollout.num_repeat = 4
    batch = asyncio.run(RolloutManager(cfg, BlocksThenAsks, None, engine, tokenizer).run(tasks(16)))
    assert len(batch.episodes) == 64 and not [e.error for e in batch.episodes if e.failed]
    assert all(len(e.recorder.calls) == 1 for e in batch.episodes)


def test_a_timed_out_thread_adds_nothing_to_its_episode(tokenizer):
    """The workflow's thread is held until its episode has timed out, then makes its call: refused, nothing
    recorded, nothing generated."""
    release, tried, outcome = threading.Event(), threading.Event(), []

    class CallsAfterItsTimeout(Workflow):
        async def execute(self, workflow_task, model_tuner):
            release.wait(60)  # past the episode's timeout, in its thread
            try:
                await model_tuner([{"role": "user", "content": "still there?"}])
                outcome.append("answered")
            except Exception as exc:  # noqa: BLE001 - the refusal, whatever its type
                outcome.append(type(exc).__name__)
            finally:
                tried.set()
            return WorkflowOutput(reward=1.0)

    engine = ScriptedEngine(tokenizer, lambda p: "late")
    cfg = config(run_workflow_in_thread=True, episode_timeout_s=0.2, episode_retries=0)  # one run of it
    cfg.rollout.num_repeat = 1

    async def rollout_then_late_call():
        batch = await RolloutManager(cfg, CallsAfterItsTimeout, None, engine, tokenizer).run(
            tasks(1), check_error_rate=False)
        release.set()  # the thread wakes up and tries its call, while the rollout's loop still runs
        assert await asyncio.to_thread(tried.wait, 60)
        return batch

    (episode,) = asyncio.run(rollout_then_late_call()).episodes
    assert episode.failed and "ran over 0.2s" in episode.error
    assert outcome == ["EpisodeClosed"] and episode.recorder.calls == [] and engine.outputs == []
