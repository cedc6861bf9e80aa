"""GRPO advantages against hand-computed values."""

from __future__ import annotations

import math

import pytest

from astuner.algorithm.advantages import assign_advantages, normalise, zero_variance_groups
from astuner.schema import Sample


def sample(task, episode, reward):
    return Sample(task_id=task, episode_uuid=episode, repeat_index=0, input_ids=[1, 2], prompt_length=1,
                  loss_mask=[1], logprobs=[0.0], reward=reward)


def test_grpo_normalises_within_each_group():
    samples = [sample("a", "e1", 1.0), sample("a", "e2", 0.0), sample("a", "e3", 0.0), sample("a", "e4", 1.0),
               sample("b", "f1", 2.0), sample("b", "f2", 4.0)]
    assign_advantages(samples, "grpo", norm_by_std=True, eps=0.0)
    # group a: mean 0.5, sample std sqrt(1/3) -> +-0.866; group b: mean 3, std sqrt(2) -> -+0.707 (verl's torch.std)
    a, b = 0.5 / math.sqrt(1 / 3), 1 / math.sqrt(2)
    assert [s.advantage for s in samples] == pytest.approx([a, -a, -a, a, -b, b])
    assign_advantages(samples, "grpo", norm_by_std=False)
    assert [s.advantage for s in samples] == pytest.approx([0.5, -0.5, -0.5, 0.5, -1, 1])


def test_multi_step_grpo_shares_episode_advantage_across_its_samples():
    # episode e1 produced two samples (branches); it must count once in the group statistics
    samples = [sample("a", "e1", 1.0), sample("a", "e1", 1.0), sample("a", "e2", 0.0), sample("a", "e3", 0.0)]
    assign_advantages(samples, "multi_step_grpo", norm_by_std=True, eps=0.0)
    mean, std = 1 / 3, math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)
    expected_e1 = (1 - mean) / std
    expected_other = (0 - mean) / std
    assert [s.advantage for s in samples] == pytest.approx([expected_e1, expected_e1, expected_other, expected_other])
    # plain grpo would have counted e1 twice
    assign_advantages(samples, "grpo", norm_by_std=True, eps=0.0)
    assert samples[0].advantage == pytest.approx(0.5 / math.sqrt(1 / 3))


def test_a_group_of_one_has_mean_0_and_std_1_as_in_verl():
    assert normalise([0.7], True, eps=0.0) == [0.7] and normalise([0.7], False) == [0.7]


def test_equal_rewards_give_zero_and_are_detected():
    assert normalise([0.3, 0.3, 0.3], True) == [0.0, 0.0, 0.0]
    samples = [sample("a", "e1", 1.0), sample("a", "e2", 1.0), sample("b", "f1", 0.0), sample("b", "f2", 1.0)]
    assert zero_variance_groups(samples) == {("a",)}


def test_unknown_estimator():
    with pytest.raises(ValueError, match="unknown advantage estimator 'gae'"):
        assign_advantages([], "gae")


def test_per_agent_groups_normalise_each_agents_rewards_apart():
    """adv_group agent (Dr. MAS): two agents of one policy in each episode, one scored in tens, one in units;
    per task each agent is normalised against itself, not against the other's scale."""
    def agent_sample(episode, agent, reward):
        s = sample("t", episode, reward)
        s.agent = agent
        return s

    samples = [agent_sample("e1", "big", 10.0), agent_sample("e1", "small", 1.0),
               agent_sample("e2", "big", 20.0), agent_sample("e2", "small", 0.0)]
    assign_advantages(samples, "grpo", norm_by_std=False, by="agent")
    assert [s.advantage for s in samples] == [-5.0, 0.5, 5.0, -0.5]
    assign_advantages(samples, "grpo", norm_by_std=False)  # one group: the big agent sets everyone's baseline
    assert [s.advantage for s in samples] == [2.25, -6.75, 12.25, -7.75]
    same = samples[:1] + [agent_sample("e2", "big", 10.0)] + samples[1::2]
    assert zero_variance_groups(same, by="agent") == {("t", "big")}
