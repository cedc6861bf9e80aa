"""A model folder's parameter names, read without torch: the safetensors index's weight map, else each
safetensors file's header (8 bytes of length, then a JSON table of the tensors). None where the folder holds
no safetensors (a .bin checkpoint needs torch to be read)."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Optional

INDEX = "model.safetensors.index.json"
MAX_HEADER = 100 * 2**20  # a header past this is not a safetensors header


def weight_names(folder: Path) -> Optional[list[str]]:
    """The tensor names stored in `folder`'s safetensors; None when there are none, or one cannot be read."""
    index = folder / INDEX
    try:
        if index.is_file():
            weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map")
            return sorted(weight_map) if isinstance(weight_map, dict) and weight_map else None
        files = sorted(folder.glob("*.safetensors"))
        if not files:
            return None
        names: list[str] = []
        for file in files:
            names += safetensors_names(file)
        return names or None
    except (OSError, ValueError, struct.error, AttributeError):
        return None


def safetensors_names(file: Path) -> list[str]:
    """The tensor names in one safetensors file's header (OSError, ValueError or struct.error if unreadable)."""
    with open(file, "rb") as fh:
        (length,) = struct.unpack("<Q", fh.read(8))
        if length > MAX_HEADER:
            raise ValueError(f"{file}: not a safetensors file")
        header = json.loads(fh.read(length))
    return [name for name in header if name != "__metadata__"]


def name_parts(names: list[str]) -> set[str]:
    """Every dotted component of `names` (model.layers.0.mlp.up_proj.weight: model, layers, 0, mlp, ...)."""
    return {part for name in names for part in name.split(".")}
