"""Experience operators and selection metrics."""

from __future__ import annotations

from astuner.config.schema import OperatorConfig
from astuner.data.operators import apply_operators, selection_metrics
from astuner.schema import Sample


def s(task, episode, reward):
    return Sample(task_id=task, episode_uuid=episode, repeat_index=0, input_ids=[1, 2], prompt_length=1,
                  loss_mask=[1], logprobs=[0.0], reward=reward)


SAMPLES = [s("a", "a1", 1.0), s("a", "a2", 0.0), s("b", "b1", 1.0), s("b", "b2", 1.0), s("b", "b2", 1.0),
           s("c", "c1", 0.0), s("c", "c2", 0.0)]


def test_pass_rate_calculator_feeds_the_selector_per_task():
    seen = {}
    kept, _ = apply_operators([OperatorConfig("pass_rate_calculator")], list(SAMPLES), seen.update)
    assert seen == {"a": 0.5, "b": 1.0, "c": 0.0} and kept == SAMPLES  # b2's two samples count once


def test_reward_std_filter_drops_flat_groups():
    kept, metrics = apply_operators([OperatorConfig("reward_std_filter")], list(SAMPLES), lambda _: None)
    assert {x.task_id for x in kept} == {"a"} and metrics["data/reward_std_filter_dropped"] == 5


def test_reward_filter_keeps_rewards_at_or_above_threshold():
    kept, _ = apply_operators([OperatorConfig("reward_filter", {"threshold": 0.5})], list(SAMPLES), lambda _: None)
    assert all(x.reward >= 0.5 for x in kept) and len(kept) == 4


def test_selection_metrics():
    m = selection_metrics(SAMPLES)
    assert m["selection/valid_ratio"] == 1 / 3 and m["selection/strict_valid_ratio"] == 1 / 3
    assert m["selection/pass_rate_mean"] == 0.5
