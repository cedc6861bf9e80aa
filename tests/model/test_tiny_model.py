"""The tiny local model: loads with Auto* classes, deterministic, digits are single tokens, template has tools."""

from __future__ import annotations

import torch

from astuner.model.tiny_model import build_tiny_model, build_tokenizer


def test_loads_with_auto_classes_and_matches_the_built_tokenizer(tiny_model_dir, tokenizer):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert model.config.model_type == "qwen2"
    text = "Natalia sold 48 clips, 你好 🎉 <tool_call>"
    assert tokenizer.encode(text, add_special_tokens=False) == build_tokenizer().encode(text, add_special_tokens=False)
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def test_digits_are_single_tokens(tokenizer):
    ids = tokenizer.encode("12345", add_special_tokens=False)
    assert [tokenizer.decode([i]) for i in ids] == ["1", "2", "3", "4", "5"]


def test_same_seed_same_weights(tmp_path):
    from transformers import AutoModelForCausalLM

    a = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path / "a", seed=5))
    b = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path / "b", seed=5))
    c = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path / "c", seed=6))
    pa, pb, pc = (next(m.parameters()) for m in (a, b, c))
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)


def test_chat_template_renders_tools_and_tool_turns(tokenizer):
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    messages = [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"type": "function", "function": {"name": "add", "arguments": {"a": 1}}}]},
                {"role": "tool", "content": "1"}]
    text = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
    assert '<tools>\n{"type": "function", "function": {"name": "add"' in text
    assert '<|im_start|>assistant\n<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call><|im_end|>' in text
    assert "<|im_start|>user\n<tool_response>\n1\n</tool_response><|im_end|>\n<|im_start|>assistant\n" in text
