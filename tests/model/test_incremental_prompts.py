"""Only what is new since the previous call is rendered and tokenized, and the prompts stay exactly what a whole
render gives: the same text, and the same ids as tokenizing it whole (or, for a continued call, as the earlier
call's ids followed by the new text tokenized whole)."""

from __future__ import annotations

import asyncio

import pytest
from agentscope.formatter import DashScopeChatFormatter, OpenAIChatFormatter
from agentscope.message import Msg
from transformers import AutoTokenizer

from astuner import ModelTuner
from astuner.rollout.tracker import build_samples
from astuner.model.engines.base import SamplingParams
from astuner.model.chat import incremental_render
from astuner.model.chat.continuation import continued_call
from astuner.model.chat.prompt_tokens import PromptTokenizer, prompt_tokenizer, split_tokens
from tests.helpers import ScriptedEngine
from tests.model.test_model_tuner import make_agent

TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add two integers.", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}]


def add_call(a: int, b: int, text: str = "") -> str:
    return f'{text}<tool_call>\n{{"name": "add", "arguments": {{"a": {a}, "b": {b}}}}}\n</tool_call>'


REPLIES = ([add_call(1, 2, "Let me add.\n"), "<think>keep going</think>" + add_call(3, 4),
            add_call(5, 6) + "\n" + add_call(7, 8), add_call(9, 10, "日本 🎉 "), add_call(11, 12, "and\n\n")]
           + [add_call(n, n + 1) for n in range(13, 25, 2)] + ["The sum is \\boxed{300}."])


@pytest.fixture
def fresh_tokenizer(tiny_model_dir):
    """A tokenizer object of its own: the per-tokenizer caches and checks start empty."""
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def whole_prompts(tokenizer, calls):
    """What the calls' prompts are when every prompt is rendered whole and every new text tokenized whole."""
    texts, ids = [], []
    for i, call in enumerate(calls):
        text = tokenizer.apply_chat_template(call.messages, tools=call.tools, add_generation_prompt=True,
                                             tokenize=False)
        found = continued_call(text, calls[:i])
        if found is None:
            ids.append(tokenizer.encode(text, add_special_tokens=False))
        else:
            earlier, used = found
            ids.append(earlier.prompt_ids + earlier.response_ids
                       + tokenizer.encode(text[used:], add_special_tokens=False))
        texts.append(text)
    return texts, ids


async def direct_episode(tuner, replies):
    """Call the model directly, appending each reply's tool calls and their results, until it answers."""
    messages = [{"role": "system", "content": "Add the numbers."}, {"role": "user", "content": "1+2+...+24?"}]
    for _ in replies:
        response = await tuner(messages, tools=TOOLS)
        uses = [b for b in response.content if b["type"] == "tool_use"]
        if not uses:
            return
        text = "".join(b.get("text", "") for b in response.content if b["type"] == "text")
        messages.append({"role": "assistant", "content": text, "tool_calls": [
            {"id": u["id"], "type": "function", "function": {"name": u["name"], "arguments": u["input"]}}
            for u in uses]})
        messages += [{"role": "tool", "tool_call_id": u["id"], "name": "add",
                      "content": str(u["input"]["a"] + u["input"]["b"])} for u in uses]


def test_a_long_episode_renders_windows_and_its_ids_are_those_of_whole_renders(fresh_tokenizer):
    tok = fresh_tokenizer
    engine = ScriptedEngine(tok, list(REPLIES))  # char-level ids: any re-tokenizing of a reply would show
    tuner = ModelTuner(engine, tok, SamplingParams(), 8192)
    asyncio.run(direct_episode(tuner, REPLIES))
    calls = tuner.recorder.calls
    assert len(calls) == len(REPLIES)
    state = incremental_render._STATES[tok]
    assert not state.off
    assert sum(state.verified.values()) < len(calls) - 1  # past the verified ones, windows alone rendered prompts
    texts, ids = whole_prompts(tok, calls)
    assert [c.prompt_text for c in calls] == texts
    assert [c.prompt_ids for c in calls] == ids
    assert [c.prompt_ids for c in calls] == engine.prompts
    samples = build_samples(calls, task_id="t", episode_uuid="e", repeat_index=0, max_samples=4,
                            max_prompt_length=10_000, max_response_length=10_000)
    assert len(samples) == 1 and samples[0].trained_spans() == engine.outputs


@pytest.mark.parametrize("formatter", [DashScopeChatFormatter(), OpenAIChatFormatter()], ids=["dashscope", "openai"])
def test_react_agent_prompts_equal_whole_renders(fresh_tokenizer, formatter):
    tok = fresh_tokenizer
    engine = ScriptedEngine(tok, list(REPLIES))
    tuner = ModelTuner(engine, tok, SamplingParams(), 8192)
    agent = make_agent(tuner, formatter, max_iters=len(REPLIES))
    result = asyncio.run(agent.reply(Msg("user", "Add 1 to 24.", role="user")))
    assert result.get_text_content() == REPLIES[-1]
    calls = tuner.recorder.calls
    assert len(calls) == len(REPLIES) and not incremental_render._STATES[tok].off
    texts, ids = whole_prompts(tok, calls)
    assert [c.prompt_text for c in calls] == texts and [c.prompt_ids for c in calls] == ids


NUMBERED = ("{%- for m in messages -%}{{ '<|im_start|>' + m['role'] + ' ' + loop.index|string + '\\n' + "
            "(m['content'] or '') + '<|im_end|>\\n' }}{%- endfor -%}"
            "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}")
SYSTEM_FIRST = ("{%- if messages[0]['role'] != 'system' -%}{{ raise_exception('a system message comes first') }}"
                "{%- endif -%}" + NUMBERED.replace(" + ' ' + loop.index|string", ""))


@pytest.mark.parametrize("template", [NUMBERED, SYSTEM_FIRST], ids=["numbers-its-turns", "refuses-a-window"])
def test_a_template_that_renders_windows_differently_is_rendered_whole(fresh_tokenizer, template):
    tok = fresh_tokenizer
    tok.chat_template = template
    tuner = ModelTuner(ScriptedEngine(tok, list(REPLIES)), tok, SamplingParams(), 8192)
    asyncio.run(direct_episode(tuner, REPLIES))
    calls = tuner.recorder.calls
    assert len(calls) == len(REPLIES) and incremental_render._STATES[tok].off
    texts, ids = whole_prompts(tok, calls)
    assert [c.prompt_text for c in calls] == texts and [c.prompt_ids for c in calls] == ids


def test_a_changed_history_or_tool_list_is_rendered_whole(fresh_tokenizer):
    tok = fresh_tokenizer
    tuner = ModelTuner(ScriptedEngine(tok, [add_call(1, 2)] * 3 + ["done"]), tok, SamplingParams(), 8192)
    base = [{"role": "user", "content": "add"}]
    turn = [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}]},
        {"role": "tool", "tool_call_id": "a", "name": "add", "content": "3"}]
    asyncio.run(tuner(base, tools=TOOLS))
    asyncio.run(tuner([{"role": "user", "content": "add (edited)"}, *turn], tools=TOOLS))  # history changed
    asyncio.run(tuner(base + turn, tools=TOOLS[:0] or None))  # no tools this time
    asyncio.run(tuner(base + turn + [{"role": "user", "content": "and now?"}], tools=TOOLS))  # a user turn
    assert incremental_render._STATES[tok].verified == {}  # no window was tried
    calls = tuner.recorder.calls
    texts, ids = whole_prompts(tok, calls)
    assert [c.prompt_text for c in calls] == texts and [c.prompt_ids for c in calls] == ids


def test_chunked_ids_equal_whole_ids(fresh_tokenizer):
    tok = fresh_tokenizer
    assert {"<|im_start|>", "<|im_end|>", "<tool_response>"} <= set(split_tokens(tok))
    tokens = PromptTokenizer(tok)
    engine = ScriptedEngine(tok, list(REPLIES))
    tuner = ModelTuner(engine, tok, SamplingParams(), 8192)
    asyncio.run(direct_episode(tuner, REPLIES))
    texts = [c.prompt_text for c in tuner.recorder.calls]
    texts += [t[len(texts[0]) - 30:] for t in texts[1:]] + ["", "plain text", "<|im_end|>", "a<|im_end|>\n\n"]
    for _ in range(2):  # cold, then every chunk from the cache
        assert [tokens.encode(t) for t in texts] == [tok.encode(t, add_special_tokens=False) for t in texts]
    assert tokens.cut is not None and tokens.to_verify == 0 and tokens.chunks
    assert prompt_tokenizer(tok) is prompt_tokenizer(tok)


def test_chunks_that_encode_differently_switch_chunking_off(fresh_tokenizer):
    import re

    tokens = PromptTokenizer(fresh_tokenizer)
    tokens.cut = re.compile("e")  # cutting inside words changes the ids
    text = "The readings were seven and eleven.<|im_end|>"
    assert tokens.encode(text) == fresh_tokenizer.encode(text, add_special_tokens=False)
    assert tokens.cut is None


def _fast_tokenizer(pre_tokenizer, added):
    from tokenizers import AddedToken, Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizer
    backend.add_special_tokens([AddedToken(t, **kw) for t, kw in added])
    fast = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")
    fast.chat_template = " ".join(t for t, _ in added)
    return fast


def test_split_tokens_only_where_the_ids_cannot_change():
    from tokenizers import pre_tokenizers

    plain = [("<|a|>", {}), ("<|b|>", {"rstrip": True}), ("<x>", {}), ("<x>y", {}), ("<p|", {}), ("|q>", {})]
    fast = _fast_tokenizer(pre_tokenizers.Whitespace(), plain)
    assert split_tokens(fast) == ["<|a|>"]  # stripping and overlapping tokens are left out
    first = pre_tokenizers.Metaspace(prepend_scheme="first")  # a piece's position in the text matters
    assert split_tokens(_fast_tokenizer(first, [("<|a|>", {})])) == []
    always = pre_tokenizers.Metaspace(prepend_scheme="always")
    assert split_tokens(_fast_tokenizer(always, [("<|a|>", {})])) == ["<|a|>"]
