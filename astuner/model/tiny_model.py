"""Tiny Qwen2-architecture models with a locally trained tokenizer, for tests, demos and CPU runs.

Nothing is downloaded: the byte-level BPE tokenizer is trained in-process (digits are single tokens),
the chat template is ChatML with Hermes-style tool calls, and the model has random weights fixed by a
seed. The folder it writes loads with `AutoTokenizer` / `AutoModelForCausalLM` like any hub model.

    python -m astuner.model.tiny_model OUT_DIR [--seed 0] [--hidden-size 64] [--layers 2] [--tokenizer bpe|words]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Iterable, Optional

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
EXTRA_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]

# ChatML with tools: the tool list goes into the system turn inside <tools></tools>; an assistant's tool
# calls are rendered as <tool_call>{"name": ..., "arguments": {...}}</tool_call>; tool results are
# wrapped in <tool_response></tool_response> inside a user turn.
CHAT_TEMPLATE = (
    "{%- set sys = messages[0]['content'] if messages and messages[0]['role'] == 'system' else '' -%}"
    "{%- if tools -%}"
    "{{- '<|im_start|>system\\n' + sys + ('\\n\\n' if sys else '') + '# Tools\\n\\nYou may call one or more "
    "functions. Function signatures are inside <tools></tools>:\\n<tools>' -}}"
    "{%- for tool in tools -%}{{- '\\n' + (tool | tojson) -}}{%- endfor -%}"
    "{{- '\\n</tools>\\n\\nTo call a function, reply with a JSON object of its name and arguments inside "
    "<tool_call></tool_call>:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\\n"
    "</tool_call><|im_end|>\\n' -}}"
    "{%- elif sys -%}{{- '<|im_start|>system\\n' + sys + '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'system' and loop.first -%}"
    "{%- elif m['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' + (m['content'] or '') -}}"
    "{%- for call in (m['tool_calls'] or []) -%}"
    "{%- set f = call['function'] if call['function'] is defined else call -%}"
    "{%- if m['content'] or not loop.first -%}{{- '\\n' -}}{%- endif -%}"
    "{{- '<tool_call>\\n{\"name\": \"' + f['name'] + '\", \"arguments\": ' -}}"
    "{{- f['arguments'] if f['arguments'] is string else (f['arguments'] | tojson) -}}"
    "{{- '}\\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- elif m['role'] == 'tool' -%}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}"
    "{{- '\\n<tool_response>\\n' + m['content'] + '\\n</tool_response>' -}}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- else -%}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

DEFAULT_CORPUS = [
    "The answer is", "Let me think step by step.", "I will call a tool to compute it.", "the result is",
    "Natalia sold clips to her friends in April and May. How many clips did she sell altogether?",
    "What is the sum of the numbers? Answer with a single number.", "Reply with one number.",
    "higher lower correct guess number between and", "print(", "def solve(): return", "import math",
    '{"name": "execute_python_code", "arguments": {"code": "print(1 + 2)"}}',
    "You are a helpful assistant. Solve the problem and put the final answer in \\boxed{}.",
    "system user assistant tool function arguments code output error", "0 1 2 3 4 5 6 7 8 9 + - * / = ( ) [ ] { }",
]


def build_tokenizer(corpus: Optional[Iterable[str]] = None, vocab_size: int = 512):
    """A byte-level BPE tokenizer trained on `corpus`, with ChatML special tokens and chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS + EXTRA_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    texts = list(corpus) if corpus is not None else DEFAULT_CORPUS
    tok.train_from_iterator(texts * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, unk_token=None)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_word_tokenizer(corpus: Optional[Iterable[str]] = None):
    """A word-level tokenizer: one token per word, per punctuation run and per digit, plus the ChatML
    special tokens; anything else is [UNK]. A small vocabulary gives a random model a fair chance of
    saying the right word, which makes RL from scratch workable on a CPU."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    pre = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True)])
    texts = list(corpus) if corpus is not None else DEFAULT_CORPUS
    words = sorted({piece for text in texts for piece, _ in pre.pre_tokenize_str(text)} | set("0123456789"))
    specials = SPECIAL_TOKENS + EXTRA_TOKENS
    vocab = {token: i for i, token in enumerate(specials + ["[UNK]"] + [w for w in words if w not in specials])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre
    tok.add_special_tokens(specials)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   unk_token="[UNK]", bos_token=None)
    fast.chat_template = CHAT_TEMPLATE
    return fast


TINY_POSITIONS = 4096  # a tiny model's max_position_embeddings


def tiny_kv_heads(heads: int) -> int:
    """The KV heads of a tiny model built from `model.tiny` (grouped-query attention, two query heads each)."""
    return max(1, heads // 2)


def build_tiny_model(out_dir: Path | str, seed: int = 0, hidden_size: int = 64, layers: int = 2,
                     heads: int = 4, kv_heads: int = 2, corpus: Optional[Iterable[str]] = None, vocab_size: int = 512,
                     max_position_embeddings: int = TINY_POSITIONS, tokenizer: str = "bpe") -> Path:
    """Write a random-weight Qwen2 causal LM and its tokenizer to `out_dir` (deterministic from `seed`).
    `tokenizer`: "bpe" (byte-level BPE trained on `corpus`) or "words" (`build_word_tokenizer`)."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if tokenizer not in ("bpe", "words"):
        raise ValueError(f"tokenizer must be 'bpe' or 'words', got {tokenizer!r}")
    tok = build_tokenizer(corpus, vocab_size) if tokenizer == "bpe" else build_word_tokenizer(corpus)
    tokenizer_kind, tokenizer = tokenizer, tok
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=hidden_size * 2,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        max_position_embeddings=max_position_embeddings, tie_word_embeddings=True,
        bos_token_id=None, eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "astuner_tiny_model.json").write_text(json.dumps({"seed": seed, "hidden_size": hidden_size,
                                                             "layers": layers, "tokenizer": tokenizer_kind,
                                                             "vocab_size": len(tokenizer)}))
    return out


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description="Write a tiny random Qwen2 model and tokenizer to a folder.")
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--tokenizer", choices=["bpe", "words"], default="bpe")
    parser.add_argument("--corpus", help="a text file whose lines train the tokenizer")
    args = parser.parse_args(argv)
    corpus = Path(args.corpus).read_text(encoding="utf-8").splitlines() if args.corpus else None
    print(build_tiny_model(args.out_dir, seed=args.seed, hidden_size=args.hidden_size, layers=args.layers,
                           corpus=corpus, tokenizer=args.tokenizer))


if __name__ == "__main__":  # pragma: no cover
    main()
