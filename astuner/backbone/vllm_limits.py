"""What vLLM refuses when its engines start (minutes into a verl or Trinity run, after Ray), said before launch
from the model's config.json alone: a context (`rollout.max_model_len`) longer than the model's positions, and on
GPUs a KV cache that cannot hold one sequence of that length. Pure Python: neither vLLM nor torch is imported."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

from astuner.errors import ConfigError

KEY = "astuner.rollout.max_model_len"
LONG_ENV = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"  # vLLM's own way to accept a longer context than the model's
# where transformers configs keep the longest sequence a model was built for (vLLM takes the smallest given)
POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "max_sequence_length",
                 "max_seq_length", "seq_len")
GPU_BYTES = 2  # vLLM on GPUs: bf16 / fp16 weights and KV cache


def model_config(run: Any, model_path: Optional[str]) -> Optional[tuple[dict[str, Any], str]]:
    """(the model's config.json, where it came from) from its folder or cached hub snapshot; None when not at hand
    (a tiny model not created yet: `model_positions` knows its size)."""
    from astuner.backbone.vllm_memory import model_folder

    folder = model_folder(model_path or run.astuner.model.path)
    if folder is None or not (folder / "config.json").is_file():
        return None
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return (config, str(Path(folder) / "config.json")) if isinstance(config, dict) else None


def positions_of(config: dict[str, Any]) -> Optional[int]:
    """The longest context a transformers config allows: the smallest of its position limits, times its RoPE
    scaling factor where the scaling extends it (vLLM's reading; 'llama3' and 'longrope' configs give the
    extended length already). None when the config names none."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    limits = [int(text[k]) for k in POSITION_KEYS if isinstance(text.get(k), (int, float)) and text[k] > 0]
    if not limits:
        return None
    positions = min(limits)
    rope = text.get("rope_scaling") or text.get("rope_parameters")
    if isinstance(rope, dict) and isinstance(rope.get("factor"), (int, float)) and rope["factor"] > 1:
        kind = rope.get("rope_type") or rope.get("type")
        if kind not in ("llama3", "longrope", "su", "mrope", "default"):
            original = rope.get("original_max_position_embeddings")
            base = int(original) if kind == "yarn" and isinstance(original, (int, float)) else positions
            positions = max(positions, int(base * rope["factor"]))
    return positions


def model_positions(run: Any, model_path: Optional[str]) -> Optional[tuple[int, str]]:
    """(the model's positions, where they come from) or None when its config is not at hand."""
    found = model_config(run, model_path)
    if found is not None:
        positions = positions_of(found[0])
        return (positions, found[1]) if positions else None
    if run.astuner.model.tiny is not None:
        from astuner.model.tiny_model import TINY_POSITIONS

        return TINY_POSITIONS, "the tiny model's config"
    return None


def check_model_len(run: Any, model_path: Optional[str]) -> None:
    """A ConfigError with both numbers when max_model_len is past the model's positions (vLLM refuses to start
    unless VLLM_ALLOW_LONG_MAX_MODEL_LEN is set)."""
    if os.environ.get(LONG_ENV, "").strip().lower() in ("1", "true"):
        return
    found = model_positions(run, model_path)
    length = run.astuner.rollout.max_model_len
    if found is None or length <= found[0]:
        return
    positions, where = found
    raise ConfigError(f"{KEY} ({length}) is longer than the model's {positions} positions ({where}), which vLLM "
                      f"refuses to start with; set it to {positions} or less")


def check_gpu_kv_cache(run: Any, model_path: Optional[str], gpu_bytes: Optional[int]) -> None:
    """On GPUs: one sequence of max_model_len must fit in the KV cache an engine's GPU has room for
    (gpu_memory_utilization of its memory, less its share of the weights), else vLLM refuses to start. Checked
    where the model's shape and the GPU's memory are known."""
    from astuner.backbone.vllm_memory import model_shape

    shape = model_shape(run, model_path)
    if shape is None or not gpu_bytes:
        return
    ro = run.astuner.rollout
    tp = ro.tensor_model_parallel_size
    per_token = shape.layers * max(1, shape.kv_heads // tp) * shape.head_dim * 2 * GPU_BYTES
    need = per_token * ro.max_model_len
    room = gpu_bytes * ro.gpu_memory_utilization - (shape.parameters or 0) * GPU_BYTES / tp
    if need <= room:
        return
    gib = 2**30
    raise ConfigError(f"one sequence of {KEY} ({ro.max_model_len}) tokens needs {need / gib:.1f} GiB of KV cache per "
                      f"GPU, but gpu_memory_utilization ({ro.gpu_memory_utilization}) of a {gpu_bytes / gib:.0f} GiB "
                      f"GPU leaves {max(room, 0) / gib:.1f} GiB after the weights; lower max_model_len, or raise "
                      f"tensor_model_parallel_size")
