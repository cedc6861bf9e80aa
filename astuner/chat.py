"""`astuner chat CHECKPOINT`: a quick look at a trained model in the terminal — a checkpoint's model (whole weights,
or a LoRA adapter over the base it names), its chat template, transformers' `generate`. One prompt with
`--prompt`, else a conversation read line by line from stdin (an empty line or end of input stops it). For
serving, merge and serve with vLLM (docs/using-the-trained-model.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from astuner.errors import DataError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="astuner chat", description="Chat with a trained checkpoint.")
    parser.add_argument("checkpoint", metavar="CHECKPOINT",
                        help="global_step_N (its model/), a model folder, or a LoRA adapter folder")
    parser.add_argument("--prompt", help="answer this one message and exit (default: read messages from stdin)")
    parser.add_argument("--system", help="a system prompt")
    parser.add_argument("--max-new-tokens", type=int, default=256, metavar="N")
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


def reply(model: Any, tokenizer: Any, messages: list[dict[str, str]], max_new_tokens: int,
          temperature: float) -> str:
    import torch

    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    ids = {k: v.to(model.device) for k, v in ids.items()}
    sampling = {"do_sample": True, "temperature": temperature} if temperature > 0 else {"do_sample": False}
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id
                             if tokenizer.pad_token_id is not None else tokenizer.eos_token_id, **sampling)
    return tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)


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
    try:
        model, tokenizer = load(Path(args.checkpoint))
    except DataError as exc:
        print(f"astuner: error: {exc}", file=sys.stderr)
        return exc.exit_code
    messages = [{"role": "system", "content": args.system}] if args.system else []
    if args.prompt is not None:
        messages.append({"role": "user", "content": args.prompt})
        print(reply(model, tokenizer, messages, args.max_new_tokens, args.temperature))
        return 0
    stdin = stdin or sys.stdin
    interactive = stdin.isatty()
    while True:
        if interactive:
            print("you> ", end="", flush=True)
        line = stdin.readline()
        if not line or not line.strip():
            return 0
        messages.append({"role": "user", "content": line.rstrip("\n")})
        answer = reply(model, tokenizer, messages, args.max_new_tokens, args.temperature)
        messages.append({"role": "assistant", "content": answer})
        print(f"model> {answer}" if interactive else answer, flush=True)
