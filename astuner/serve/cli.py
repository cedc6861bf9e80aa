"""`astuner serve MODEL --store FILE`: serve a model folder or a run's checkpoint (a LoRA adapter merged over its
base) at an OpenAI-compatible `/v1` on 127.0.0.1 by default, with a key, recording every call into the trace store
FILE until Ctrl-C (or SIGTERM), or until the store cannot be written (a full disk: one line, exit 2). Exit codes as
the other commands': 0, 2 a user error or an unwritable store (one line), 1 internal."""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import threading
from pathlib import Path
from typing import Sequence

from astuner.cli_args import OneLineParser, run_command

KEY_ENV = "ASTUNER_SERVE_KEY"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="astuner serve",
                           description="Serve a model as an OpenAI-compatible endpoint, recording every call.")
    parser.add_argument("model", metavar="MODEL", help="a model folder or a checkpoint (global_step_N, LoRA included)")
    parser.add_argument("--store", required=True, metavar="FILE",
                        help="the trace store (SQLite), created when absent, appended to otherwise")
    parser.add_argument("--host", default="127.0.0.1", metavar="ADDRESS",
                        help="address to listen on (default 127.0.0.1; any other exposes the model: a warning says so)")
    parser.add_argument("--port", type=int, default=8000, metavar="N", help="port (default 8000; 0: any free port)")
    parser.add_argument("--api-key-env", metavar="VAR",
                        help=f"the environment variable holding the key clients must send (default {KEY_ENV} when "
                             f"set, else a new key, printed)")
    parser.add_argument("--engine", choices=["auto", "hf", "vllm"], default="auto",
                        help="auto (default): vllm on a GPU where installed, else hf")
    parser.add_argument("--max-model-len", type=int, metavar="N",
                        help="the context, prompt and reply (default: the model's max_position_embeddings)")
    parser.add_argument("--max-tokens", type=int, default=1024, metavar="N",
                        help="the most tokens one reply may have (a request's max_tokens is capped here)")
    parser.add_argument("--name", metavar="NAME", help="the model's name in /v1/models (default: the folder's)")
    parser.add_argument("--max-request-bytes", type=int, default=0, metavar="N",
                        help="the largest request body read (default 0: 64 bytes per token of the context, at least "
                             "1 MiB); a larger one is refused (413) before it is read")
    return parser


def main(argv: Sequence[str]) -> int:
    return run_command(build_parser(), _serve, argv)


def _key(args: argparse.Namespace) -> tuple[str, bool]:
    """(the key, whether it was made here)."""
    from astuner.errors import ConfigError

    if args.api_key_env:
        value = os.environ.get(args.api_key_env)
        if not value:
            raise ConfigError(f"--api-key-env {args.api_key_env}: the variable is not set here; export the key "
                              f"clients will send in it")
        return value, False
    if os.environ.get(KEY_ENV):
        return os.environ[KEY_ENV], False
    return "astuner-" + secrets.token_urlsafe(24), True


def _serve(args: argparse.Namespace) -> int:
    from astuner.errors import DataError

    if args.max_tokens < 1:
        raise DataError(f"--max-tokens must be at least 1, got {args.max_tokens}")
    if args.max_model_len is not None and args.max_model_len <= args.max_tokens:
        raise DataError(f"--max-model-len {args.max_model_len} leaves no room for a prompt beside replies of "
                        f"--max-tokens {args.max_tokens} (default 1024): raise it, or lower --max-tokens")
    from astuner.viewer.server import check_port

    check_port(args.port, "--port")
    key, made = _key(args)
    from astuner.evaluate.candidates import parse

    candidate = parse(args.model)
    from astuner.records.progress import quiet_libraries

    quiet_libraries()
    from astuner.model.openmp import prefer_passive_waits

    prefer_passive_waits()
    from loguru import logger

    from astuner.records.run_dir import setup_logging
    from astuner.records.trace_store import TraceStore

    if args.max_request_bytes < 0:
        raise DataError(f"--max-request-bytes must be 0 (sized from the context) or more, got {args.max_request_bytes}")
    if args.name is not None and not args.name.strip():
        raise DataError("--name is empty: name the model (or leave --name out for the folder's name)")
    name = args.name or candidate.label
    new_store = not Path(args.store).exists()
    store = TraceStore.open_for_writing(Path(args.store), name)
    setup_logging(Path(args.store + ".log"))  # the console, and a log beside the store
    gateway = None
    served = False
    try:
        new_tuner, max_model_len = _tuners(args, candidate, name)
        from astuner.serve.server import ServeGateway

        gateway = ServeGateway(new_tuner, store, key, name, args.host, args.port).start()
        if args.host not in ("127.0.0.1", "localhost", "::1"):
            logger.warning(f"astuner serve listens on {args.host}: anyone who can reach it and holds the key uses "
                           f"the model")
        print(f"astuner: serving {name} at {gateway.base_url} (context {max_model_len} tokens, replies up to "
              f"{args.max_tokens}); every call recorded into {args.store}", file=sys.stderr)
        print(f"astuner: key: {key}" if made else f"astuner: key: the value of "
              f"{args.api_key_env or KEY_ENV}", file=sys.stderr)
        print(f"astuner: name an episode with the header X-Session-Id; rewards: POST /v1/feedback; Ctrl-C stops; "
              f"log: {args.store}.log", file=sys.stderr, flush=True)
        served = True
        _wait(gateway.failed)
    finally:
        if gateway is not None:
            gateway.stop()
        store.close()
        if new_store and not served:  # a start that failed (the model, the port) leaves no empty store behind
            for suffix in ("", "-wal", "-shm"):
                Path(args.store + suffix).unlink(missing_ok=True)
    if gateway.failure is not None:
        raise DataError(f"{gateway.failure}; astuner serve stopped (the calls answered before are in the store)")
    return 0


def _tuners(args: argparse.Namespace, candidate: object, name: str) -> tuple[object, int]:
    """`new_tuner(recorder)` over the model's engine, and the context length."""
    import json

    from astuner.config.schema import AstunerConfig
    from astuner.evaluate.runner import load_local
    from astuner.model.chat.tool_parser import resolve_format, resolve_reasoning
    from astuner.model.engines.base import SamplingParams
    from astuner.model.model_tuner import ModelTuner
    from astuner.serve.server import serving_settings

    folder = getattr(candidate, "folder", None)
    if folder is None:
        from astuner.errors import DataError

        raise DataError("astuner serve serves a model folder or a checkpoint, not an endpoint")
    cfg = AstunerConfig()
    cfg.rollout.engine = args.engine
    config = folder / "config.json"
    found = json.loads(config.read_text()).get("max_position_embeddings") if config.is_file() else None
    if args.max_model_len and found and args.max_model_len > int(found):
        from astuner.errors import DataError

        raise DataError(f"--max-model-len {args.max_model_len} is beyond the model's {found} positions "
                        f"(max_position_embeddings): at most {found}")
    max_model_len = args.max_model_len or int(found or 4096)
    cfg.rollout.max_model_len = max_model_len
    # (a LoRA adapter on vLLM is merged into a folder beside the store first)
    engine, tokenizer = load_local(cfg, candidate, Path(args.store + ".models"))
    reply_format = (resolve_format("auto", tokenizer), resolve_reasoning("auto"))
    settings = serving_settings(args.max_request_bytes)
    sampling = SamplingParams(1.0, 1.0, args.max_tokens)

    def new_tuner(recorder: object) -> ModelTuner:
        return ModelTuner(engine, tokenizer, sampling, max_model_len, recorder, model_name=name,
                          reply_format=reply_format, gateway_settings=settings)

    return new_tuner, max_model_len


def _wait(failed: "threading.Event") -> None:
    """Until Ctrl-C, SIGTERM or `failed`."""
    import signal

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread
        pass
    try:
        failed.wait()
    except KeyboardInterrupt:
        pass
