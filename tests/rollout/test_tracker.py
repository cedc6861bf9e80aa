"""Calls -> samples: prefix merge, branches, caps, clipping."""

from __future__ import annotations

from astuner.rollout.tracker import TrackerStats, build_samples
from astuner.schema.calls import CallRecord


def call(prompt, response, finish="stop"):
    return CallRecord(target="a", messages=[], tools=None, prompt_text="", prompt_ids=list(prompt),
                      response_ids=list(response), logprobs=[-float(t) / 100 for t in response], finish_reason=finish,
                      response_text="")


def samples_of(calls, **kw):
    args = dict(task_id="t", episode_uuid="e", repeat_index=0, max_samples=4, max_prompt_length=100,
                max_response_length=100)
    args.update(kw)
    stats = TrackerStats()
    return build_samples(calls, stats=stats, **args), stats


def test_prefix_merge_masks_and_logprobs():
    c1 = call([1, 2, 3], [10, 11])
    c2 = call([1, 2, 3, 10, 11, 4, 5], [12])
    c3 = call([1, 2, 3, 10, 11, 4, 5, 12, 6], [13, 14])
    (s,), stats = samples_of([c1, c2, c3])
    assert s.input_ids == [1, 2, 3, 10, 11, 4, 5, 12, 6, 13, 14]
    assert s.prompt_length == 3
    assert s.loss_mask == [1, 1, 0, 0, 1, 0, 1, 1]
    assert s.logprobs == [-0.10, -0.11, 0.0, 0.0, -0.12, 0.0, -0.13, -0.14]
    assert s.num_calls == 3 and (stats.calls, stats.merged_calls, stats.samples) == (3, 2, 1)


def test_broken_prefix_gives_one_sample_per_branch_and_later_calls_join_their_branch():
    c1 = call([1, 2], [10])
    c2 = call([1, 9], [20])  # history rewritten: does not continue c1
    c3 = call([1, 2, 10, 3], [11])  # continues c1's branch
    samples, stats = samples_of([c1, c2, c3])
    assert [s.input_ids for s in samples] == [[1, 2, 10, 3, 11], [1, 9, 20]]
    assert stats.merged_calls == 1


def test_cap_keeps_the_samples_with_most_trained_tokens():
    # six branches with 1, 3, 2, 3, 6, 4 trained tokens: the three with most, ties to the later, in call order
    lengths = [1, 3, 2, 3, 6, 4]
    calls = [call([100 + i], [1] * n) for i, n in enumerate(lengths)]
    kept, stats = samples_of(calls, max_samples=3)
    assert [s.input_ids[0] for s in kept] == [103, 104, 105] and stats.dropped_samples == 3


def test_response_clipped_and_overlong_prompt_dropped():
    (s,), stats = samples_of([call([1, 2], list(range(10, 20)))], max_response_length=4)
    assert s.response_ids == [10, 11, 12, 13] and s.truncated and stats.clipped_samples == 1
    samples, stats = samples_of([call(list(range(50)), [1])], max_prompt_length=10)
    assert samples == [] and stats.overlong_prompts == 1


def test_length_finish_marks_truncated():
    (s,), _ = samples_of([call([1], [2, 3], finish="length")])
    assert s.truncated


def test_each_agent_has_its_own_chains_and_only_trainable_targets_are_trained():
    """Two agents whose prompts happen to continue each other's still make samples of their own, each named; with
    trainable_targets the other agents' calls are recorded but not trained on; max_samples None keeps every one."""
    import dataclasses

    wolf1, wolf2, villager = (dataclasses.replace(call([1, 2], [3]), target="Player1"),
                              dataclasses.replace(call([1, 2, 3, 4], [5]), target="Player2"),
                              dataclasses.replace(call([9], [8]), target="Player3"))
    out, stats = samples_of([wolf1, wolf2, villager], max_samples=None)
    assert [s.agent for s in out] == ["Player1", "Player2", "Player3"] and stats.merged_calls == 0
    out, stats = samples_of([wolf1, wolf2, villager], trainable={"Player1", "Player2"})
    assert [s.agent for s in out] == ["Player1", "Player2"] and stats.untrained_calls == 1
    many = [dataclasses.replace(call([10 * i], [1]), target="w") for i in range(1, 7)]
    assert len(samples_of(many, max_samples=None)[0]) == 6 and samples_of(many, max_samples=4)[1].dropped_samples == 2


def test_a_cap_or_a_madness_rewrite_is_logged_and_counted(tiny_model_dir):
    """What changes what is trained is said in the log and counted in the step's metrics, never silent."""


    from loguru import logger

    from astuner.config.schema import AstunerConfig
    from astuner.model.engines.factory import load_tokenizer
    from astuner.rollout.manager import EpisodeResult, RolloutManager
    from astuner.rollout.tracker import TrackerStats
    from astuner.schema import Task

    cfg = AstunerConfig()
    manager = RolloutManager(cfg, object, None, engine=None, tokenizer=load_tokenizer(str(tiny_model_dir)))
    mad = EpisodeResult(task=Task("t"), repeat_index=0, episode_uuid="e", mad_reasons=["special token id 0"])
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING")
    try:
        manager._log_interventions([mad, EpisodeResult(task=Task("t"), repeat_index=1, episode_uuid="f")],
                                   TrackerStats(dropped_samples=3, overlong_prompts=1), "train")
    finally:
        logger.remove(sink)
    text = "".join(lines)
    assert "3 samples dropped beyond astuner.rollout.multi_turn.max_sample_per_task (4 per episode" in text
    assert "1 samples dropped: prompt longer than astuner.data.max_prompt_length" in text
    assert "1 of 2 episodes failed a madness check and got reward -1.0" in text and "special token id 0" in text
    metrics = manager._metrics([mad], TrackerStats(dropped_samples=3, overlong_prompts=1), 1.0)
    assert metrics["rollout/dropped_samples"] == 3 and metrics["rollout/overlong_prompts"] == 1

