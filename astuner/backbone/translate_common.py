"""Shared helpers of the verl / trinity config translations (pure Python: neither package is imported)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

RESERVED_TOP_LEVEL = ("astuner", "trinity", "hydra", "defaults")


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """A copy of `base` with `override` merged in; mappings merge key by key, anything else replaces."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def user_verl_keys(merged: dict[str, Any]) -> dict[str, Any]:
    """Top-level keys of the merged config that belong to verl (everything but astuner/trinity)."""
    return {k: v for k, v in merged.items() if k not in RESERVED_TOP_LEVEL}


def run_root(exp_dir: Path | str, experiment_name: str) -> Path:
    return (Path(exp_dir) / experiment_name).absolute()


def plugin_roots(run: Any) -> list[str]:
    """Where workers in other processes look up the run's plug-ins: the launch folder, then the config's
    folder and its parents (the same order the CLI used)."""
    return [str(Path.cwd().absolute())] + [str(r) for r in run.extra_roots]


def gpu_present() -> bool:
    """Whether this process sees an accelerator (`machine.visible_gpus`: *_VISIBLE_DEVICES, device files); no
    torch import."""
    from astuner.backbone.machine import visible_gpus

    return visible_gpus() > 0


def cpu_mode(run: Any) -> bool:
    """The backbone runs on the CPU: `trainer_common.device: cpu`, or `auto` on a machine without a GPU."""
    device = run.astuner.trainer_common.device
    return device == "cpu" or (device == "auto" and not gpu_present())


def refuse_debug_only(run: Any, backbone: str) -> None:
    """Keys only the debug backbone honours are refused elsewhere, never ignored."""
    from astuner.errors import ConfigError

    if run.astuner.trainer_common.sft.steps > 0:
        raise ConfigError(f"astuner.trainer_common.sft runs on the debug backbone only: warm-start there, then "
                          f"give --backbone {backbone} its checkpoints/global_step_0/model as model.path")
