"""A Trinity-RFT config file as an astuner config: `tune(config_path=...)` with the file agentscope.tuner takes.

A file is a Trinity-RFT config when it has Trinity's top-level keys (`project`, `algorithm`, `buffer`, ...) and
no `astuner:` tree. It is read as Trinity reads it (OmegaConf, `${oc.env:...}` resolved) and translated key by
key (the inverse of `astuner/backbone/trinity/translate.py`):

- a key with an astuner meaning becomes that astuner key (KEYS lists them); a key the file leaves out takes
  Trinity's default where astuner has the same setting (temperature 1.0, repeat_times 1, batch_size 1,
  eval_interval 100, eval_on_startup, save_interval 0, max_timeout 1800, the sequential task selector), the KL
  loss excepted: without `kl_loss_fn` there is none (Trinity's GRPO default, k2, has no astuner meaning);
- a key set to Trinity's own default is as if absent: it changes nothing;
- any other key has no astuner meaning: with backbone "trinity" it goes to the `trinity:` subtree, merged
  over astuner's translation; with "debug" or "verl" it is refused (UserError, naming the key), except the
  weight-sync settings (`synchronizer.sync_method`, `sync_style`, `sync_timeout`): how weights travel, which
  those backbones do their own way, so they are taken and logged (`sync_interval` and `sync_offset`, the
  schedule, are astuner keys: `trainer_common.off_policy`, the same meaning everywhere);
- a taskset's `format.response_key` (the answer column of Trinity's reward functions) is taken and logged:
  workflow_func and judge_func receive the whole task row, as agentscope.tuner's adapter hands it to them;
- a value the translation computes with is type-checked first (`values.py`): a wrong one is refused
  naming its key and the type it must have;
- `explorer.auxiliary_models` become `astuner.auxiliary_models`, which every backbone serves;
- a key astuner cannot honour on any backbone (another stage, a Trinity workflow or reward type, a second
  taskset, Ray's address, keys Trinity derives itself) is refused on every backbone;
- `project`, `group`, `name`, `checkpoint_root_dir` place the run folder
  (`{checkpoint_root_dir}/{project}/{group}/{name}`, as Trinity's), `continue_from_checkpoint` says whether
  an existing one is continued (else a new name with a timestamp, as Trinity does).

Keys that tune()'s arguments replace (as agentscope.tuner replaces them) are dropped from the file first.
Trinity itself is not imported; its schema is `astuner/compat/trinity/schema.py`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from astuner.errors import UserError
from astuner.compat.trinity import schema

TOP_LEVEL = frozenset(key.split(".")[0] for key in schema.CONFIG) | {"buffer"}
ALGORITHMS = {"grpo": "grpo", "multi_step_grpo": "step_wise_grpo"}  # astuner's, with Trinity's advantage fn
KL_TYPES = {"none": None, "low_var_kl": "low_var_kl", "k1": "kl"}  # Trinity's KL_FN -> astuner's kl_loss_type
SYNC_KEYS = ("synchronizer.sync_method", "synchronizer.sync_style", "synchronizer.sync_timeout")
ALIASES = {"synchronizer.sync_method": {"online": "nccl", "offline": "checkpoint"},
           "synchronizer.sync_style": {"dynamic_by_explorer": "explorer_driven",
                                       "dynamic_by_trainer": "trainer_driven"}}
MONITORS = ("tensorboard", "wandb", "swanlab", "mlflow")  # Trinity's monitors that trainer_common.logger has
WORKFLOW_ADAPTER = "agentscope_workflow_adapter"  # agentscope.tuner's adapter: the workflow is workflow_func
# what each tune() argument replaces in the file (agentscope.tuner's own mapping); a path covers its sub-tree
REPLACED_BY = {
    "project_name": ("project",), "experiment_name": ("name",), "monitor_type": ("monitor.monitor_type",),
    "algorithm": ("algorithm.algorithm_type", "algorithm.repeat_times", "algorithm.optimizer.lr", "buffer.batch_size",
                  "trainer.save_interval", "explorer.eval_interval"),
    "train_dataset": ("buffer.explorer_input.taskset.path", "buffer.explorer_input.taskset.split",
                      "buffer.explorer_input.taskset.subset_name", "buffer.total_epochs", "buffer.total_steps"),
    "eval_dataset": ("buffer.explorer_input.eval_tasksets",),
    "model": ("model.model_path", "model.max_model_len", "model.max_prompt_tokens", "model.max_response_tokens",
              "model.temperature", "model.top_p", "model.enable_thinking", "explorer.rollout_model",
              "buffer.explorer_input.taskset.rollout_args.temperature",
              "buffer.explorer_input.taskset.rollout_args.top_p",
              "buffer.explorer_input.taskset.rollout_args.max_tokens"),
}
# Trinity key -> the astuner key it becomes (the table in docs/tune.md; conversions in translator.py)
KEYS = {
    "project": "project_name", "name": "experiment_name",
    "cluster.node_num": "trainer_common.nnodes", "cluster.gpu_per_node": "trainer_common.n_gpus_per_node",
    "algorithm.algorithm_type": "trainer_common.algorithm.adv_estimator",
    "algorithm.repeat_times": "rollout.num_repeat",
    "algorithm.optimizer.lr": "trainer_common.optim.lr",
    "algorithm.optimizer.lr_warmup_steps": "trainer_common.optim.warmup_steps",
    "algorithm.optimizer.weight_decay": "trainer_common.optim.weight_decay",
    "algorithm.optimizer.betas": "trainer_common.optim.betas",
    "algorithm.optimizer.clip_grad": "trainer_common.optim.grad_clip",
    "trainer.grad_clip": "trainer_common.optim.grad_clip",
    "algorithm.loss_agg_mode": "trainer_common.algorithm.loss_agg_mode",
    "algorithm.policy_loss_fn_args.clip_range": "trainer_common.algorithm.clip_ratio_low/high",
    "algorithm.policy_loss_fn_args.clip_range_low": "trainer_common.algorithm.clip_ratio_low",
    "algorithm.policy_loss_fn_args.clip_range_high": "trainer_common.algorithm.clip_ratio_high",
    "algorithm.policy_loss_fn_args.clip_ratio_c": "trainer_common.algorithm.clip_ratio_c",
    "algorithm.kl_loss_fn": "trainer_common.algorithm.use_kl_loss/kl_loss_type",
    "algorithm.kl_loss_fn_args.kl_coef": "trainer_common.algorithm.kl_loss_coef",
    "algorithm.entropy_loss_fn_args.entropy_coef": "trainer_common.algorithm.entropy_coeff",
    "model.model_path": "model.path", "model.max_model_len": "rollout.max_model_len",
    "model.max_prompt_tokens": "data.max_prompt_length", "model.max_response_tokens": "data.max_response_length",
    "model.temperature": "rollout.temperature", "model.top_p": "rollout.top_p",
    "model.enable_thinking": "rollout.chat_template_kwargs.enable_thinking",
    "model.lora_configs[0].lora_rank": "model.lora.rank", "model.lora_configs[0].lora_alpha": "model.lora.alpha",
    "model.lora_configs[0].target_modules": "model.lora.target_modules",
    "buffer.batch_size": "data.train_batch_size", "buffer.total_epochs": "trainer_common.total_epochs",
    "buffer.total_steps": "trainer_common.total_training_steps",
    "trainer.total_steps": "trainer_common.total_training_steps",
    "explorer.runner_per_model": "rollout.max_env_worker (× engine_num × repeat_times)",
    "explorer.max_timeout": "rollout.episode_timeout_s", "explorer.max_retry_times": "rollout.episode_retries",
    "synchronizer.sync_interval": "trainer_common.off_policy.sync_interval",
    "synchronizer.sync_offset": "trainer_common.off_policy.sync_offset", "explorer.eval_interval": "trainer_common.test_freq",
    "explorer.eval_on_startup": "trainer_common.val_before_train",
    "explorer.rollout_model.engine_num": "trainer_common.trinity_only__n_vllm_engine",
    "explorer.rollout_model.tensor_parallel_size": "rollout.tensor_model_parallel_size",
    "explorer.rollout_model.gpu_memory_utilization": "rollout.gpu_memory_utilization",
    "explorer.rollout_model.seed": "rollout.seed",
    "explorer.rollout_model.tool_call_parser": "rollout.tool_call_parser",
    "explorer.rollout_model.reasoning_parser": "rollout.reasoning_parser",
    "explorer.rollout_model.enable_thinking": "rollout.chat_template_kwargs.enable_thinking",
    "explorer.rollout_model.extra_engine_args.max_num_seqs": "rollout.max_num_seqs",
    "trainer.save_interval": "trainer_common.save_freq", "trainer.max_token_len_per_gpu":
    "trainer_common.max_token_len_per_micro_batch", "trainer.max_checkpoints_to_keep":
    "trainer_common.max_checkpoints_to_keep",
    "trainer.trainer_config.actor_rollout_ref.actor.ppo_epochs": "trainer_common.ppo_epochs",
    "monitor.monitor_type": "trainer_common.logger",
    "data_processor.experience_pipeline.operators": "data_processor.experience_pipeline.operators",
    "buffer.explorer_input.taskset.path": "task_reader.huggingface_dat_repo.dataset_path",
    "buffer.explorer_input.taskset.subset_name": "task_reader.huggingface_dat_repo.dataset_name",
    "buffer.explorer_input.taskset.split": "task_reader.huggingface_dat_repo.training_split",
    "buffer.explorer_input.taskset.format.prompt_key": "task_reader.query_field",
    "buffer.explorer_input.taskset.data_selector": "task_reader.task_selector",
    "buffer.explorer_input.taskset.rollout_args.temperature": "rollout.temperature",
    "buffer.explorer_input.taskset.rollout_args.top_p": "rollout.top_p",
    "buffer.explorer_input.taskset.rollout_args.max_tokens": "rollout.max_response_length_in_one_turn",
    "buffer.explorer_input.eval_tasksets[0].path": "task_reader.huggingface_dat_repo.validation_dataset_path",
    "buffer.explorer_input.eval_tasksets[0].split": "task_reader.huggingface_dat_repo.validation_split",
    "buffer.explorer_input.eval_tasksets[0].repeat_times": "rollout.val_kwargs.num_repeat",
    "buffer.explorer_input.eval_tasksets[0].rollout_args.temperature": "rollout.val_kwargs.temperature",
    "buffer.explorer_input.eval_tasksets[0].rollout_args.top_p": "rollout.val_kwargs.top_p",
}
# astuner keys computed from several Trinity keys (their product)
PRODUCTS = {"rollout.max_env_worker": ("explorer.runner_per_model", "explorer.rollout_model.engine_num",
                                       "algorithm.repeat_times")}
# refused on every backbone, with the reason
EVERYWHERE = {
    "stages": "astuner runs one stage per tune() call; run one call per stage",
    "cluster.ray_address": "astuner takes the Ray cluster from RAY_ADDRESS (or starts one); set that instead",
    "data_processor.task_pipeline": "astuner's task reader supplies the tasks; prepare the dataset before the run",
    "checkpoint_job_dir": "Trinity derives it; astuner places the run under checkpoint_root_dir/project/group/name",
    "monitor.cache_dir": "Trinity derives it; astuner's monitor writes into the run folder",
    "log.save_dir": "Trinity derives it; astuner logs into the run folder",
    "buffer.cache_dir": "Trinity derives it from the run folder",
}
TASKSET_ONLY = "astuner reads tasks with its own reader and runs them with workflow_func"
# keys (or sections, ending in ".") that only tune how Trinity-RFT runs: throughput, timeouts, queues, parallelism,
# engines, memory, logging. The debug and verl backbones roll out and train in step in their own runtime, where
# they change nothing the run learns: they are applied on backbone trinity only (and said so, once)
TRINITY_RUNTIME = (
    "explorer.over_rollout.", "explorer.dynamic_timeout.", "explorer.max_repeat_times_per_runner",
    "explorer.runner_prepare_concurrency", "explorer.runner_prepare_max_retries", "explorer.concurrent_mode",
    "explorer.runner_state_report_interval", "explorer.max_inflight_batches", "explorer.bench_on_latest_checkpoint",
    "explorer.proxy_port", "explorer.listen_address", "explorer.service_status_check_interval",
    "explorer.min_running_model_num", "explorer.db_url", "explorer.env_vars", "explorer.rollout_model.",
    "explorer.max_retry_times", "trainer.ulysses_sequence_parallel_size", "trainer.use_dynamic_bsz",
    "trainer.trainer_strategy", "trainer.save_hf_checkpoint", "trainer.save_strategy", "trainer.use_remove_padding",
    "trainer.balance_batch", "trainer.param_offload", "trainer.optimizer_offload", "trainer.offload_policy",
    "trainer.enable_preview", "trainer.trainer_type", "synchronizer.group_name", "synchronizer.wait_for_checkpoint",
    "monitor.", "log.", "service.", "cluster.", "ray_namespace", "ignore_validator_suggestions",
    "buffer.trainer_input.experience_buffer.name", "buffer.trainer_input.experience_buffer.storage_type",
    "buffer.trainer_input.experience_buffer.max_read_timeout", "buffer.trainer_input.experience_buffer.path",
    "buffer.trainer_input.experience_buffer.capacity", "buffer.trainer_input.experience_buffer.max_retry_times",
    "buffer.trainer_input.experience_buffer.max_retry_interval",
    "buffer.trainer_input.experience_buffer.enable_progress_bar")
# Trinity-RFT 0.6's step-wise GRPO (multi_step_grpo) and GRPO advantage arguments -> astuner's; others refused
ADVANTAGE_ARGS = {"epsilon": "trainer_common.algorithm.adv_epsilon",
                  "enable_step_norm": "trainer_common.algorithm.step_norm"}


@dataclass
class Translation:
    """The astuner tree (plus the `trinity:` subtree on that backbone) and where the run folder goes."""

    tree: dict[str, Any]
    checkpoint_root_dir: Optional[str] = None
    group: str = ""
    continue_from_checkpoint: bool = True
    accepted: list[str] = field(default_factory=list)  # keys taken as the backbone's way of doing what they ask
    trinity_only: list[str] = field(default_factory=list)  # runtime keys applied on backbone trinity only
    approximated: dict[str, str] = field(default_factory=dict)  # keys debug / verl honour their own way -> how
    passed: list[str] = field(default_factory=list)  # keys handed to Trinity-RFT in the trinity: subtree
    ignored: dict[str, str] = field(default_factory=dict)  # keys tune()'s functions leave unread -> why
    warnings: list[str] = field(default_factory=list)  # what the run does that the user may not expect, one line each


TRINITY_ONLY_TOP = frozenset({"buffer", "explorer", "synchronizer"})  # never top-level keys of an astuner YAML


def is_trinity_config(tree: Any) -> bool:
    """Trinity's top-level keys and no `astuner:` tree, or Trinity's own sections with an `astuner:` section (astuner
    keys set over the translation: what a Trinity config cannot say, such as caps and madness checks)."""
    if not isinstance(tree, dict):
        return False
    return bool(set(tree) & TRINITY_ONLY_TOP) or ("astuner" not in tree and bool(set(tree) & TOP_LEVEL))


def load(path: str | Path) -> dict[str, Any]:
    """The file as Trinity reads it: OmegaConf, interpolations such as `${oc.env:VAR,default}` resolved."""
    from omegaconf import OmegaConf

    try:
        tree = OmegaConf.to_container(OmegaConf.load(str(path)), resolve=True)
    except Exception as exc:  # noqa: BLE001 - OmegaConf's errors are many; the message says what is wrong
        raise UserError(f"{path}: cannot read it as Trinity-RFT does: {str(exc).splitlines()[0]}") from None
    return tree or {}


def run_parent(translation: Optional[Translation], project: str, cwd: Path) -> Path:
    """The folder the run folder goes in: `{checkpoint_root_dir}/{project}/{group}` (Trinity's layout; an
    empty or absent checkpoint_root_dir is ./checkpoints, as tune() without a file)."""
    root = translation.checkpoint_root_dir if translation and translation.checkpoint_root_dir else "checkpoints"
    parent = cwd / root / project
    return parent / translation.group if translation and translation.group else parent


def translate(conf: dict[str, Any], *, backbone: str, source: str, supplied: frozenset[str] | set[str] = frozenset(),
              arguments: Optional[dict[str, Any]] = None) -> Translation:
    """The Trinity config `conf` (from `source`) as an astuner tree for `backbone`; `supplied` names the
    tune() arguments given, whose keys are dropped from the file; `arguments` (dotted Trinity key -> value) are
    the values they give to keys that others depend on (repeat_times for the concurrency, ...). UserError lists
    every key refused."""
    from astuner.compat.trinity.translator import Translator, drop
    from astuner.config.keys import set_path

    conf = drop(copy.deepcopy(conf), [p for arg in supplied for p in REPLACED_BY.get(arg, ())])
    for dotted, value in (arguments or {}).items():
        set_path(conf, dotted, value)
    return Translator(conf, backbone, source, set(supplied)).run()


def argument_values(algorithm: Any, model: Any) -> dict[str, Any]:
    """What tune()'s `algorithm` and `model` set among the Trinity keys other keys' translation reads."""
    values: dict[str, Any] = {}
    if algorithm is not None:
        values.update({"algorithm.repeat_times": algorithm.group_size, "buffer.batch_size": algorithm.batch_size})
    if model is not None:
        values["explorer.rollout_model.engine_num"] = model.inference_engine_num
    return values


def source_hint(message: str) -> str:
    """Which keys of the Trinity config the astuner keys named in `message` come from."""
    found: dict[str, list[str]] = {}
    for trinity_key, astuner_key in KEYS.items():
        key = "astuner." + astuner_key.split(" ")[0].split("/")[0]
        if key in message:
            found.setdefault(key, []).append(trinity_key)
    for astuner_key, parts in PRODUCTS.items():
        if "astuner." + astuner_key in found:
            found["astuner." + astuner_key] = [" × ".join(parts)]
    if not found:
        return "see the table of Trinity-RFT keys in docs/tune.md"
    return "; ".join(f"{key} comes from {' or '.join(keys)}" for key, keys in found.items())
