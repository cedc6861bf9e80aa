"""Tool-call formats, table-driven: per format one call, several calls, calls mixed with text, malformed calls
(text kept, error reported), tools not offered; the format picked from a chat template; thinking."""

from __future__ import annotations

import pytest

from astuner.model.chat.tool_parser import FORMATS, detect_format, parse_reply

TOOLS = {"get_weather", "add"}
SCHEMAS = {"get_weather": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}},
           "add": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"},
                                                    "exact": {"type": "boolean"}, "tags": {"type": "array"}}}}
W = ("get_weather", {"city": "Paris"})
A = ("add", {"a": 2, "b": 3})

# (format, reply, expected calls [(name, args)], expected text: what is outside the calls, whitespace included,
# as generated; number of errors)
CASES = [
    # hermes
    ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', [W], "", 0),
    ("hermes", 'Let me check.\n<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>\n'
               '<tool_call>{"name": "add", "arguments": "{\\"a\\": 2, \\"b\\": 3}"}</tool_call> done', [W, A],
     "Let me check.\n\n done", 0),
    ("hermes", '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"</tool_call>', [],
     '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"</tool_call>', 1),
    ("hermes", '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}', [],
     '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}', 1),
    ("hermes", '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>', [],
     '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>', 1),
    ("hermes", "no call here", [], "no call here", 0),
    # qwen3_coder
    ("qwen3_coder", "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
                    "</tool_call>", [W], "", 0),
    ("qwen3_coder", "Sure.\n<tool_call>\n<function=add>\n<parameter=a>\n2\n</parameter>\n<parameter=b>\n3\n"
                    "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\n"
                    "Paris\n</parameter>\n</function>\n</tool_call>", [A, W], "Sure.\n\n", 0),
    ("qwen3_coder", "<tool_call>\n<function=add>\n<parameter=a>\n2.5\n</parameter>\n<parameter=b>\n-1\n</parameter>\n"
                    "<parameter=exact>\ntrue\n</parameter>\n<parameter=tags>\n[\"x\"]\n</parameter>\n</function>\n</tool_call>",
     [("add", {"a": 2.5, "b": -1, "exact": True, "tags": ["x"]})], "", 0),
    ("qwen3_coder", "<tool_call>\n<function=get_weather>\n<parameter=city>\n12345\n</parameter>\n</function>",
     [("get_weather", {"city": "12345"})], "", 0),  # a string parameter stays text; </tool_call> cut at the end
    ("qwen3_coder", "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n", [],
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n", 1),
    ("qwen3_coder", "<tool_call>\n<parameter=city>\nParis\n</parameter>\n</tool_call>", [],
     "<tool_call>\n<parameter=city>\nParis\n</parameter>\n</tool_call>", 1),
    # llama3_json
    ("llama3_json", '{"name": "get_weather", "parameters": {"city": "Paris"}}', [W], "", 0),
    ("llama3_json", '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}; '
                    '{"name": "add", "parameters": {"a": 2, "b": 3}}', [W, A], "", 0),
    ("llama3_json", "It is sunny in Paris.", [], "It is sunny in Paris.", 0),
    ("llama3_json", '{"name": "get_weather", "parameters": {"city": ', [],
     '{"name": "get_weather", "parameters": {"city": ', 1),
    ("llama3_json", '{"city": "Paris"}', [], '{"city": "Paris"}', 1),
    # mistral
    ("mistral", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, '
                '{"name": "add", "arguments": {"a": 2, "b": 3}}]', [W, A], "", 0),
    ("mistral", 'Checking.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]add[CALL_ID]c1[ARGS]'
                '{"a": 2, "b": 3}', [W, A], "Checking.", 0),
    ("mistral", '[TOOL_CALLS]get_weather[ARGS]{"city": "Par', [],
     '[TOOL_CALLS]get_weather[ARGS]{"city": "Par', 1),
    ("mistral", "Just text.", [], "Just text.", 0),
    # gpt_oss (harmony)
    ("gpt_oss", '<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary '
                'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}', [W], "", 0),
    ("gpt_oss", '<|channel|>analysis<|message|>Two calls.<|end|><|start|>assistant to=functions.add<|channel|>'
                'commentary json<|message|>{"a": 2, "b": 3}<|call|><|start|>assistant<|channel|>commentary '
                'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>', [A, W], "", 0),
    ("gpt_oss", "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>5",
     [], "5", 0),
    ("gpt_oss", '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": ', [],
     '{"city": ', 1),
]


@pytest.mark.parametrize("fmt,reply,calls,text,errors", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_formats(fmt, reply, calls, text, errors):
    parsed = parse_reply(reply, TOOLS, fmt=fmt, schemas=SCHEMAS)
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == calls
    assert parsed.text == text
    assert len(parsed.errors) == errors
    for call in parsed.tool_calls:
        assert call.raw and call.raw in reply


def test_every_format_has_cases():
    assert {c[0] for c in CASES} == set(FORMATS)


def test_gpt_oss_analysis_is_thinking():
    parsed = parse_reply("<|channel|>analysis<|message|>think hard<|end|><|start|>assistant<|channel|>final"
                         "<|message|>42", TOOLS, fmt="gpt_oss")
    assert parsed.thinking == "think hard" and parsed.text == "42"


@pytest.mark.parametrize("reasoning,thinking,text", [
    ("auto", "plan", "answer"), ("think", "plan", "answer"), ("none", None, "<think>plan</think>answer")])
def test_reasoning_parser(reasoning, thinking, text):
    parsed = parse_reply("<think>plan</think>answer", TOOLS, reasoning=reasoning)
    assert parsed.thinking == thinking and parsed.text == text


@pytest.mark.parametrize("template,expected", [
    ("{% for m in messages %}<|im_start|>{{ m.role }}...<tool_call>\\n{{ tool_call | tojson }}</tool_call>", "hermes"),
    ("<tool_call>\\n<function={{ tool_call.name }}>\\n<parameter={{ k }}>", "qwen3_coder"),
    ("{{- '<|python_tag|>' }}{{ '<|eot_id|>' }}", "llama3_json"),
    ("{{ '[AVAILABLE_TOOLS]' }}{{ '[TOOL_CALLS]' }}", "mistral"),
    ("<|start|>assistant<|channel|>commentary to=functions.x <|constrain|>json<|message|>", "gpt_oss"),
    ("{{ messages }}", "hermes"), (None, "hermes"),
])
def test_detect_format_from_the_chat_template(template, expected):
    assert detect_format(template) == expected
