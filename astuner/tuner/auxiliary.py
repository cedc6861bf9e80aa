"""Auxiliary models: named chat models handed to workflows and judges (`auxiliary_models=`), never trained.

An entry may already be an AgentScope chat model (e.g. `OpenAIChatModel` pointed at any OpenAI-compatible
endpoint), used as it is; a `TunerModelConfig` is served from its local model by an in-process hf engine.
"""

from __future__ import annotations

from typing import Any

from astuner.rollout.engines.base import SamplingParams
from astuner.tuner.model_tuner import ModelTuner
from astuner.tuner.recorder import EpisodeRecorder


class FrozenChatModel(ModelTuner):
    """A ModelTuner whose calls are not kept: nothing it generates becomes a training sample."""

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().__call__(*args, **kwargs)
        finally:
            self.recorder = EpisodeRecorder()


def build_auxiliary_models(models: dict[str, Any]) -> dict[str, Any]:
    from astuner.tuner.api import TunerModelConfig

    out: dict[str, Any] = {}
    for name, entry in (models or {}).items():
        if type(entry).__name__ == "TunerModelConfig" and not isinstance(entry, TunerModelConfig):
            # agentscope.tuner's (pydantic) TunerModelConfig: the same fields, duck-typed
            entry = TunerModelConfig(**{f: getattr(entry, f) for f in TunerModelConfig.__dataclass_fields__
                                        if hasattr(entry, f)})
        if isinstance(entry, TunerModelConfig):
            from astuner.rollout.engines.factory import load_tokenizer
            from astuner.rollout.engines.hf import HFEngine

            tokenizer = load_tokenizer(entry.model_path)
            engine = HFEngine.from_pretrained(entry.model_path, tokenizer)
            sampling = SamplingParams(entry.temperature, entry.top_p, min(entry.max_tokens, entry.max_model_len - 1))
            kwargs = {} if entry.enable_thinking is None else {"enable_thinking": entry.enable_thinking}
            out[name] = FrozenChatModel(engine, tokenizer, sampling, entry.max_model_len, chat_template_kwargs=kwargs,
                                        model_name=name)
        elif callable(entry):
            out[name] = entry
        else:
            raise TypeError(f"auxiliary model {name!r} must be an AgentScope chat model or a TunerModelConfig, "
                            f"got {type(entry).__name__}")
    return out
