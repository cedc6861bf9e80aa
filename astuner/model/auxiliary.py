"""Auxiliary models: named chat models handed to workflows and judges (`astuner.auxiliary_models`, tune()'s
`auxiliary_models=`), never trained. Each is an AgentScope chat model, whichever backbone serves it:

- a model folder becomes a `FrozenChatModel` (a ModelTuner whose calls are not kept) over an engine: on the
  debug backbone an in-process hf engine; on Trinity an engine of its explorer (`explorer.auxiliary_models`),
  on verl a vLLM engine in the Ray cluster (`backbone/verl/auxiliary.py`), handed in as `served`;
- an OpenAI-compatible endpoint (`base_url`, `model`, `api_key_env`) becomes AgentScope's own
  `OpenAIChatModel` (the openai SDK), on every backbone: the usual home of a hosted LLM judge.

Each call is counted for the episode it belongs to (`episode_calls`): the rollout reports `auxiliary_calls`
(not where tune() was handed a chat model object, whose calls it cannot see).
"""

from __future__ import annotations

import os
from collections import Counter
from contextvars import ContextVar
from functools import lru_cache
from typing import Any, Optional

from astuner.errors import ConfigError
from astuner.model.engines.base import SamplingParams
from astuner.model.model_tuner import ModelTuner
from astuner.schema.calls import EpisodeRecorder

_CALLS: ContextVar[Optional[Counter]] = ContextVar("astuner_auxiliary_calls", default=None)


def episode_calls() -> Counter:
    """A fresh tally of auxiliary calls by model name for the episode running in this asyncio task (the rollout
    sets one per episode; the calls its workflow and judge make land in it)."""
    tally: Counter = Counter()
    _CALLS.set(tally)
    return tally


def _count(name: str) -> None:
    tally = _CALLS.get()
    if tally is not None:
        tally[name] += 1


def all_counted(models: dict[str, Any]) -> bool:
    """Every model's calls are counted (ours: not a chat model object tune() was handed as it is)."""
    return all(getattr(model, "astuner_counts_calls", False) for model in models.values())


class FrozenChatModel(ModelTuner):
    """A ModelTuner whose calls are not kept: nothing it generates becomes a training sample."""

    astuner_counts_calls = True

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        _count(self.model_name)
        try:
            return await super().__call__(*args, **kwargs)
        finally:
            self.recorder = EpisodeRecorder()


def frozen_model(config: Any, name: str, engine: Any = None, tokenizer: Any = None) -> FrozenChatModel:
    """A never-trained chat model of `config.model_path` (tune()'s `TunerModelConfig` fields): over `engine` when
    the backbone serves the model, else over an in-process hf engine."""
    from astuner.model.engines.factory import load_tokenizer

    tokenizer = tokenizer or load_tokenizer(config.model_path, f"astuner.auxiliary_models.{name}")
    if engine is None:
        from astuner.model.engines.hf import HFEngine

        engine = HFEngine.from_pretrained(config.model_path, tokenizer)
    sampling = SamplingParams(config.temperature, config.top_p, min(config.max_tokens, config.max_model_len - 1))
    kwargs = {} if config.enable_thinking is None else {"enable_thinking": config.enable_thinking}
    return FrozenChatModel(engine, tokenizer, sampling, config.max_model_len, chat_template_kwargs=kwargs,
                           model_name=name)


def endpoint_model(name: str, entry: Any) -> Any:
    """AgentScope's OpenAIChatModel on an OpenAI-compatible endpoint (non-streaming), its calls counted."""
    from agentscope.model import OpenAIChatModel

    import asyncio

    import openai

    key = api_key(entry.api_key_env, f"astuner.auxiliary_models.{name}.api_key_env") or "EMPTY"
    client_kwargs = {"base_url": entry.base_url, "timeout": entry.timeout_s, "max_retries": 1}

    class EndpointChatModel(OpenAIChatModel):
        astuner_counts_calls = True
        _loop: Any = None

        async def __call__(self, *args: Any, **kwargs: Any) -> Any:
            _count(name)
            loop = asyncio.get_running_loop()
            if self._loop is not loop:  # an HTTP client per event loop (a workflow in its own thread runs its own)
                self.client, self._loop = openai.AsyncClient(api_key=key, **client_kwargs), loop
            return await super().__call__(*args, **kwargs)

    generate = {"temperature": entry.temperature, "top_p": entry.top_p, "max_tokens": entry.max_tokens}
    return EndpointChatModel(entry.model, api_key=key, stream=False, client_kwargs=client_kwargs,
                             generate_kwargs=generate)


def api_key(env_name: Optional[str], where: str) -> Optional[str]:
    """The key held by the environment variable `env_name` (None when no variable is named)."""
    if not env_name:
        return None
    value = os.environ.get(env_name)
    if not value:
        raise ConfigError(f"{where}: the environment variable {env_name} is not set here; export it (the key of "
                          f"the endpoint) before the run")
    return value


def key_env(cfg: Any) -> dict[str, str]:
    """The API keys the run's endpoints read, by variable name, as this process holds them: handed to the Ray
    workers' environment at launch (never written into a file)."""
    names = [entry.api_key_env for entry in cfg.auxiliary_models.values() if entry.base_url and entry.api_key_env]
    names += [cfg.task_judge.llm_judge.api_key_env] if cfg.task_judge.llm_judge.api_key_env else []
    return {name: os.environ[name] for name in names if os.environ.get(name)}


def served_locally(cfg: Any) -> list[str]:
    """The entries a backbone serves (a model folder), in the config's order; endpoints are asked directly."""
    return [name for name, entry in cfg.auxiliary_models.items() if not entry.base_url]


_BUILT: dict[tuple, FrozenChatModel] = {}  # one engine per model and settings in a process, however many runs ask


@lru_cache(maxsize=8)
def _tokenizer(path: str, name: str) -> Any:
    from astuner.model.engines.factory import load_tokenizer

    return load_tokenizer(path, f"astuner.auxiliary_models.{name}")


def config_auxiliary_models(cfg: Any, extra_roots: list[Any], served: Optional[dict[str, Any]] = None
                            ) -> dict[str, Any]:
    """`astuner.auxiliary_models` as chat models by name: endpoints as AgentScope's OpenAIChatModel, folders over
    `served[name]` (the engine the backbone serves the model on, and the folder it loaded) or, absent, an
    in-process hf engine (a tiny model is created at its path first)."""
    from types import SimpleNamespace

    from astuner.model.model_path import resolve_local_model

    out: dict[str, Any] = {}
    for name, entry in cfg.auxiliary_models.items():
        if entry.base_url:
            out[name] = endpoint_model(name, entry)
            continue
        engine, path = (served or {}).get(name) or (None, None)
        if path is None:
            path = resolve_local_model(entry.path, entry.tiny, f"astuner.auxiliary_models.{name}", list(extra_roots))
        settings = SimpleNamespace(model_path=path, temperature=entry.temperature, top_p=entry.top_p,
                                   max_tokens=entry.max_tokens, max_model_len=entry.max_model_len,
                                   enable_thinking=entry.enable_thinking)
        if engine is not None:  # the backbone's engine: a light wrapper per episode
            out[name] = frozen_model(settings, name, engine, _tokenizer(path, name))
            continue
        built = (name, *vars(settings).values())
        if built not in _BUILT:
            _BUILT[built] = frozen_model(settings, name)
        out[name] = _BUILT[built]
    return out
