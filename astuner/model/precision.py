"""The debug backbone's precision recipe (`trainer_common.dtype`).

`bf16` is mixed precision as verl's FSDP runs it: the trainable weights, their gradients and AdamW's state stay
in fp32 (the master copy), and the forward passes — the engine's and the trainer's — compute in bf16 under
`torch.autocast`. Stepping bf16 weights directly would round most small updates away (at lr 1e-6 about 98% of
a bf16 weight's updates are below half its spacing). `auto` is bf16 on CUDA and fp32 on the CPU; bf16 runs on
the CPU too (autocast's CPU bf16 path), so the GPU recipe is tested where no GPU is.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any



def compute_dtype(setting: str, device: str) -> str:
    """"bf16" or "fp32" for `trainer_common.dtype` on `device` ("cpu" / "cuda")."""
    if setting == "auto":
        return "bf16" if device.startswith("cuda") else "fp32"
    return setting


def autocast(device: Any, dtype: str) -> Any:
    """The forward-pass context: bf16 autocast on `device` (a torch.device or its type), else nothing."""
    if dtype != "bf16":
        return nullcontext()
    import torch

    return torch.autocast(device_type=getattr(device, "type", str(device)), dtype=torch.bfloat16)
