"""The vLLM model worker of the trinity backbone's CPU mode (named by `vllm_cpu`, imported by vLLM's worker
process): vLLM's CPU worker plus what Trinity asks of its own worker class, in explore mode."""

from __future__ import annotations

import logging

from vllm.v1.worker.cpu_worker import CPUWorker

logger = logging.getLogger(__name__)


class TrinityCPUWorker(CPUWorker):
    def apply_patches(self) -> None:
        """Trinity calls this on every worker after the engine starts. Its CUDA worker patches MoE weight
        loaders and prompt log-probs of vLLM 0.19–0.23's GPU runner; neither applies to the CPU runner, and
        the workflow asks only for the generated tokens' log-probs."""

    def init_weight_transfer_engine(self, init_info: dict) -> None:
        """Trinity's explorer sets up a weight-sync group with each engine even in explore mode; the CPU mode
        configures no weight transfer (nothing trains), so there is no group to join."""
        if self.weight_transfer_engine is not None:
            return super().init_weight_transfer_engine(init_info)
        logger.info("explore mode: no weight-sync group (nothing trains, the weights stay as loaded)")
        return None
