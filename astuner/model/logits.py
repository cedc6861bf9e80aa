"""Asking a causal LM for the logits of its last positions only.

transformers' causal LMs take `logits_to_keep=N` and apply the output head to the last N positions, which
spares the [batch, length, vocabulary] tensor of a long prompt (a context of thousands of tokens times a
vocabulary of 150k, of which the engine needs one row and the trainer the response's). Models whose forward
has no such argument get the whole logits, as before.
"""

from __future__ import annotations

import inspect
from typing import Any

_ACCEPTS: dict[type, bool] = {}


def last_logits_kwargs(model: Any, count: int) -> dict[str, int]:
    """`{"logits_to_keep": count}` when `model.forward` takes it, else `{}`."""
    # a peft model (or the LoRA reference) hands its keyword arguments to the model it wraps: ask that one
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    kind = type(inner)
    if kind not in _ACCEPTS:
        _ACCEPTS[kind] = "logits_to_keep" in inspect.signature(inner.forward).parameters
    return {"logits_to_keep": count} if _ACCEPTS[kind] and count > 0 else {}
