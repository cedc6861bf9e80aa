"""Truncation is counted only when a reply was cut short: by its length limit before its end-of-turn token, or by
the context running out for that agent, never for an agent whose own replies ended."""

from __future__ import annotations

import asyncio

from astuner import Task, Workflow, WorkflowOutput
from astuner.config.schema import AstunerConfig
from astuner.model.engines.base import GenerateResult
from astuner.rollout.manager import RolloutManager
from tests.helpers import char_level_ids


def config(**rollout):
    cfg = AstunerConfig()
    cfg.rollout.num_repeat = 1
    cfg.rollout.max_response_length_in_one_turn = 8
    for key, value in rollout.items():
        setattr(cfg.rollout, key, value)
    return cfg


class AtTheLimit:
    """Replies with `text` and, when `end`, the end-of-turn token as the last token max_tokens allows; the finish
    reason is "length" either way (as vLLM reports a reply that reaches max_tokens, its end-of-turn token
    included)."""

    def __init__(self, tokenizer, text: str, end: bool):
        self.ids = char_level_ids(tokenizer, text) + ([tokenizer.convert_tokens_to_ids("<|im_end|>")] if end else [])

    async def generate(self, prompt_ids, sampling):
        ids = self.ids[:sampling.max_tokens]
        return GenerateResult(ids, [-0.1] * len(ids), "length")

    async def update_weights(self, state_dict):
        return None


class OneCall(Workflow):
    async def execute(self, workflow_task, model_tuner):
        reply = await model_tuner([{"role": "user", "content": "hi"}])
        return WorkflowOutput(reward=1.0, metadata={"reply": "".join(b.get("text", "") for b in reply.content)})


def test_a_reply_that_ends_its_turn_at_the_limit_is_not_truncated(tokenizer):
    for end, cut in ((True, False), (False, True)):
        engine = AtTheLimit(tokenizer, "abcdefg", end)  # 7 characters (+ end-of-turn): exactly 8 tokens with it
        manager = RolloutManager(config(), OneCall, None, engine, tokenizer)
        batch = asyncio.run(manager.run([Task(task_id="t", main_query="hi")]))
        episode = batch.episodes[0]
        call = episode.recorder.calls[0]
        assert call.finish_reason == ("length" if cut else "stop")
        assert episode.output.metadata["reply"] == "abcdefg"  # the end-of-turn token is not part of the text
        assert episode.recorder.truncated is cut and [s.truncated for s in episode.samples] == [cut]
        assert batch.metrics["rollout/truncated_rate"] == float(cut)


class TwoAgents(Workflow):
    """The talker's second prompt leaves no room for its reply (refused: its context ran out); the listener's
    reply ends as it should."""

    async def execute(self, workflow_task, model_tuner):
        talker, listener = model_tuner.register_model("talker"), model_tuner.register_model("listener")
        await talker([{"role": "user", "content": "say a word"}])
        await listener([{"role": "user", "content": "listen"}])
        await talker([{"role": "user", "content": "say a word " + "and another " * 60}])
        return WorkflowOutput(reward=1.0)


class Ends:
    def __init__(self, tokenizer):
        self.ids = char_level_ids(tokenizer, "ok") + [tokenizer.convert_tokens_to_ids("<|im_end|>")]

    async def generate(self, prompt_ids, sampling):
        return GenerateResult(list(self.ids), [-0.1] * len(self.ids), "stop")

    async def update_weights(self, state_dict):
        return None


def test_one_agent_running_out_of_context_does_not_truncate_another_agents_samples(tokenizer):
    manager = RolloutManager(config(max_model_len=200), TwoAgents, None, Ends(tokenizer), tokenizer)
    episode = asyncio.run(manager.run([Task(task_id="t", main_query="go")])).episodes[0]
    assert not episode.failed, episode.error
    assert episode.recorder.truncated and episode.recorder.refused_agents == {"talker"}  # the episode was cut
    truncated = {s.agent: s.truncated for s in episode.samples}
    assert truncated == {"talker": True, "listener": False}
