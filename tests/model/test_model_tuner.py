"""ModelTuner inside a real AgentScope ReActAgent: exact token capture, masks, formatters, tools,
multi-agent targets, context limit."""

from __future__ import annotations

import asyncio
import json

import pytest
from agentscope.agent import ReActAgent
from agentscope.formatter import DashScopeChatFormatter, OpenAIChatFormatter
from agentscope.memory import InMemoryMemory
from agentscope.message import Msg
from agentscope.model import ChatModelBase, ChatResponse
from agentscope.message import TextBlock
from agentscope.tool import Toolkit, ToolResponse

from astuner import ModelTuner
from astuner.rollout.tracker import build_samples
from astuner.model.engines.base import SamplingParams
from tests.helpers import ScriptedEngine, char_level_ids

TOOL_CALL = ('Let me compute.\n<tool_call>\n{"name": "add", "arguments": {"a": 12, "b": 3}}\n</tool_call>')


async def add(a: int, b: int) -> ToolResponse:
    """Add two integers.

    Args:
        a (`int`): the first number.
        b (`int`): the second number.
    """
    return ToolResponse(content=[TextBlock(type="text", text=str(a + b))])


def make_agent(model, formatter, max_iters=4):
    toolkit = Toolkit()
    toolkit.register_tool_function(add)
    agent = ReActAgent(name="math", sys_prompt="You are a math agent.", model=model, formatter=formatter,
                       toolkit=toolkit, memory=InMemoryMemory(), max_iters=max_iters)
    agent.set_console_output_enabled(False)
    return agent


def run_episode(tokenizer, formatter, replies, max_model_len=8192):
    engine = ScriptedEngine(tokenizer, replies)
    tuner = ModelTuner(engine, tokenizer, SamplingParams(1.0, 1.0, 256), max_model_len)
    agent = make_agent(tuner, formatter)
    result = asyncio.run(agent.reply(Msg("user", "What is 12+3? Then add 4.", role="user")))
    return engine, tuner, result


@pytest.mark.parametrize("formatter", [DashScopeChatFormatter(), OpenAIChatFormatter()],
                         ids=["dashscope", "openai"])
def test_three_turn_react_episode_merges_into_one_exact_sample(tokenizer, formatter):
    replies = [TOOL_CALL,
               'Now add 4.\n<tool_call>\n{"name": "add", "arguments": {"a": 15, "b": 4}}\n</tool_call>',
               "The answer is \\boxed{19}."]
    engine, tuner, result = run_episode(tokenizer, formatter, replies)
    assert result.get_text_content() == "The answer is \\boxed{19}."
    calls = tuner.recorder.calls
    assert len(calls) == 3 and all(not c.tool_call_errors for c in calls)
    # the tool's result reached the model
    assert "<tool_response>\n15\n</tool_response>" in calls[1].prompt_text
    samples = build_samples(calls, task_id="t", episode_uuid="e", repeat_index=0, max_samples=4,
                            max_prompt_length=10_000, max_response_length=10_000)
    assert len(samples) == 1
    sample = samples[0]
    # zero re-tokenization: the trained spans are the engine's ids, token for token
    assert sample.trained_spans() == engine.outputs
    assert engine.outputs[0] != tokenizer.encode(replies[0], add_special_tokens=False)  # non-canonical ids
    assert sample.prompt_ids == engine.prompts[0]
    assert sample.input_ids[: len(engine.prompts[2])] == engine.prompts[2]
    # mask 1 exactly on generated tokens, with their log-probs; the tool results are mask 0
    for span_start, out in zip(_span_starts(sample.loss_mask), engine.outputs):
        assert sample.logprobs[span_start: span_start + len(out)] == pytest.approx([-0.01 * (k + 1) for k in range(len(out))])
    given = [t for t, m in zip(sample.response_ids, sample.loss_mask) if m == 0]
    assert "<tool_response>" in tokenizer.decode(given)
    assert all(lp == 0.0 for lp, m in zip(sample.logprobs, sample.loss_mask) if m == 0)


@pytest.mark.parametrize("first", [
    'Let me compute.\n\n<tool_call>\n{"name": "add", "arguments": {"a": 12, "b": 3}}\n</tool_call>',  # blank line
    'Let me compute.\n<tool_call>\n{"name":"add","arguments":{"b":3,"a":12}}\n</tool_call>',  # compact JSON
    '<think>12 plus 3, then 4</think>Let me compute.\n' + TOOL_CALL.split("\n", 1)[1],  # a <think> block
], ids=["blank-line", "compact-json", "think"])
def test_a_reply_the_template_renders_differently_still_merges(tokenizer, first):
    """The chat template re-renders the history: the blank line, the JSON layout or the <think> block of
    the model's reply come back changed. The next prompt still continues the call: the model is fed its own
    tokens, and the episode is one sample whose trained tokens are the engine's."""
    replies = [first, "The answer is \\boxed{15}."]
    engine, tuner, result = run_episode(tokenizer, OpenAIChatFormatter(), replies)
    calls = tuner.recorder.calls
    assert len(calls) == 2 and not calls[0].tool_call_errors
    assert calls[0].response_text not in calls[1].prompt_text  # the template did re-render the reply
    assert engine.prompts[1][: len(engine.prompts[0]) + len(engine.outputs[0])] == engine.prompts[0] + engine.outputs[0]
    samples = build_samples(calls, task_id="t", episode_uuid="e", repeat_index=0, max_samples=4,
                            max_prompt_length=10_000, max_response_length=10_000)
    assert len(samples) == 1 and samples[0].trained_spans() == engine.outputs
    given = tokenizer.decode([t for t, m in zip(samples[0].response_ids, samples[0].loss_mask) if m == 0])
    assert "<tool_response>\n15\n</tool_response>" in given


def _span_starts(mask):
    return [i for i, m in enumerate(mask) if m and (i == 0 or not mask[i - 1])]


def test_tool_calls_become_tool_use_blocks(tokenizer):
    engine = ScriptedEngine(tokenizer, ["<think>small sum</think>" + TOOL_CALL])
    tuner = ModelTuner(engine, tokenizer, SamplingParams(), 4096)
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    response = asyncio.run(tuner([{"role": "user", "content": "hi"}], tools=tools))
    kinds = [b["type"] for b in response.content]
    assert kinds == ["thinking", "text", "tool_use"]
    assert response.content[0]["thinking"] == "small sum"
    assert response.content[2]["name"] == "add" and response.content[2]["input"] == {"a": 12, "b": 3}
    assert "add" in tuner.recorder.calls[0].prompt_text  # tools rendered by the chat template


@pytest.mark.parametrize("reply,error", [
    ('<tool_call>\n{"name": "add", "arguments": {"a": 1,}\n</tool_call>', "does not parse"),
    ('<tool_call>\n{"name": "mul", "arguments": {}}\n</tool_call>', "was not offered"),
    ('<tool_call>\n{"arguments": {}}\n</tool_call>', "string 'name'"),
    ('<tool_call>\n{"name": "add", "arguments": {"a": 1}}', "not closed"),
])
def test_malformed_tool_call_keeps_text_and_flags(tokenizer, reply, error):
    engine = ScriptedEngine(tokenizer, [reply])
    tuner = ModelTuner(engine, tokenizer, SamplingParams(), 4096)
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    response = asyncio.run(tuner([{"role": "user", "content": "hi"}], tools=tools))
    assert [b["type"] for b in response.content] == ["text"]
    assert "<tool_call>" in response.content[0]["text"]
    assert error in tuner.recorder.calls[0].tool_call_errors[0]


def test_context_limit_refuses_the_call_and_marks_truncated(tokenizer):
    engine = ScriptedEngine(tokenizer, ["never used"])
    tuner = ModelTuner(engine, tokenizer, SamplingParams(max_tokens=200), max_model_len=210)
    response = asyncio.run(tuner([{"role": "user", "content": "a long question " * 5}]))
    assert engine.outputs == []
    assert tuner.recorder.truncated and tuner.recorder.calls == []
    assert "context limit" in response.content[0]["text"]


def test_history_rewrite_breaks_prefix_into_branches(tokenizer):
    """When the next prompt does not continue the previous reply verbatim, calls become separate samples."""
    engine = ScriptedEngine(tokenizer, ["first answer", "second answer"])
    tuner = ModelTuner(engine, tokenizer, SamplingParams(), 4096)
    asyncio.run(tuner([{"role": "user", "content": "q1"}]))
    rewritten = [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "first (edited)"},
                 {"role": "user", "content": "q2"}]
    asyncio.run(tuner(rewritten))
    samples = build_samples(tuner.recorder.calls, task_id="t", episode_uuid="e", repeat_index=0, max_samples=4,
                            max_prompt_length=10_000, max_response_length=10_000)
    assert len(samples) == 2
    assert [s.trained_spans() for s in samples] == [[engine.outputs[0]], [engine.outputs[1]]]


class EchoModel(ChatModelBase):
    def __init__(self):
        super().__init__("echo", stream=False)
        self.calls = 0

    async def __call__(self, messages, tools=None, tool_choice=None, **kwargs):
        self.calls += 1
        return ChatResponse(content=[TextBlock(type="text", text="echo")])


def test_register_model_routes_only_trainable_targets(tokenizer):
    engine = ScriptedEngine(tokenizer, ["from the policy"])
    tuner = ModelTuner(engine, tokenizer, SamplingParams(), 4096, trainable_targets=["solver"])
    other = EchoModel()
    solver = tuner.register_model("solver", default_model=other)
    critic = tuner.register_model("critic", default_model=other)
    assert isinstance(solver, ModelTuner) and critic is other
    asyncio.run(solver([{"role": "user", "content": "x"}]))
    asyncio.run(critic([{"role": "user", "content": "x"}]))
    assert [c.target for c in tuner.recorder.calls] == ["solver"]
    assert other.calls == 1
    with pytest.raises(ValueError, match="pass default_model"):
        tuner.register_model("judge")


def test_rejects_non_text_content(tokenizer):
    tuner = ModelTuner(ScriptedEngine(tokenizer, ["x"]), tokenizer, SamplingParams(), 4096)
    image = {"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "http://x"}}]}
    with pytest.raises(ValueError, match="content block of type 'image'"):
        asyncio.run(tuner([image]))


def test_openai_style_string_arguments_render_as_objects(tokenizer):
    engine = ScriptedEngine(tokenizer, ["ok"])
    tuner = ModelTuner(engine, tokenizer, SamplingParams(), 4096)
    msgs = [{"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "add", "arguments": json.dumps({"a": 1})}}]},
            {"role": "tool", "tool_call_id": "c", "name": "add", "content": "1"}]
    asyncio.run(tuner(msgs))
    assert '{"name": "add", "arguments": {"a": 1}}' in tuner.recorder.calls[0].prompt_text


def test_non_ascii_round_trips(tokenizer):
    text = "答案是 \\boxed{7} 🎉"
    engine = ScriptedEngine(tokenizer, [text])
    tuner = ModelTuner(engine, tokenizer, SamplingParams(), 4096)
    response = asyncio.run(tuner([{"role": "user", "content": "你好"}]))
    assert response.content[0]["text"] == text
    assert engine.outputs[0][:-1] == char_level_ids(tokenizer, text)


def test_the_configured_tool_call_format_is_parsed_with_the_tool_schema(tokenizer):
    reply = ("<tool_call>\n<function=add>\n<parameter=a>\n12\n</parameter>\n<parameter=note>\n007\n</parameter>\n"
             "</function>\n</tool_call>")
    tools = [{"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "note": {"type": "string"}}}}}]
    tuner = ModelTuner(ScriptedEngine(tokenizer, [reply]), tokenizer, SamplingParams(), 4096,
                       reply_format=("qwen3_coder", "auto"))
    response = asyncio.run(tuner([{"role": "user", "content": "hi"}], tools=tools))
    assert [b["type"] for b in response.content] == ["tool_use"]
    assert response.content[0]["input"] == {"a": 12, "note": "007"}  # typed by the schema: "007" stays text
    hermes = ModelTuner(ScriptedEngine(tokenizer, [reply]), tokenizer, SamplingParams(), 4096)
    response = asyncio.run(hermes([{"role": "user", "content": "hi"}], tools=tools))
    assert [b["type"] for b in response.content] == ["text"]  # not hermes: the text stays, flagged
    assert hermes.recorder.calls[0].tool_call_errors


def test_tool_call_parser_auto_follows_the_chat_template(tokenizer):
    from astuner.model.chat.tool_parser import resolve_format

    assert resolve_format("auto", tokenizer) == "hermes"  # the tiny model's ChatML + <tool_call> template
    assert resolve_format("openai", tokenizer) == "gpt_oss"


def test_a_tiny_model_path_is_made_where_it_says_never_found_in_a_parent(tmp_path, monkeypatch):
    """`model.path: tiny_model` with `model.tiny`: the folder is ./tiny_model (created there), even when a parent
    of the config's folder holds a folder of that name."""
    from astuner.config.schema import TinyModelConfig
    from astuner.model.model_path import resolve_local_model

    (tmp_path / "tiny_model").mkdir()  # something else's folder, in a parent
    work = tmp_path / "project" / "sample"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    found = resolve_local_model("tiny_model", TinyModelConfig(hidden_size=32, layers=1, heads=2), "astuner.model.path",
                                [tmp_path / "project", tmp_path])
    assert found == str(work / "tiny_model") and (work / "tiny_model" / "config.json").is_file()


def test_the_seed_systems_model_tuner_methods(tokenizer):
    """get_model gives what register_model gave in this episode (trained or the agent's own model), is_trainable
    says which; config is made when first read and passed to the models register_model makes; get_llm_proxy and
    get_context_tracker say what astuner offers instead."""
    from agentscope.model import OpenAIChatModel

    tuner = ModelTuner(ScriptedEngine(tokenizer, ["x"]), tokenizer, SamplingParams(), 4096,
                       trainable_targets=["werewolf"])
    with pytest.raises(AttributeError, match="not made by a run"):
        tuner.config
    made = []
    tuner.config = lambda: made.append(1) or {"frozen_lake": {"size": 4}}
    own = OpenAIChatModel(model_name="other", api_key="x", client_args={"base_url": "http://127.0.0.1:9/v1"})
    wolf, seer = tuner.register_model("werewolf"), tuner.register_model("seer", default_model=own)
    assert tuner.get_model("werewolf") is wolf and tuner.get_model("seer") is own and isinstance(wolf, ModelTuner)
    assert (tuner.is_trainable("werewolf"), tuner.is_trainable("seer")) == (True, False)
    with pytest.raises(ValueError, match="agent 'witch' is not registered in this episode"):
        tuner.get_model("witch")
    assert wolf.config == tuner.config == {"frozen_lake": {"size": 4}} and made == [1, 1]  # once per model read
    assert wolf.config is wolf.config and made == [1, 1]  # and kept
    with pytest.raises(AttributeError, match=r"as_openai_base_url\(\)"):
        tuner.get_llm_proxy()
    with pytest.raises(AttributeError, match="finish_reason 'length'"):
        tuner.get_context_tracker()
