"""Build the tokenizer and the engine a config asks for."""

from __future__ import annotations

import importlib.util
from typing import Any

from astuner.config.schema import AstunerConfig
from astuner.errors import ConfigError, DataError


def load_tokenizer(model_path: str, key: str = "astuner.model.path") -> Any:
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(model_path)
    except Exception as exc:  # noqa: BLE001 - OSError, or the tokenizer library's error on a corrupt file
        first = (str(exc).strip().splitlines() or [""])[0][:150]
        raise DataError(f"{key}: cannot load a tokenizer from {model_path!r} ({type(exc).__name__}: "
                        f"{first}); point it at a local model folder or a hub id available offline") from None
    if not getattr(tokenizer, "chat_template", None):
        raise DataError(f"{key}: the tokenizer of {model_path!r} has no chat template; astuner renders "
                        f"agent messages with it, so use a chat/instruct model")
    return tokenizer


def pick_engine(cfg: AstunerConfig) -> str:
    engine = cfg.rollout.engine
    if engine != "auto":
        return engine
    if importlib.util.find_spec("vllm") is not None:
        import torch

        if torch.cuda.is_available():
            return "vllm"
    return "hf"


def build_engine(cfg: AstunerConfig, tokenizer: Any, model: Any = None, model_path: str | None = None,
                 seed: int | None = None) -> Any:
    """The engine for `cfg.rollout.engine`. `model`: a loaded policy for the hf engine to share;
    `model_path`: where the weights are (default model.path); `seed`: its sampler's (default rollout.seed)."""
    kind = pick_engine(cfg)
    ro = cfg.rollout
    seed = ro.seed if seed is None else seed
    path = model_path or cfg.model.path
    if kind == "hf":
        from astuner.model.engines.hf import HFEngine, pad_id_of, stop_token_ids_of

        if model is None:
            return HFEngine.from_pretrained(path, tokenizer, ro.max_num_seqs, ro.batch_wait_ms, seed)
        from astuner.model.precision import compute_dtype

        device = next(model.parameters()).device.type  # the trainer's recipe: it shares the module
        return HFEngine(model, stop_token_ids_of(tokenizer, model), pad_id_of(tokenizer), ro.max_num_seqs,
                        ro.batch_wait_ms, seed, compute_dtype(cfg.trainer_common.dtype, device))
    if kind == "openai":
        from astuner.model.engines.openai_engine import OpenAIEngine

        return OpenAIEngine(ro.openai_base_url, ro.openai_model or path)
    if kind == "vllm":
        if importlib.util.find_spec("vllm") is None:
            raise ConfigError("astuner.rollout.engine is vllm but vllm is not installed; pip install 'astuner[vllm]' "
                              "or use engine: hf")
        from astuner.model.engines.vllm_engine import VLLMEngine

        return VLLMEngine(path, ro.max_model_len, ro.max_num_seqs, ro.tensor_model_parallel_size, seed,
                          ro.gpu_memory_utilization)
    raise ConfigError(f"unknown engine {kind!r}")
