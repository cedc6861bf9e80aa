"""`--backbone verl`: verl 0.9 (PPO trainer, vLLM rollouts, FSDP) on Ray runs our workflow as its agent loop.

The run folder gets the tasks (`verl_data/train.jsonl`, `test.jsonl`, one row per astuner task, with the
task itself in `extra_info`), the agent-loop registry file and the composed verl config
(`verl_config.yaml`: verl's own `ppo_trainer` defaults, our translation, then the user's top-level verl
keys); then verl's `run_ppo` trains. Needs `pip install 'astuner[verl]'` (its own environment: verl pins
transformers < 5.11).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Optional

import yaml
from loguru import logger

from astuner.backbone.verl.checks import check_batching, check_memory, gpu_memory
from astuner.backbone.verl.compose import compose_verl_config, verl_config_dir
from astuner.errors import ConfigError, RunFailed

CONFIG_FILE = "verl_config.yaml"


def prepare(ctx: Any, gpu_bytes: Optional[int] = None) -> Path:
    from omegaconf import OmegaConf

    a = ctx.config.astuner
    from astuner.backbone.runtime import write_rows
    from astuner.backbone.translate_common import user_verl_keys
    from astuner.backbone.verl.translate import agent_loop_registry, translate_to_verl, verl_task_row
    from astuner.model.model_path import resolve_model_path
    from astuner.task_reader import build_task_reader

    root = ctx.run_dir.root.absolute()
    reader = build_task_reader(a, ctx.config.extra_roots)
    train_tasks = reader.train_tasks()
    check_batching(ctx.config, len(train_tasks))
    from astuner.backbone.debug.warm_start import warm_start

    model_path = resolve_model_path(a, ctx.config.extra_roots)
    check_memory(ctx.config, model_path, gpu_bytes, user_verl_keys(ctx.config.merged))  # before the warm start
    model_path = warm_start(ctx, model_path) or model_path  # trainer_common.sft, if set: the same shapes
    n_train = write_rows((verl_task_row(t, i) for i, t in enumerate(train_tasks)), root / "verl_data" / "train.jsonl")
    n_val = write_rows((verl_task_row(t, i, "val") for i, t in enumerate(reader.val_tasks())),
                       root / "verl_data" / "test.jsonl")
    (root / "verl_agent_loops.yaml").write_text(yaml.safe_dump(agent_loop_registry(ctx.config, root), sort_keys=False))
    config = compose_verl_config(translate_to_verl(ctx.config, root, model_path=model_path, validation=n_val > 0))
    path = root / CONFIG_FILE
    path.write_text(OmegaConf.to_yaml(config), encoding="utf-8")
    logger.info(f"verl: {n_train} training / {n_val} validation tasks, model {model_path}, config {path}")
    return path


def check_available() -> None:
    verl_config_dir()


def run(ctx: Any) -> None:
    check_available()
    from astuner.backbone.machine import cpu_mode, gpus_per_node
    from astuner.backbone.ray_cluster import ensure_ray

    cpu = cpu_mode(ctx.config)
    path = prepare(ctx, None if cpu else gpu_memory())
    tc = ctx.config.astuner.trainer_common
    from astuner.model.auxiliary import served_locally

    # on the CPU: the logical GPUs of verl's workers, and one per auxiliary model's engine (auxiliary.py)
    cluster = ensure_ray(ctx.with_ray, logical_gpus=tc.nnodes * gpus_per_node(ctx.config)
                         + len(served_locally(ctx.config.astuner)) if cpu else None)
    from astuner.backbone.engine_errors import EngineLog

    from astuner.backbone import run_health

    root = ctx.run_dir.root.absolute()
    runner = HealthyRunner(ctx.config, root)
    try:
        with EngineLog() as engine_log:
            try:
                _run_verl(path, engine_log, runner)
            except Exception:
                reason = run_health.failure(root)  # the health actor stopped the run: its reason, not the kill's
                if reason is None:
                    raise
                raise RunFailed(reason) from None
        run_health.finish(root)
    finally:
        cluster.stop()


RUNNER_NAME = "astuner_verl_task_runner"


class HealthyRunner:
    """verl's task runner as `run_ppo` starts it (`task_runner_class.remote()`, once Ray is up), named, beside the
    run's health actor (`run_health`), which reports each episode's outcome and stops the runner by that name when
    a step's failures pass `rollout.max_error_rate`."""

    def __init__(self, run: Any, root: Path):
        self.run, self.root, self.runner_class, self.health, self.auxiliary = run, root, None, None, []
        self.options_given: dict[str, Any] = {}

    def options(self, **options: Any) -> "HealthyRunner":  # run_ppo's profiler path
        self.options_given = options
        return self

    def remote(self) -> Any:
        import ray

        from astuner.backbone import run_health

        namespace = ray.get_runtime_context().namespace
        n_val = len((self.root / "verl_data" / "test.jsonl").read_text(encoding="utf-8").splitlines())
        self.health = run_health.start("verl", self.run, self.root, n_val, [RUNNER_NAME], namespace,
                                       first_step=resumed_step(self.root / "checkpoints"))
        from astuner.backbone.verl import auxiliary

        self.auxiliary = auxiliary.start(self.run, namespace)  # before verl places its workers; held for the run
        return self.runner_class.options(name=RUNNER_NAME, namespace=namespace, **self.options_given).remote()


def resumed_step(checkpoints: Path) -> int:
    """The step verl resumes from (its `latest_checkpointed_iteration.txt`); 0 for a new run."""
    path = checkpoints / "latest_checkpointed_iteration.txt"
    try:
        return int(path.read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return 0


def _run_verl(path: Path, engine_log: Any, runner: HealthyRunner) -> None:
    """verl's own entry point on the composed config (its task runner started through `runner`); a vLLM engine
    that fails to start ends the run with its root cause (from vLLM's log), not verl's wrapper."""
    from omegaconf import OmegaConf
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    config = OmegaConf.load(path)
    connect_with_keys(config, runner.run)
    auto_set_device(config)
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    if config.trainer.use_v1:
        runner.runner_class = TaskRunnerV1
    else:
        from verl.trainer.main_ppo_v0 import TaskRunner

        runner.runner_class = TaskRunner
    try:
        run_ppo(config, task_runner_class=runner)
    except Exception as exc:
        reason = engine_log.explain(str(exc))
        if reason is None:
            raise
        raise RunFailed(reason) from None


def connect_with_keys(config: Any, run: Any) -> None:
    """With endpoints whose API keys come from this environment (`model.auxiliary.key_env`): connect to Ray as
    `run_ppo` would (verl's default runtime environment merged with the config's), the keys added to the workers'
    environment. verl's own connection prints its arguments and its task runner the config, so the keys go through
    neither; without keys `run_ppo` connects itself."""
    import ray
    from omegaconf import OmegaConf

    from astuner.model.auxiliary import key_env

    keys = key_env(run.astuner)
    if not keys or ray.is_initialized():
        return
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    init = OmegaConf.to_container(config.ray_kwargs.get("ray_init", {}), resolve=True)
    runtime_env = OmegaConf.to_container(OmegaConf.merge(get_ppo_ray_runtime_env(config), init.get("runtime_env", {})),
                                         resolve=True)
    runtime_env.setdefault("env_vars", {}).update(keys)
    ray.init(**{**init, "runtime_env": runtime_env})


def engines_of(run: Any, cpu: bool, gpus_per_node: int) -> tuple[str, int]:
    """verl's vLLM engines: every GPU of the run in groups of the tensor-parallel size, which must divide them."""
    from astuner.backbone.verl.translate import verl_engines

    from astuner.model.auxiliary import served_locally

    tc, ro = run.astuner.trainer_common, run.astuner.rollout
    auxiliary = served_locally(run.astuner)
    aside = "" if not auxiliary else f"; auxiliary models on vLLM engines of their own: {', '.join(auxiliary)}"
    if auxiliary and not cpu:  # each holds a GPU; verl's workers take the same count on every node
        gpus_per_node -= len(auxiliary)
        if gpus_per_node < 1:
            raise ConfigError(f"backbone verl: the {len(auxiliary)} auxiliary model(s) in astuner.auxiliary_models "
                              f"take a GPU each and leave verl none of the {gpus_per_node + len(auxiliary)} per node; "
                              f"use more GPUs, or serve them elsewhere (base_url and model)")
        aside += f" (a GPU each; verl gets {gpus_per_node} per node)"
    gpus, tp = tc.nnodes * gpus_per_node, ro.tensor_model_parallel_size
    if tp > gpus or gpus % tp:
        raise ConfigError(f"backbone verl: astuner.rollout.tensor_model_parallel_size ({tp}) must divide the "
                          f"{gpus} GPU(s) (astuner.trainer_common.nnodes × n_gpus_per_node): each vLLM engine "
                          f"takes that many")
    engines = verl_engines(run)
    if tc.nnodes > 1:  # verl places one worker group over every GPU it is given, node by node
        aside += (f"; on each of the {tc.nnodes} nodes: {gpus_per_node} FSDP worker(s) (actor, reference) and "
                  f"{max(1, gpus_per_node // tp)} vLLM engine(s)")
    return f"verl: {engines} vLLM engine(s) × tensor parallel {tp}{aside}", engines + len(auxiliary)


def check_with_verl(run: Any) -> None:
    """verl's own `validate_config` (its actor's and critic's dataclasses and their `validate`: batch and
    micro-batch sizes over the GPUs, sequence parallelism without padding removal, ...) on the composed config, as
    its entry point runs it once the run has started: here before the run folder exists, and at --dry-run. The
    translation is rooted in a temporary folder; a problem is one line naming the verl keys it speaks of (the
    top-level verl keys of an astuner YAML)."""
    import contextlib
    import io
    import tempfile

    from omegaconf import OmegaConf
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from astuner.backbone.translate_common import named_keys, user_verl_keys
    from astuner.backbone.verl.translate import translate_to_verl

    with tempfile.TemporaryDirectory() as folder:
        composed = compose_verl_config(translate_to_verl(run, Path(folder)))
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # it prints what it checked
            validate_config(config=composed, use_reference_policy=need_reference_policy(composed),
                            use_critic=need_critic(composed))
    except (ValueError, AssertionError, TypeError) as exc:
        said = " ".join(str(exc).strip().split())
        try:
            values = OmegaConf.to_container(composed, resolve=True)
        except Exception:  # noqa: BLE001 - an interpolation verl resolves later (an environment variable): as written
            values = OmegaConf.to_container(composed)
        raise ConfigError(f"verl rejects the translated config: {said[:300]}{named_keys(said, values, '', user_verl_keys(run.merged))}; check the "
                          f"astuner settings it names or the top-level verl keys of your YAML") from None


def dry_run_config(run: Any, root: Path) -> dict[str, Any]:
    """The translated config; merged into verl's own ppo_trainer config when verl is installed."""
    from astuner.backbone.debug.warm_start import planned_model
    from astuner.backbone.verl.translate import translate_to_verl

    translated = translate_to_verl(run, root, model_path=planned_model(run, root))
    if importlib.util.find_spec("verl") is None:
        return translated
    from omegaconf import OmegaConf

    return OmegaConf.to_container(compose_verl_config(translated), resolve=False)


class VerlBackbone:
    name = "verl"
    refuses = {  # what a config may ask for that verl cannot do (astuner.backbone.capabilities)
        "several_policies": "verl 0.9 trains one actor model per job (one actor worker group; its vLLM serves one "
                            "LoRA adapter, under one fixed id)",
        "task_selector": "verl serves tasks with its own sampler, in order or shuffled",
        "experience_operators": "verl has no experience pipeline between its rollouts and its update",
        "off_policy": "the verl backbone runs verl's synchronous PPO trainer; verl 0.9's asynchronous one (trainer.v1 "
                      "with TransferQueue) is not wired to astuner's agent loop yet",
        "stale_drop": "the verl backbone trains synchronously (nothing is ever stale)",
        "short_group_train": "verl takes one output per episode and its GRPO counts every one in the group's mean "
                             "and std, a failed episode's reward-0 stand-in too; its short groups are dropped",
        "traces": "training from a trace store runs on the debug backbone (train there, then continue on verl from "
                  "its checkpoint: astuner.model.path)",
    }
    uses_ray = True
    records_tokens = False

    def check_available(self) -> None:
        check_available()

    def notes(self, config: Any) -> list[str]:
        return []

    def plan(self, config: Any) -> Optional[str]:
        from astuner.backbone.plan import machine_plan
        from astuner.backbone.verl.checks import check_sizes

        line = machine_plan(config, lambda cpu, count: engines_of(config, cpu, count))
        check_sizes(config)
        if config.astuner.model.lora is not None:  # what verl's LoRA cannot carry: before the warm start runs
            from astuner.backbone.machine import cpu_mode
            from astuner.backbone.translate_common import local_model
            from astuner.backbone.verl.translate import lora_overrides

            lora_overrides(config.astuner.model.lora, cpu_mode(config), local_model(config))
        if importlib.util.find_spec("verl") is not None:  # before the run folder exists, and at --dry-run
            check_with_verl(config)
        return line

    def check_resume(self, config: Any, checkpoints: Any) -> None:
        """verl resumes from its own checkpoints (trainer.resume_mode auto) and checks them itself."""

    def dry_run(self, config: Any, root: Any) -> str:
        from astuner.records.run_dir import dump_config

        return f"# verl config translated from {config.conf_path}\n" + dump_config(dry_run_config(config, root))

    def run(self, ctx: Any) -> None:
        run(ctx)


BACKBONE = VerlBackbone()
