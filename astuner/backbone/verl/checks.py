"""What verl 0.9 would assert on (or run out of memory on) mid-run, said before launch."""

from __future__ import annotations

from typing import Any, Optional

from astuner.backbone.verl.translate import verl_gpus_per_node
from astuner.errors import ConfigError


def check_batching(run: Any, n_train: Optional[int]) -> None:
    """What verl 0.9 asserts in the middle of a run (it pads nothing), said before launch (`n_train`: the training
    tasks, None where they are not counted yet)."""
    a = run.astuner
    tc, batch, n = a.trainer_common, a.data.train_batch_size, a.rollout.num_repeat
    gpus = tc.nnodes * verl_gpus_per_node(run)
    problems = []
    if n_train is not None and n_train < batch:
        problems.append(f"there are {n_train} training tasks, fewer than astuner.data.train_batch_size ({batch})")
    if batch % tc.mini_batch_num:
        problems.append(f"astuner.data.train_batch_size ({batch}) must be a multiple of "
                        f"astuner.trainer_common.mini_batch_num ({tc.mini_batch_num})")
    elif (batch // tc.mini_batch_num) * n % gpus:
        problems.append(f"each mini-batch's episodes (train_batch_size / mini_batch_num × num_repeat = "
                        f"{batch // tc.mini_batch_num * n}) must divide evenly over the {gpus} GPUs "
                        f"(trainer_common.nnodes × n_gpus_per_node)")
    longest = a.data.max_prompt_length + a.data.max_response_length
    if tc.max_token_len_per_micro_batch < longest:
        problems.append(f"astuner.trainer_common.max_token_len_per_micro_batch ({tc.max_token_len_per_micro_batch}) "
                        f"must hold one whole sequence (data.max_prompt_length + max_response_length = {longest})")
    if problems:
        raise ConfigError("backbone verl: " + "; ".join(problems))


def local_train_tasks(run: Any) -> Optional[int]:
    """The training tasks, counted where they are read without the network (a hub dataset is counted when the run
    reads it); None also where they cannot be read (the preflight's task check says why)."""
    from astuner.config.paths import find_user_path
    from astuner.errors import UserError
    from astuner.task_reader import build_task_reader

    tr = run.astuner.task_reader
    if tr.type == "huggingface_dat_repo" and find_user_path(tr.huggingface_dat_repo.dataset_path or "",
                                                            run.extra_roots) is None:
        return None
    try:
        return len(build_task_reader(run.astuner, run.extra_roots).train_tasks())
    except UserError:
        return None


def check_sizes(run: Any) -> None:
    """Every check of the run's sizes against verl's, before launch and at --dry-run alike: the batch over the
    tasks and GPUs, and on GPUs the trainer's memory where a GPU's is known (nvidia-smi)."""
    from astuner.backbone.machine import cpu_mode, gpu_memory
    from astuner.backbone.translate_common import local_model, user_verl_keys

    check_batching(run, local_train_tasks(run))
    if not cpu_mode(run):
        check_memory(run, local_model(run) or run.astuner.model.path, gpu_memory(), user_verl_keys(run.merged))


BYTES_PER_TRAINED_PARAM = 16  # fp32 weights and gradients, AdamW's two moments


def model_parameters(model_path: str) -> Optional[int]:
    """Parameter count of a local model folder or a hub id in the local cache, from its safetensors (index or
    files); None when it cannot be told without a download."""
    from astuner.backbone.vllm_memory import model_folder
    from astuner.backbone.vllm_memory import model_parameters as folder_parameters

    folder = model_folder(model_path)
    return folder_parameters(folder) if folder is not None else None


def check_memory(run: Any, model_path: str, gpu_bytes: Optional[int], verl_keys: dict) -> None:
    """Full fine-tuning under FSDP holds ~16 bytes per parameter spread over the GPUs: say before launch
    when that cannot fit (the user contract's 14B model on one GPU, say) and what to change."""
    fsdp = verl_keys.get("actor_rollout_ref", {}).get("actor", {}).get("fsdp_config", {})
    params = model_parameters(model_path)
    if gpu_bytes is None or params is None or (fsdp.get("param_offload") and fsdp.get("optimizer_offload")):
        return
    tc = run.astuner.trainer_common
    gpus = tc.nnodes * verl_gpus_per_node(run)
    need = BYTES_PER_TRAINED_PARAM * params / gpus
    if need > 0.9 * gpu_bytes:
        raise ConfigError(f"backbone verl: {params / 1e9:.1f}B parameters need about {need / 2**30:.0f} GiB per GPU to "
                          f"train (fp32 weights, gradients, AdamW moments over {gpus} GPU(s)), a GPU has "
                          f"{gpu_bytes / 2**30:.0f} GiB; set actor_rollout_ref.actor.fsdp_config.param_offload and "
                          f"optimizer_offload to true, use more GPUs or a smaller model")


def gpu_memory() -> Optional[int]:
    import torch

    return torch.cuda.get_device_properties(0).total_memory if torch.cuda.is_available() else None
