"""Runtime hooks shared by the backbones' CPU modes (verl 0.9's CPU platform, Trinity's trainer on its bundled
verl 0.8): a patch applied right after a module is imported, and verl's process groups over gloo alone.
Nothing here touches installed files; each hook is loaded only where it applies (a CPU mode, several policies on
Trinity)."""

from __future__ import annotations

import importlib.abc
import sys
from typing import Any, Callable


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `patch(module)` right after `name` is first imported (so a process that never imports it, e.g.
    a verl process that never loads vLLM, never pays for it)."""

    def __init__(self, name: str, patch: Callable[[Any], None]):
        self.name, self.patch = name, patch

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        import importlib.util

        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        exec_module, patch = spec.loader.exec_module, self.patch

        def exec_and_patch(module: Any) -> None:
            exec_module(module)
            patch(module)

        spec.loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


def after_import(name: str, patch: Callable[[Any], None]) -> None:
    """`patch(module)` now if `name` is imported, else right after its import (once per process). A module still
    being imported (it imported the module that asks, e.g. verl's plug-in hook from inside Trinity's trainer) is
    patched by a thread as soon as its import ends: the thread's own import waits on that module's import lock."""
    if name in sys.modules and getattr(getattr(sys.modules[name], "__spec__", None), "_initializing", False):
        import importlib
        import threading

        threading.Thread(target=lambda: patch(importlib.import_module(name)), daemon=True,
                         name=f"after-import-{name}").start()
    elif name in sys.modules:
        patch(sys.modules[name])
    elif not any(isinstance(f, _AfterImport) and f.name == name and f.patch is patch for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, patch))


def gloo_process_groups(distributed: Any = None) -> None:
    """verl names the process-group backends "cpu:gloo,<device>:<backend>", which is "cpu:gloo,cpu:gloo" or
    "cpu:gloo,cpu:nccl" on the CPU and rejected by torch; on the CPU, gloo alone."""
    if distributed is None:
        import verl.utils.distributed as distributed

    original = distributed.initialize_global_process_group_ray
    if getattr(original, "astuner_cpu", False):
        return

    def initialize_global_process_group_ray(timeout_second: Any = None, backend: Any = None) -> Any:
        return original(timeout_second=timeout_second, backend=backend or "cpu:gloo")

    initialize_global_process_group_ray.astuner_cpu = True  # type: ignore[attr-defined]
    distributed.initialize_global_process_group_ray = initialize_global_process_group_ray


# verl's FSDP engine module, where its forward-only reference model gets FSDP2's CPU offload
FSDP_ENGINE = "verl.workers.engine.fsdp.transformer_impl"


def unpinned_cpu_offload(module: Any) -> None:
    """verl's FSDP2 engine offloads a forward-only model (the KL reference) with `CPUOffloadPolicy(pin_memory=True)`;
    pinning memory needs an accelerator ("Cannot access accelerator device when none is available"): on the CPU the
    same offload, unpinned."""
    original = module.CPUOffloadPolicy
    if original is None or getattr(original, "astuner_cpu", False):
        return

    def cpu_offload_policy(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **{**kwargs, "pin_memory": False})

    cpu_offload_policy.astuner_cpu = True  # type: ignore[attr-defined]
    module.CPUOffloadPolicy = cpu_offload_policy
