"""Inference engines: token ids in, token ids + log-probs out.

`build_engine(cfg, ...)` picks one by `astuner.rollout.engine`; torch/transformers/vllm are imported
only by the engine that needs them.
"""

from astuner.model.engines.base import Engine, GenerateResult, SamplingParams

__all__ = ["Engine", "GenerateResult", "SamplingParams"]
