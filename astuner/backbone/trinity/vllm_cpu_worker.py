"""The vLLM model worker of the trinity backbone's CPU mode (named by `vllm_cpu`, imported by vLLM's worker
process): vLLM's CPU worker plus what Trinity asks of its own worker class.

Weights reach it from Trinity's checkpoints (`synchronizer.sync_method: checkpoint`): Trinity's engine
actor asks for a weight update with the folder of the trainer's step (`global_step_<n>/actor`); the worker
reads it with Trinity's own checkpoint reader and loads it with vLLM's `reload_weights`, which restores the
checkpoint-format layers, loads and repacks them for the CPU kernels. No weight-transfer engine is configured: Trinity's
"checkpoint" backend rendezvouses over NCCL and implements vLLM 0.19–0.23's interface."""

from __future__ import annotations

from typing import Any

from vllm.logger import init_logger
from vllm.v1.worker.cpu_worker import CPUWorker

logger = init_logger(__name__)


class TrinityCPUWorker(CPUWorker):
    def apply_patches(self) -> None:
        """Trinity calls this on every worker after the engine starts. Its CUDA worker patches MoE weight
        loaders and prompt log-probs of vLLM 0.19–0.23's GPU runner; neither applies to the CPU runner, and
        the workflow asks only for the generated tokens' log-probs."""

    def init_weight_transfer_engine(self, init_info: dict) -> None:
        """Trinity's explorer sets up a weight-sync group with each engine; with weights read from
        checkpoints there is no group to join."""
        if self.weight_transfer_engine is not None:
            return super().init_weight_transfer_engine(init_info)
        logger.info("weights come from Trinity's checkpoints: no weight-sync group")
        return None

    def start_weight_update(self, *args: Any, **kwargs: Any) -> None:
        if self.weight_transfer_engine is not None:
            return super().start_weight_update(*args, **kwargs)
        return None

    def update_weights(self, update_info: Any) -> None:
        if self.weight_transfer_engine is not None:
            return super().update_weights(update_info)
        info = update_info[self.rank] if isinstance(update_info, list) else update_info
        path = (info or {}).get("checkpoint_path")
        if not path:
            raise RuntimeError("the trinity backbone's CPU mode loads weights from Trinity's checkpoints only "
                               f"(synchronizer.sync_method: checkpoint); got {sorted(info or {})}")
        from trinity.common.models.utils import load_state_dict

        loaded = load_state_dict(path)  # Trinity's own reader of its checkpoint formats
        if isinstance(loaded, dict):
            self.reload_weights(weights_iterator=list(loaded.items()), is_checkpoint_format=True)
        elif loaded[0] == "huggingface":
            self.reload_weights(weights_path=loaded[1], is_checkpoint_format=True)
        else:
            raise RuntimeError(f"the trinity backbone's CPU mode cannot load a {loaded[0]} checkpoint ({path})")
        logger.info(f"weights reloaded from {path}")
        return None

    def finish_weight_update(self) -> None:
        if self.weight_transfer_engine is not None:
            return super().finish_weight_update()
        return None
