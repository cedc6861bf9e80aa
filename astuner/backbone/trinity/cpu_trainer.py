"""Trinity-RFT's trainer (its bundled verl 0.8, FSDP2) on the CPU: the trinity backbone's CPU mode.

Loaded through verl's own plug-in hook (`VERL_USE_EXTERNAL_MODULES`, read when `verl` is imported), which the
CPU mode sets for its Ray workers only; each change below applies when its module is first imported, so a
process that never builds a trainer is not touched beyond the first two. Trinity's and verl's installed files
stay as they are. verl 0.8 already answers "cpu" for the device without CUDA; what it lacks:

- memory calls on `torch.cpu` (verl calls `empty_cache`, `memory_allocated`, `mem_get_info`, ... on its
  device module after each batch): no-ops, and the host's memory for `mem_get_info`;
- a CUDA capability: Trinity's model builder asks `torch.cuda.get_device_capability(0)` (to decide whether
  FSDP2 ranks start on the meta device); without CUDA it is (0, 0), which starts every rank on the CPU;
- process groups over gloo alone (verl asks for "cpu:gloo,cpu:nccl");
- verl's FSDP engine registered for the device "cpu" (it is registered for "cuda" and "npu"; the engine is
  device-generic), and its CPU offload for the forward-only reference model without pinned memory, which
  needs an accelerator;
- the padding helpers (`unpad_input`, `pad_input`, ...) from verl's own PyTorch implementation (written for
  NPUs) instead of flash-attn's, which is CUDA-only and not installed;
- the LoRA adapter's save beside each checkpoint (`_save_lora`, which the explorer's engine loads at each weight
  sync): through its path for a model without FSDP (each parameter gathered whole), since its FSDP path moves the
  model to CUDA.
"""

from __future__ import annotations

from typing import Any

import torch

from astuner.backbone.cpu_hooks import FSDP_ENGINE, after_import, gloo_process_groups, unpinned_cpu_offload



def _noop(*args: Any, **kwargs: Any) -> None:
    return None


def _zero(*args: Any, **kwargs: Any) -> int:
    return 0


def _host_memory(*args: Any, **kwargs: Any) -> tuple[int, int]:
    import psutil

    memory = psutil.virtual_memory()
    return memory.available, memory.total


def cpu_memory_calls() -> None:
    for name, call in (("empty_cache", _noop), ("reset_peak_memory_stats", _noop), ("ipc_collect", _noop),
                       ("memory_allocated", _zero), ("memory_reserved", _zero), ("max_memory_allocated", _zero),
                       ("max_memory_reserved", _zero), ("mem_get_info", _host_memory)):
        if not hasattr(torch.cpu, name):
            setattr(torch.cpu, name, call)


def no_cuda_capability() -> None:
    if torch.cuda.is_available() or getattr(torch.cuda.get_device_capability, "astuner_cpu", False):
        return

    def get_device_capability(*args: Any, **kwargs: Any) -> tuple[int, int]:
        return 0, 0

    get_device_capability.astuner_cpu = True  # type: ignore[attr-defined]
    torch.cuda.get_device_capability = get_device_capability  # type: ignore[assignment]


def fsdp_engine_on_cpu(module: Any) -> None:
    from verl.workers.engine.base import EngineRegistry

    for backends in EngineRegistry._engines.values():
        for devices in backends.values():
            if "cuda" in devices:
                devices.setdefault("cpu", devices["cuda"])
    unpinned_cpu_offload(module)


def torch_padding_helpers(module: Any) -> None:
    def get_attention_functions() -> tuple[Any, Any, Any, Any]:
        from verl.utils import npu_flash_attn_utils as torch_impl

        functions = (torch_impl.index_first_axis, torch_impl.pad_input, torch_impl.rearrange, torch_impl.unpad_input)
        module._index_first_axis, module._pad_input, module._rearrange, module._unpad_input = functions
        return functions

    module._get_attention_functions = get_attention_functions


def lora_save_on_cpu(engine_workers: Any) -> None:
    """Trinity's worker subclasses verl's `ActorRolloutRefWorker` while its own module is still being imported, so
    its `_save_lora` is wrapped as the subclass is made (verl's base class, patched once verl's module is in)."""
    base = engine_workers.ActorRolloutRefWorker
    if getattr(base, "astuner_cpu", False):
        return

    def wrap(save: Any) -> Any:
        def save_lora(self: Any, local_path: str) -> Any:
            import verl.utils.fsdp_utils as fsdp_utils

            version = fsdp_utils.fsdp_version
            # its path for a model without FSDP: every parameter gathered whole (DTensor.full_tensor), then peft's
            # own adapter state dict; the FSDP path moves the model to CUDA and, on the CPU's single rank, finds no
            # FSDP-wrapped layer to summon (measured: an empty adapter file)
            fsdp_utils.fsdp_version = lambda module: 0
            try:
                return save(self, local_path)
            finally:
                fsdp_utils.fsdp_version = version

        return save_lora

    def init_subclass(cls: Any, **kwargs: Any) -> None:
        super(base, cls).__init_subclass__(**kwargs)
        if "_save_lora" in cls.__dict__:
            cls._save_lora = wrap(cls.__dict__["_save_lora"])

    base.__init_subclass__ = classmethod(init_subclass)
    base.astuner_cpu = True


def install() -> None:
    cpu_memory_calls()
    no_cuda_capability()
    after_import("verl.utils.distributed", gloo_process_groups)
    after_import(FSDP_ENGINE, fsdp_engine_on_cpu)
    after_import("verl.utils.attention_utils", torch_padding_helpers)
    after_import("verl.workers.engine_workers", lora_save_on_cpu)


install()
