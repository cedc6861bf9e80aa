"""`astuner chat CHECKPOINT`: a quick look at a trained model in the terminal — a checkpoint's model (whole weights,
or a LoRA adapter over the base it names), its chat template, transformers' `generate`. One prompt with
`--prompt`, else a conversation read line by line from stdin (an empty line or end of input stops it; a line
`tool: TEXT` is a tool's result). `--tools` renders the tools an agent offered, as training did. For serving,
merge and serve with vLLM (docs/using-the-trained-model.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from astuner.cli_args import OneLineParser
from astuner.errors import DataError


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="astuner chat", description="Chat with a trained checkpoint.")
    parser.add_argument("checkpoint", metavar="CHECKPOINT",
                        help="global_step_N (its model/), a model folder, or a LoRA adapter folder")
    parser.add_argument("--prompt", help="answer this one message and exit (default: read messages from stdin)")
    parser.add_argument("--system", help="a system prompt")
    parser.add_argument("--tools", metavar="FILE.json",
                        help="the tools the agent offered, as a JSON list of OpenAI function schemas (AgentScope's "
                             "Toolkit.get_json_schemas()); rendered by the chat template as in training. In a "
                             "conversation, a line starting 'tool:' is the tool's result (the rest of the line)")
    parser.add_argument("--max-new-tokens", type=int, default=256, metavar="N",
                        help="the most tokens one reply may have (default 256)")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 (default): greedy")
    return parser


def model_folder(checkpoint: Path) -> Path:
    """The folder holding the weights: `checkpoint` itself, or its `model/` (a run's global_step_N)."""
    if (checkpoint / "model").is_dir():
        return checkpoint / "model"
    if not checkpoint.is_dir():
        raise DataError(f"{checkpoint} is not a folder; name a checkpoint, e.g. launcher_record/<experiment>/"
                        f"checkpoints/global_step_N")
    if not any((checkpoint / name).is_file() for name in ("config.json", "adapter_config.json")):
        policies = checkpoint / "policies"
        hint = (f"; a run with several policies keeps each in {policies}/<name>" if policies.is_dir() else "")
        raise DataError(f"{checkpoint} holds no model (no config.json or adapter_config.json){hint}")
    return checkpoint


def load(checkpoint: Path) -> tuple[Any, Any]:
    """(model, tokenizer) on the GPU when there is one, in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from astuner.backbone.debug import lora

    folder = model_folder(Path(checkpoint))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
        if lora.is_adapter_folder(folder):  # the adapter over the base model its config names
            base = lora.adapter_config(folder).get("base_model_name_or_path")
            model = lora.load_adapter(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), folder, False)
        else:
            model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    except DataError:
        raise
    except Exception as exc:  # noqa: BLE001 - transformers', peft's and safetensors' errors on a bad folder
        first = (str(exc).strip().splitlines() or [""])[0][:150]
        raise DataError(f"cannot load a model from {folder} ({type(exc).__name__}: {first})") from None
    if tokenizer.chat_template is None:
        raise DataError(f"{folder}'s tokenizer has no chat template; astuner chat renders messages with it")
    return model.to(device).eval(), tokenizer


def load_tools(path: Path) -> list[dict[str, Any]]:
    """The `--tools` file: a JSON list of function schemas, each `{"type": "function", "function": {"name": ...}}`
    (or the bare `{"name": ...}`); DataError naming the file and what is wrong."""
    import json

    if not path.is_file():
        raise DataError(f"--tools {path}: no such file")
    try:
        tools = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise DataError(f"--tools {path}: cannot read it as JSON ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0][:120]})") from None
    if isinstance(tools, dict):
        tools = [tools]
    for i, tool in enumerate(tools if isinstance(tools, list) else [None]):
        schema = tool.get("function", tool) if isinstance(tool, dict) else None
        if not isinstance(schema, dict) or not isinstance(schema.get("name"), str):
            raise DataError(f"--tools {path}: entry {i} is no function schema; give a list of "
                            f'{{"type": "function", "function": {{"name": ..., "parameters": ...}}}}, as AgentScope\'s '
                            f"Toolkit.get_json_schemas() returns")
    return tools


def reply(model: Any, tokenizer: Any, messages: list[dict[str, str]], max_new_tokens: int,
          temperature: float, tools: Optional[list[dict[str, Any]]] = None) -> str:
    import torch

    try:
        ids = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, return_tensors="pt",
                                            return_dict=True)
    except Exception as exc:  # noqa: BLE001 - jinja's errors, raised by the template itself (e.g. roles' order)
        first = (str(exc).strip().splitlines() or [""])[0][:150]
        raise DataError(f"the model's chat template cannot render this conversation ({type(exc).__name__}: "
                        f"{first})") from None
    ids = {k: v.to(model.device) for k, v in ids.items()}
    sampling = {"do_sample": True, "temperature": temperature} if temperature > 0 else {"do_sample": False}
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id
                             if tokenizer.pad_token_id is not None else tokenizer.eos_token_id, **sampling)
    new = out[0, ids["input_ids"].shape[1]:].tolist()
    # the turn's end (and padding) dropped; other special tokens kept: a tool call's <tool_call> markers are part of
    # the reply, and the next turn's prompt must hold them as training's did
    stops = {tokenizer.eos_token_id, tokenizer.pad_token_id, *_as_list(model.generation_config.eos_token_id)}
    while new and new[-1] in stops:
        new.pop()
    return tokenizer.decode(new, skip_special_tokens=False)


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def main(argv: Sequence[str], stdin: Optional[Any] = None) -> int:
    """`astuner chat ...`; the exit code (a user error: one line, 2)."""
    try:
        args = build_parser().parse_args(list(argv))
    except SystemExit as exc:
        return int(exc.code or 0)
    if args.max_new_tokens < 1 or args.temperature < 0:
        print("astuner: error: --max-new-tokens must be at least 1 and --temperature at least 0", file=sys.stderr)
        return 2
    from astuner.records.progress import quiet_libraries

    quiet_libraries()
    from astuner.model.openmp import prefer_passive_waits

    prefer_passive_waits()  # before torch is imported: its OpenMP runtime reads the wait policy then
    try:
        tools = load_tools(Path(args.tools)) if args.tools else None
        model, tokenizer = load(Path(args.checkpoint))
        if tools and "tools" not in (tokenizer.chat_template or ""):
            print("astuner: note: the model's chat template does not render tools: --tools changes nothing",
                  file=sys.stderr)
        return _converse(args, model, tokenizer, tools, stdin)
    except DataError as exc:
        print(f"astuner: error: {exc}", file=sys.stderr)
        return exc.exit_code


def _converse(args: argparse.Namespace, model: Any, tokenizer: Any, tools: Optional[list[dict[str, Any]]],
              stdin: Optional[Any]) -> int:
    messages = [{"role": "system", "content": args.system}] if args.system else []
    if args.prompt is not None:
        messages.append({"role": "user", "content": args.prompt})
        print(reply(model, tokenizer, messages, args.max_new_tokens, args.temperature, tools))
        return 0
    stdin = stdin or sys.stdin
    interactive = stdin.isatty()
    if interactive:
        print("astuner: type a message, Enter sends it; a line starting 'tool:' answers the model's tool call "
              "with the rest of the line; an empty line or Ctrl-D ends", file=sys.stderr, flush=True)
    while True:
        if interactive:
            print("you> ", end="", flush=True)
        line = stdin.readline()
        if not line or not line.strip():
            return 0
        text = line.rstrip("\n")
        role, text = ("tool", text[5:].strip()) if text.startswith("tool:") else ("user", text)
        messages.append({"role": role, "content": text})
        answer = reply(model, tokenizer, messages, args.max_new_tokens, args.temperature, tools)
        messages.append({"role": "assistant", "content": answer})
        print(f"model> {answer}" if interactive else answer, flush=True)
