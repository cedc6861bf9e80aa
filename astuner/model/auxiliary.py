"""Auxiliary models: named chat models handed to workflows and judges (tune()'s `auxiliary_models=`), never
trained; one given as a `TunerModelConfig` is served from its local model by an in-process hf engine."""

from __future__ import annotations

from typing import Any

from astuner.model.engines.base import SamplingParams
from astuner.model.model_tuner import ModelTuner
from astuner.schema.calls import EpisodeRecorder


class FrozenChatModel(ModelTuner):
    """A ModelTuner whose calls are not kept: nothing it generates becomes a training sample."""

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().__call__(*args, **kwargs)
        finally:
            self.recorder = EpisodeRecorder()


def frozen_model(config: Any, name: str) -> FrozenChatModel:
    """A never-trained chat model served from `config.model_path` (tune()'s `TunerModelConfig` fields) by an
    in-process hf engine."""
    from astuner.model.engines.factory import load_tokenizer
    from astuner.model.engines.hf import HFEngine

    tokenizer = load_tokenizer(config.model_path)
    engine = HFEngine.from_pretrained(config.model_path, tokenizer)
    sampling = SamplingParams(config.temperature, config.top_p, min(config.max_tokens, config.max_model_len - 1))
    kwargs = {} if config.enable_thinking is None else {"enable_thinking": config.enable_thinking}
    return FrozenChatModel(engine, tokenizer, sampling, config.max_model_len, chat_template_kwargs=kwargs,
                           model_name=name)


_BUILT: dict[tuple, FrozenChatModel] = {}  # one engine per model and settings in a process, however many runs ask


def config_auxiliary_models(cfg: Any, extra_roots: list[Any]) -> dict[str, FrozenChatModel]:
    """`astuner.auxiliary_models` as frozen chat models (a tiny model is created at its path first)."""
    from types import SimpleNamespace

    from astuner.model.model_path import resolve_local_model

    out = {}
    for name, entry in cfg.auxiliary_models.items():
        path = resolve_local_model(entry.path, entry.tiny, f"astuner.auxiliary_models.{name}", list(extra_roots))
        settings = (name, path, entry.temperature, entry.top_p, entry.max_tokens, entry.max_model_len,
                    entry.enable_thinking)
        if settings not in _BUILT:
            _BUILT[settings] = frozen_model(SimpleNamespace(
                model_path=path, temperature=entry.temperature, top_p=entry.top_p, max_tokens=entry.max_tokens,
                max_model_len=entry.max_model_len, enable_thinking=entry.enable_thinking), name)
        out[name] = _BUILT[settings]
    return out
