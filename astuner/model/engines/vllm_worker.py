"""Loaded inside vLLM's worker processes (`worker_extension_cls`): receives new policy weights."""

from __future__ import annotations

from typing import Any


class AstunerWorkerExtension:
    """Mixed into vLLM's worker class; `collective_rpc("astuner_load_weights", args=(path,))` calls it
    with a file the trainer wrote with `torch.save(state_dict)` (same machine), so no tensors travel
    through vLLM's RPC serialisation."""

    model_runner: Any

    def astuner_load_weights(self, path: str) -> int:
        import torch

        state = torch.load(path, map_location="cpu", weights_only=True)
        weights = list(state.items())
        reload = getattr(self.model_runner, "reload_weights", None)
        if reload is not None:  # handles weights the backend repacked after loading (CPU, quantised kernels)
            reload(weights_iterator=weights, is_checkpoint_format=True)
        else:
            self.model_runner.model.load_weights(weights=weights)
        return len(state)
