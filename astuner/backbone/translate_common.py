"""Shared helpers of the verl / trinity config translations (pure Python: neither package is imported)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Optional

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


def local_model(run: Any) -> Optional[str]:
    """model.path as a local folder when it is one now (the real run passes the resolved path itself)."""
    from astuner.config.paths import find_user_path

    found = find_user_path(run.astuner.model.path, run.extra_roots)
    return str(found) if found is not None else None


def auxiliary_folders(run: Any, create: bool = False) -> dict[str, str]:
    """The auxiliary models a backbone serves (folders, not endpoints), by name, as absolute paths: created
    (a tiny model) and resolved with `create`, else where they are or will be (the dry run writes nothing)."""
    from astuner.config.paths import find_user_path
    from astuner.model.auxiliary import served_locally
    from astuner.model.model_path import resolve_local_model, tiny_model_folder

    out = {}
    for name in served_locally(run.astuner):
        entry = run.astuner.auxiliary_models[name]
        if create:
            out[name] = str(Path(resolve_local_model(entry.path, entry.tiny, f"astuner.auxiliary_models.{name}",
                                                     list(run.extra_roots))).absolute())
            continue
        found = tiny_model_folder(entry.path) if entry.tiny is not None else find_user_path(entry.path, run.extra_roots)
        out[name] = str(Path(found).absolute()) if found is not None else entry.path
    return out


def check_lora(lora: Any, backbone: str, library: str) -> None:
    """What verl's and Trinity's LoRA cannot carry (both build peft's config from an integer alpha, no dropout):
    a ConfigError naming the key, before anything is written."""
    from astuner.errors import ConfigError

    if lora.dropout:
        raise ConfigError(f"astuner.model.lora.dropout {lora.dropout} cannot be honoured by {library} (its LoRA has no "
                          f"dropout setting); set it to 0 for --backbone {backbone}")
    if not float(lora.alpha).is_integer():
        raise ConfigError(f"astuner.model.lora.alpha {lora.alpha} cannot be honoured by {library} (its lora_alpha is an "
                          f"integer); use a whole number for --backbone {backbone}")


def named_keys(message: str, translated: dict[str, Any], prefix: str, given: Optional[dict[str, Any]] = None) -> str:
    """` (prefix.a.b: value, ...)`: for each key name a library's message gives (`use_remove_padding`,
    `ppo_mini_batch_size`, ...), where the translated config sets it, the way the user sets it (`prefix`: where it
    goes in an astuner YAML): the paths the user's own keys (`given`) set, else the shortest one; '' when none.
    Sequence parallelism is named by its key when the message speaks of it in words."""
    import re

    def leaves(tree: Any, path: str) -> list[tuple[str, Any]]:
        if not isinstance(tree, dict):
            return [(path, tree)]
        return [leaf for k, v in tree.items() for leaf in leaves(v, f"{path}.{k}" if path else str(k))]

    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", message))
    if "sequence parallelism" in message:
        words.add("ulysses_sequence_parallel_size")
    own = {path for path, _ in leaves(given or {}, "")}
    by_name: dict[str, list[tuple[str, Any]]] = {}
    for path, value in leaves(translated, ""):
        name = path.rsplit(".", 1)[-1]
        if "_" in name and name in words:
            by_name.setdefault(name, []).append((path, value))
    found = []
    for paths in by_name.values():
        chosen = [p for p in paths if p[0] in own] or [min(paths, key=lambda p: p[0].count("."))]
        found += [f"{prefix}{path}: {value}" for path, value in chosen]
    return f" ({', '.join(found[:4])})" if found else ""
