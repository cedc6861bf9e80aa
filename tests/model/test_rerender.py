"""The re-render check on episodes recorded the way serving records them (the real ModelTuner, its continuation
reusing earlier replies' ids): a template that drops `<think>`, re-serialised tool-call JSON, a clean episode; and
a log without ids whose text the tokenizer cannot give back; a prompt differing in its last token only."""

from __future__ import annotations

import asyncio

from astuner.model.chat.rerender import cause_of, check_episode, summary
from astuner.model.engines.base import GenerateResult, SamplingParams
from astuner.model.model_tuner import ModelTuner
from astuner.schema.calls import CallRecord

TOOLS = [{"type": "function", "function": {"name": "read_sensor", "description": "Read the sensor.",
                                           "parameters": {"type": "object", "properties": {}}}}]


class CanonicalEngine:
    """Replies with scripted texts, tokenized as the tokenizer would (+ the end of turn): only the re-rendering
    under test can make a difference."""

    def __init__(self, tokenizer, replies):
        self.tokenizer, self.replies = tokenizer, list(replies)

    async def generate(self, prompt_ids, sampling):
        ids = self.tokenizer.encode(self.replies.pop(0), add_special_tokens=False)
        ids.append(self.tokenizer.convert_tokens_to_ids("<|im_end|>"))
        return GenerateResult(ids, [-0.1] * len(ids), "stop")

    async def update_weights(self, state_dict):
        return None


def recorded(tokenizer, replies, turns):
    """The calls of an episode whose agent passes back each reply as AgentScope does (parsed: text without the
    thinking, tool calls as structured calls), `turns(reply)` giving the next messages."""
    tuner = ModelTuner(CanonicalEngine(tokenizer, replies), tokenizer, SamplingParams(1.0, 1.0, 64), 2048)
    messages = [{"role": "system", "content": "Answer."}, {"role": "user", "content": "What is 2+2?"}]

    async def play():
        nonlocal messages
        for _ in range(len(replies)):
            call = tuner.prepare(messages, TOOLS)
            done = await tuner.complete(call)
            tuner.recorder.add(done.record)
            messages = messages + turns(done)

    asyncio.run(play())
    return tuner.recorder.calls


def as_text(done):
    return [{"role": "assistant", "content": done.parsed.text}, {"role": "user", "content": "Sure?"}]


def as_tool_call(done):
    calls = [{"id": "c1", "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
             for c in done.parsed.tool_calls]
    return [{"role": "assistant", "content": done.parsed.text, "tool_calls": calls},
            {"role": "tool", "tool_call_id": "c1", "content": "497"}]


def test_a_clean_episode_passes(tokenizer):
    calls = recorded(tokenizer, ["It is 4.", "Yes, 4."], as_text)
    check = check_episode(tokenizer, "clean", calls)
    assert check.passed and check.causes == []


def test_a_template_that_drops_think_is_caught(tokenizer):
    calls = recorded(tokenizer, ["<think>two and two</think>It is 4.", "Yes."], as_text)
    # the second prompt holds the first reply as the model wrote it (<think> included); the template, given the
    # reply's text, renders it without: the tokens trained from a re-render would not be the ones the model saw
    assert "<think>" in tokenizer.decode(calls[1].prompt_ids)
    check = check_episode(tokenizer, "think", calls)
    # the first reply rebuilt from its message (text, thinking apart) loses the block too: a trainer re-rendering
    # the conversation would train the reply without it
    assert not check.passed and check.causes == ["reply_think", "think"] and check.first_failed_call == 0


def test_reserialised_tool_json_is_caught(tokenizer):
    reply = '<tool_call>\n{"arguments": {}, "name": "read_sensor"}\n</tool_call>'  # the model's key order
    calls = recorded(tokenizer, [reply, "It reads 497."], as_tool_call)
    check = check_episode(tokenizer, "tool", calls)
    assert not check.passed and check.causes == ["reply_tool_json", "tool_json"]  # the reply rebuilt, then history
    both = recorded(tokenizer, ["<think>read it</think>" + reply, "497."], as_tool_call)
    assert check_episode(tokenizer, "both", both).causes == ["reply_think+tool_json", "think+tool_json"]
    report = summary([check_episode(tokenizer, "clean", recorded(tokenizer, ["4.", "4."], as_text)), check,
                      check_episode(tokenizer, "both", both)])
    assert report == {"episodes": 3, "passed": 1, "causes": {"reply_tool_json": 1, "tool_json": 1,
                                                             "reply_think+tool_json": 1, "think+tool_json": 1},
                      "failed": ["tool", "both"]}


def test_a_reply_generated_in_other_tokens_than_the_tokenizers_is_caught(tokenizer):
    """The model may sample a reply's text in other tokens than the tokenizer would give it (here char by char);
    the prompt of every call still re-renders to its ids (continuation reuses the reply's own ids), so only the
    reply check sees that a trainer re-tokenizing the reply would train on other tokens. The last call's reply has
    no later call to show it: it is checked too."""
    from astuner.model.chat.rerender import check_call, check_reply
    from tests.helpers import ScriptedEngine

    tuner = ModelTuner(ScriptedEngine(tokenizer, ["It is 4.", "Sure: 4."]), tokenizer, SamplingParams(1.0, 1.0, 64),
                       2048)
    messages = [{"role": "system", "content": "Answer."}, {"role": "user", "content": "What is 2+2?"}]

    async def play():
        for turn in range(2):
            done = await tuner.complete(tuner.prepare(messages if turn == 0 else later, TOOLS))
            tuner.recorder.add(done.record)

    later = messages + [{"role": "assistant", "content": "It is 4."}, {"role": "user", "content": "Sure?"}]
    asyncio.run(play())
    first, last = tuner.recorder.calls
    assert first.response_ids[:-1] != tokenizer.encode("It is 4.", add_special_tokens=False)  # char by char
    # an episode of one call: its prompt re-renders to its ids; only its reply shows it (it used to pass)
    assert check_call(tokenizer, first) is None and check_reply(tokenizer, first) == "reply_tokenization"
    assert check_episode(tokenizer, "one", [first]).causes == ["reply_tokenization"]
    # the later call's prompt holds the first reply's ids (tokenization), and its own reply is checked too
    assert check_call(tokenizer, last) == "tokenization" and check_reply(tokenizer, last) == "reply_tokenization"
    assert check_episode(tokenizer, "two", [first, last]).causes == ["reply_tokenization", "tokenization"]
    clean = recorded(tokenizer, ["It is 4.", "Yes, 4."], as_text)  # the tokenizer's own ids: every reply passes
    assert [check_reply(tokenizer, call) for call in clean] == [None, None]


def test_causes_named_by_what_undoes_them():
    assert cause_of("a b", "a b") == "tokenization"
    assert cause_of("a  b\n", "a b") == "whitespace"
    assert cause_of("x", "y") == "other"


def test_a_log_without_ids_must_round_trip_the_tokenizer(tiny_model_dir):
    """A tokenizer that normalises its input (NFKC, as SentencePiece models do) cannot give back a ligature."""
    from tokenizers import normalizers
    from transformers import AutoTokenizer

    normalising = AutoTokenizer.from_pretrained(tiny_model_dir)
    normalising.backend_tokenizer.normalizer = normalizers.NFKC()
    plain = CallRecord("a", [{"role": "user", "content": "the file is here"}], None, "", [], [], [], "stop", "")
    ligature = CallRecord("a", [{"role": "user", "content": "the \ufb01le is here"}], None, "", [], [], [], "stop", "")
    assert check_episode(normalising, "plain", [plain]).passed
    assert check_episode(normalising, "ligature", [ligature]).causes == ["round_trip"]


def test_every_prompt_token_is_compared_the_last_one_too(tokenizer):
    """A call whose recorded prompt differs from the re-rendered one in its last token only (the one the reply is
    generated after) is a mismatch: training on it would not train what the model saw."""
    from dataclasses import replace

    from astuner.model.chat.rerender import check_call

    call = recorded(tokenizer, ["It is 4."], as_text)[0]
    assert check_call(tokenizer, call) is None
    ids = list(call.prompt_ids)
    other = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert ids[-1] != other
    drifted = replace(call, prompt_ids=ids[:-1] + [other])
    assert check_call(tokenizer, drifted) is not None
    assert not check_episode(tokenizer, "last", [drifted], replies=False).passed
